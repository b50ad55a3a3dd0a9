package supervisor_test

import (
	"context"
	"strings"
	"testing"

	"github.com/berthdev/berth/providers"
)

// envProvider records the environment its computers are created with.
type envProvider struct {
	p   *pooler
	env map[string]string
}

func (e *envProvider) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	e.env = spec.Env
	return e.p.Create(ctx, spec)
}

func (e *envProvider) Destroy(ctx context.Context, id string) error { return e.p.Destroy(ctx, id) }

// egressUser is an envProvider whose computers reach the egress proxy.
type egressUser struct{ *envProvider }

func (egressUser) UsesSupervisorEgress() bool { return true }

// TestEgressOnlyForItsUsers: the egress proxy's address and a computer's
// credentials go only to providers whose computers reach the proxy; a
// lender's, another supervisor's or a hosted provider's computers never
// receive them.
func TestEgressOnlyForItsUsers(t *testing.T) {
	for _, uses := range []bool{false, true} {
		rec := &envProvider{p: &pooler{}}
		var prov providers.Provider = rec
		if uses {
			prov = egressUser{rec}
		}
		svc, st := poolService(t, prov, rec.p, nil)
		ctx := testContext(t)
		if _, err := svc.Start(ctx, "a1"); err != nil {
			t.Fatal(err)
		}
		x, err := st.LiveSession(ctx, "a1")
		if err != nil {
			t.Fatal(err)
		}
		var proxy []string
		for k, v := range rec.env {
			if strings.Contains(strings.ToLower(k), "proxy") || strings.Contains(v, "10.0.0.1:3128") {
				proxy = append(proxy, k+"="+v)
			}
		}
		switch {
		case !uses && len(proxy) > 0:
			t.Errorf("a provider whose computers do not use the egress proxy was given %v", proxy)
		case uses && !strings.HasPrefix(rec.env["HTTP_PROXY"], "http://"+x.ComputerID+":"):
			t.Errorf("an egress user's computer has HTTP_PROXY %q, want its own credentials", rec.env["HTTP_PROXY"])
		}
	}
}
