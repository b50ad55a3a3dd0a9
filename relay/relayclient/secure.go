package relayclient

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// CheckURL reports whether rawURL may carry the agent's token: wss:// and
// https:// go anywhere, plain ws:// and http:// only to a loopback host
// (127.0.0.0/8, ::1 or localhost), unless insecure allows them anyway.
// The error, wrapping ErrInsecureURL, names the URL and --insecure.
// rawURL may name several relays separated by commas; each is checked.
func CheckURL(rawURL string, insecure bool) error {
	urls := URLs(rawURL)
	if len(urls) == 0 {
		return fmt.Errorf("URL %q: no relay named", rawURL)
	}
	if len(urls) > MaxURLs {
		return fmt.Errorf("URL: %d relays named, more than %d", len(urls), MaxURLs)
	}
	for _, u := range urls {
		if err := checkOne(u, insecure); err != nil {
			return err
		}
	}
	return nil
}

// MaxURLs bounds how many relays one agent may name.
const MaxURLs = 16

// URLs splits a relay URL setting that names several relays, separated by
// commas, into its URLs.
func URLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

func checkOne(rawURL string, insecure bool) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("URL %q: %w", rawURL, err)
	}
	switch strings.ToLower(u.Scheme) {
	case "wss", "https":
		return nil
	case "ws", "http":
	default:
		return fmt.Errorf("URL %q: scheme %q is not ws, wss, http or https", rawURL, u.Scheme)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("URL %q: no host", rawURL)
	}
	if insecure || IsLoopback(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("%w: %s would send the agent's token in clear; use %s://, or give --insecure to allow it",
		ErrInsecureURL, rawURL, secureScheme(u.Scheme))
}

// IsLoopback reports whether host (a name or an address, without port)
// is localhost or a loopback address.
func IsLoopback(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// plaintext reports whether rawURL is a ws:// or http:// URL to a host
// that is not loopback, which only Config.Insecure allows.
func plaintext(rawURL string) bool {
	return CheckURL(rawURL, false) != nil && CheckURL(rawURL, true) == nil
}

func secureScheme(scheme string) string {
	if strings.EqualFold(scheme, "http") {
		return "https"
	}
	return "wss"
}
