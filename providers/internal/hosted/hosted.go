// Package hosted holds what the hosted providers (e2b, novita, daytona,
// modal) share around their API calls: the check of their API URL
// setting and of a connection's credentials, and the environment and
// timeout a hosted machine is made with.
package hosted

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
)

// DefaultLease is the lease a machine gets its timeout from when its spec
// names none.
const DefaultLease = 15 * time.Minute

// APIURL checks that raw, the value of setting, is an http(s) URL with a
// host, and returns it without a trailing slash.
func APIURL(setting, raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s %q is not an http(s) URL", setting, raw)
	}
	return strings.TrimRight(raw, "/"), nil
}

// Env returns the environment a hosted machine of spec is made with: the
// computer's variables without the egress proxy's, which a hosted machine
// cannot use (providers.HostedEnv), and the token hash and computer id
// computerd starts with. It never holds the connection's credentials.
func Env(spec providers.Spec) map[string]string {
	env := providers.HostedEnv(spec.Env)
	env[computerd.EnvTokenHash] = spec.TokenHash
	env[computerd.EnvComputerID] = spec.ComputerID
	return env
}

// Timeout is the provider's own timeout for a machine of spec: the lease
// (DefaultLease when unset) plus grace, so that the provider ends the
// machine shortly after the supervisor should have, if it could not.
func Timeout(spec providers.Spec, grace time.Duration) time.Duration {
	lease := spec.Lease
	if lease <= 0 {
		lease = DefaultLease
	}
	return lease + grace
}

// maxMessage bounds the provider's message Message returns.
const maxMessage = 200

// Message returns the message of an API's error answer raw: its JSON
// "message" field, or else its text, at most 200 bytes.
func Message(raw []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &e) != nil || e.Message == "" {
		e.Message = strings.TrimSpace(string(raw))
	}
	if len(e.Message) > maxMessage {
		e.Message = e.Message[:maxMessage]
	}
	return e.Message
}

// Credential is one credential a provider takes.
type Credential struct {
	Name string
	// Want says what to give, named when it is missing ("a Daytona API
	// key"); empty for an optional one.
	Want     string
	Optional bool
}

// Credentials are the credentials a provider takes.
type Credentials struct {
	Provider string // named in messages
	List     []Credential
}

// Check refuses a credential the provider does not take and a required
// one that is missing or blank, naming it.
func (cs Credentials) Check(c map[string]string) error {
	for k := range c {
		if !cs.takes(k) {
			return fmt.Errorf("%q is not a %s credential: want %s", k, cs.Provider, cs.wanted())
		}
	}
	for _, cr := range cs.List {
		if !cr.Optional && strings.TrimSpace(c[cr.Name]) == "" {
			return fmt.Errorf("%s is missing: want %s", cr.Name, cr.Want)
		}
	}
	return nil
}

func (cs Credentials) takes(k string) bool {
	for _, cr := range cs.List {
		if cr.Name == k {
			return true
		}
	}
	return false
}

// wanted lists the credentials: "apiKey", "tokenId" and "tokenSecret",
// "apiKey" and optionally "organizationId".
func (cs Credentials) wanted() string {
	var req, opt []string
	for _, cr := range cs.List {
		if cr.Optional {
			opt = append(opt, strconv.Quote(cr.Name))
		} else {
			req = append(req, strconv.Quote(cr.Name))
		}
	}
	s := strings.Join(req, " and ")
	if len(opt) > 0 {
		s += " and optionally " + strings.Join(opt, " and ")
	}
	return s
}
