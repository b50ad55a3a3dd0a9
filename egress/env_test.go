package egress_test

import (
	"maps"
	"net/url"
	"slices"
	"testing"

	"github.com/berthdev/berth/egress"
)

// TestProxyVarsList pins the variables every computer's environment gets
// (or loses): a change here changes what every provider's computers see.
func TestProxyVarsList(t *testing.T) {
	want := []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy"}
	if !slices.Equal(egress.ProxyVars, want) {
		t.Fatalf("ProxyVars = %q, want %q", egress.ProxyVars, want)
	}
}

func TestProxyEnv(t *testing.T) {
	in := map[string]string{"HTTP_PROXY": "http://other:pw@10.0.0.9:3128", "no_proxy": "*", "ALL_PROXY": "socks5://x",
		"all_proxy": "socks5://y", "LANG": "C.UTF-8"}
	orig := maps.Clone(in)
	env := egress.ProxyEnv(in, "10.213.0.1:3129", "c1", "p@ss/word")
	if !maps.Equal(in, orig) {
		t.Fatal("the caller's map was changed")
	}
	want := map[string]string{"LANG": "C.UTF-8", "NO_PROXY": "", "no_proxy": ""}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		u, err := url.Parse(env[k])
		if err != nil {
			t.Fatalf("%s=%q: %v", k, env[k], err)
		}
		pass, _ := u.User.Password()
		if u.Scheme != "http" || u.User.Username() != "c1" || pass != "p@ss/word" || u.Host != "10.213.0.1:3129" {
			t.Fatalf("%s=%q", k, env[k])
		}
		want[k] = env[k]
	}
	if !maps.Equal(env, want) {
		t.Fatalf("env = %v, want %v", env, want)
	}
}

func TestWithoutProxyEnv(t *testing.T) {
	in := map[string]string{"LANG": "C.UTF-8"}
	for _, k := range egress.ProxyVars {
		in[k] = "x"
	}
	if env := egress.WithoutProxyEnv(in); !maps.Equal(env, map[string]string{"LANG": "C.UTF-8"}) {
		t.Fatalf("env = %v", env)
	}
	if env := egress.WithoutProxyEnv(nil); env == nil || len(env) != 0 {
		t.Fatalf("nil env: %v", env)
	}
}
