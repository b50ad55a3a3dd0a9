package api

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Preview is the answer of POST .../computer/ports/{port}/preview: a URL
// through the supervisor to that port inside the computer, valid until
// ExpiresAt or the session's end, whichever comes first.
type Preview struct {
	URL       string    `json:"url"`
	Port      int       `json:"port"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Preview returns a URL that reaches port inside the agent's running
// computer.
func (c *Client) Preview(ctx context.Context, agent string, port int) (*Preview, error) {
	var out Preview
	if err := c.agentCall(ctx, http.MethodPost, agent, fmt.Sprintf("/ports/%d/preview", port), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
