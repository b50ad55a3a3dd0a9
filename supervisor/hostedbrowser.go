package supervisor

import (
	"regexp"
	"slices"
	"strings"
)

// countryRE is the form of a connection's browserProxyCountry: a
// lowercase ISO 3166-1 alpha-2 code. Which countries a provider's proxy
// serves is the provider's to say: one it lacks fails the start with the
// provider's refusal.
var countryRE = regexp.MustCompile(`^[a-z]{2}$`)

// browserOptions checks the hosted browser options of a new connection:
// they apply only to providers whose sessions are hosted browsers
// (BrowserSession), and a proxy country must be a lowercase two-letter
// code.
func (s *Service) browserOptions(r ConnectRequest) error {
	if !r.BrowserRecording && r.BrowserProxyCountry == "" {
		return nil
	}
	if _, ok := s.cfg.Providers[r.Provider].(BrowserSession); !ok {
		field := "browserRecording"
		if !r.BrowserRecording {
			field = "browserProxyCountry"
		}
		return badRequest("%s: only hosted browser providers (%s) take it; the %s provider gives computers", field, strings.Join(s.browserProviders(), ", "), r.Provider)
	}
	if r.BrowserProxyCountry != "" && !countryRE.MatchString(r.BrowserProxyCountry) {
		return badRequest("browserProxyCountry: %q must be a lowercase ISO 3166-1 alpha-2 country code such as us or de, or left out for no proxy", r.BrowserProxyCountry)
	}
	return nil
}

// browserProviders names the configured providers whose sessions are
// hosted browsers, sorted; "none configured" when there is none.
func (s *Service) browserProviders() []string {
	var ids []string
	for id, p := range s.cfg.Providers {
		if _, ok := p.(BrowserSession); ok {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return []string{"none configured here"}
	}
	slices.Sort(ids)
	return ids
}
