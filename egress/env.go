package egress

import (
	"maps"
	"net/url"
)

// ProxyVars are the variables that point a computer's programs at a proxy,
// in the upper-case and lower-case forms that different programs read. A
// computer's environment is built with ProxyEnv or WithoutProxyEnv, never
// by hand, so that every maker of computers sets (or removes) the same
// list:
//
//   - HTTP_PROXY, HTTPS_PROXY, http_proxy, https_proxy: the egress proxy,
//     with the computer's own credentials;
//   - NO_PROXY, no_proxy: empty, so every destination goes through the
//     proxy (the proxy itself refuses private addresses);
//   - ALL_PROXY, all_proxy: never set; removed, so that no other proxy
//     that a caller's variables named lingers.
var ProxyVars = []string{
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
	"http_proxy", "https_proxy", "no_proxy", "all_proxy",
}

// ProxyURL is the egress proxy at addr (host:port) as a computer names it:
// the user is the computer's id, the password its egress token.
func ProxyURL(addr, computerID, password string) string {
	return (&url.URL{Scheme: "http", User: url.UserPassword(computerID, password), Host: addr}).String()
}

// ProxyEnv returns a copy of env whose proxy variables (ProxyVars) send the
// computer's traffic through the egress proxy at addr, with the computer's
// id and egress password; the other variables are kept.
func ProxyEnv(env map[string]string, addr, computerID, password string) map[string]string {
	out := WithoutProxyEnv(env)
	u := ProxyURL(addr, computerID, password)
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		out[k] = u
	}
	out["NO_PROXY"], out["no_proxy"] = "", ""
	return out
}

// WithoutProxyEnv returns a copy of env (never nil) without any of
// ProxyVars: for a computer that has no egress proxy, or cannot reach it.
func WithoutProxyEnv(env map[string]string) map[string]string {
	out := make(map[string]string, len(env)+len(ProxyVars))
	maps.Copy(out, env)
	for _, k := range ProxyVars {
		delete(out, k)
	}
	return out
}
