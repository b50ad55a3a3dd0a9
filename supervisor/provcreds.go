package supervisor

import (
	"context"
	"encoding/json"

	"github.com/berthdev/berth/providers"
)

// withCredentials returns ctx carrying the credentials of the agent's
// connection (providers.WithCredentials), for the provider calls that take
// no Spec: Destroy and List. Hosted providers need them to reach the
// account the machine lives in. When they cannot be read, ctx is returned
// as it is and the provider answers without them.
func (s *Service) withCredentials(ctx context.Context, agent string) context.Context {
	c, err := s.st.GetConnection(ctx, agent)
	if err != nil {
		return ctx
	}
	creds, err := s.credentials(c)
	if err != nil {
		s.log.Warn("credentials unreadable for a provider call", "agent", agent, "err", err)
		return ctx
	}
	return providers.WithCredentials(ctx, creds)
}

// credentialSets returns one context per distinct set of credentials among
// the provider's connections, so that List reaches every account in use;
// with no connections it returns ctx alone.
func (s *Service) credentialSets(ctx context.Context, provider string) []context.Context {
	conns, err := s.st.Connections(ctx)
	if err != nil {
		return []context.Context{ctx}
	}
	seen := map[string]bool{}
	var out []context.Context
	for _, c := range conns {
		if c.Provider != provider {
			continue
		}
		creds, err := s.credentials(c)
		if err != nil {
			continue
		}
		key, _ := json.Marshal(creds) // map keys are sorted
		if seen[string(key)] {
			continue
		}
		seen[string(key)] = true
		out = append(out, providers.WithCredentials(ctx, creds))
	}
	if len(out) == 0 {
		out = append(out, ctx)
	}
	return out
}
