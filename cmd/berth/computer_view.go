package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berthdev/berth/api"
)

func init() { addSubcommand("computer", newComputerViewCmd) }

// viewGrant is the answer of POST /v1/agents/{agent}/computer/view.
type viewGrant struct {
	Session      string    `json:"session"`
	Viewer       string    `json:"viewer"`
	URL          string    `json:"url"`
	ExpiresAt    time.Time `json:"expiresAt"`
	DesktopUsers int       `json:"desktopUsers"`
	Viewers      int       `json:"viewers"`
}

func newComputerViewCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "view",
		Short: "Print a link that shows the agent's desktop live in a browser",
		Long: `view asks the supervisor for a live-view link to the agent's running
desktop computer (connected with "image": "desktop") and prints it. The
link carries a short-lived view token for this session only; the page
renews it while it stays open. The computer's encoder starts now, so the
page shows the screen at once. A desktop takes DESKTOP_USERS viewers at
once; past that the supervisor answers desktop_busy.

With --terminal the page also opens a terminal on the computer beside the
screen, as berth computer shell --link does: the link then lets whoever
opens it type into the computer, once.`,
		Example: "  berth computer view --agent a1\n  berth computer view --agent a1 --terminal",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agent, err := agentOf(cmd)
			if err != nil {
				return err
			}
			token := flagOrEnv(cmd, "token", "SUPERVISOR_TOKEN", "")
			if token == "" {
				return usagef("no operator token: set SUPERVISOR_TOKEN or pass --token")
			}
			base := strings.TrimRight(flagOrEnv(cmd, "url", "BERTH_URL", defaultURL), "/")
			if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usagef("--url %q: want http://HOST:PORT or https://HOST", base)
			}
			withTerm, _ := cmd.Flags().GetBool("terminal")
			body, _ := json.Marshal(api.ViewRequest{Terminal: withTerm})
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodPost, base+"/v1/agents/"+url.PathEscape(agent)+"/computer/view", bytes.NewReader(body))
			if err != nil {
				return usageError{err}
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("User-Agent", "berth/"+version)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			if err != nil {
				return err
			}
			if resp.StatusCode/100 != 2 {
				var e struct {
					Error api.APIError `json:"error"`
				}
				if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" {
					return fmt.Errorf("view: %s: %s", resp.Status, strings.TrimSpace(string(raw)))
				}
				e.Error.Status = resp.StatusCode
				return &e.Error
			}
			var g viewGrant
			if err := json.Unmarshal(raw, &g); err != nil || g.URL == "" {
				return fmt.Errorf("view: unexpected answer %q", raw)
			}
			if jsonOutput(cmd) {
				var v any
				json.Unmarshal(raw, &v)
				return printJSON(cmd, v)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintln(out, g.URL)
			fmt.Fprintf(cmd.ErrOrStderr(), "live view of session %s (viewer %d of %d); the link works until %s unless the page keeps it fresh\n",
				g.Session, g.Viewers, g.DesktopUsers, g.ExpiresAt.Local().Format(time.TimeOnly))
			return nil
		},
	}
	cmd.Flags().Bool("terminal", false, "open a terminal on the computer beside the screen")
	return cmd
}
