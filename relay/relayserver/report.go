package relayserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// With several relays, each one reports the lenders it holds to the
// supervisor, which records them in its store with a lease (RELAY_URL=lookup
// on the supervisor). The relay names itself by its internal API's URL, the
// address supervisors send lenders' requests to.
const (
	// ReportPath is the supervisor's endpoint for a relay's report: POST a
	// Report with RELAY_TOKEN in TokenHeader, answered 204.
	ReportPath = "/v1/internal/relay/lenders"
	// DefaultReportInterval is how often a relay reports, besides at once
	// after each connect and disconnect.
	DefaultReportInterval = 2 * time.Second
	// Lease bounds, in seconds: how long a report's online lenders stay
	// recorded without the next one.
	MinLeaseSeconds = 2
	MaxLeaseSeconds = 300
	// MaxReportLenders bounds a report's lenders.
	MaxReportLenders = 10000
	// MaxReportBytes bounds a report's body.
	MaxReportBytes = 4 << 20
	// maxRelayURL bounds the relay's own URL.
	maxRelayURL = 512
	maxLenderID = 128
)

// Report is a relay's report of the lenders it holds.
type Report struct {
	// Relay is the relay's internal API, as supervisors reach it.
	Relay string `json:"relay"`
	// LeaseSeconds is how long the online lenders stay recorded unless
	// the next report renews them.
	LeaseSeconds int `json:"leaseSeconds"`
	// Lenders are the lenders the relay holds, which hold their lease,
	// and those that left it within the last lease, which end the link
	// they had here.
	Lenders []PresenceInfo `json:"lenders"`
}

// Check validates a report, naming the field and its limit.
func (r Report) Check() error {
	if err := CheckRelayURL(r.Relay); err != nil {
		return err
	}
	if r.LeaseSeconds < MinLeaseSeconds || r.LeaseSeconds > MaxLeaseSeconds {
		return fmt.Errorf("leaseSeconds: %d is not within %d..%d", r.LeaseSeconds, MinLeaseSeconds, MaxLeaseSeconds)
	}
	if len(r.Lenders) > MaxReportLenders {
		return fmt.Errorf("lenders: %d is more than %d", len(r.Lenders), MaxReportLenders)
	}
	for i, l := range r.Lenders {
		if l.LenderID == "" || len(l.LenderID) > maxLenderID {
			return fmt.Errorf("lenders[%d].agentId: want 1 to %d characters", i, maxLenderID)
		}
	}
	return nil
}

// CheckRelayURL checks a relay's internal API URL: http or https, a host,
// no path, query, fragment or user, at most 512 characters.
func CheckRelayURL(s string) error {
	if len(s) > maxRelayURL {
		return fmt.Errorf("relay: %d characters, more than %d", len(s), maxRelayURL)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("relay: %q is not http(s)://HOST:PORT of a relay's internal API", s)
	}
	return nil
}

// ReportConfig configures Server.Report.
type ReportConfig struct {
	// SupervisorURL is where reports go (ReportPath on it).
	SupervisorURL string
	// Token is RELAY_TOKEN.
	Token string
	// Advertise is this relay's internal API as supervisors reach it.
	Advertise string
	// Interval spaces reports (DefaultReportInterval when zero); each
	// report's lease is three intervals, at least MinLeaseSeconds.
	Interval time.Duration
	// HTTPClient sends reports; nil is a client with a 5 s timeout.
	HTTPClient *http.Client
}

// Report sends the relay's lenders to the supervisor every interval and
// at once after each connect and disconnect, until ctx ends. It logs a
// failing supervisor once, and again once it answers.
func (s *Server) Report(ctx context.Context, c ReportConfig) error {
	if err := CheckRelayURL(c.Advertise); err != nil {
		return fmt.Errorf("advertise: %w", err)
	}
	if c.Interval <= 0 {
		c.Interval = DefaultReportInterval
	}
	lease := int((3*c.Interval + time.Second - 1) / time.Second)
	lease = min(max(lease, MinLeaseSeconds), MaxLeaseSeconds)
	hc := c.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	endpoint := strings.TrimRight(c.SupervisorURL, "/") + ReportPath
	failing := false
	for {
		// An offline lender is reported for one lease after it left, which
		// ends its row at once; after that the row's lease has run out
		// anyway, and the store is not written for it again.
		rep := Report{Relay: c.Advertise, LeaseSeconds: lease, Lenders: []PresenceInfo{}}
		since := s.clock.Now().Add(-time.Duration(lease) * time.Second)
		for _, p := range s.Lenders() {
			if p.Online || p.LastSeen.After(since) {
				rep.Lenders = append(rep.Lenders, info(p))
			}
		}
		err := postReport(ctx, hc, endpoint, c.Token, rep)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			s.log.Warn("report to the supervisor failed; retrying each interval", "err", err)
			failing = true
		case err == nil && failing:
			s.log.Info("reports reach the supervisor again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.clock.After(c.Interval):
		case <-s.changed:
		}
	}
}

func postReport(ctx context.Context, hc *http.Client, endpoint, token string, rep Report) error {
	body, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(TokenHeader, token)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return errors.New("supervisor answered " + resp.Status + ": " + strings.TrimSpace(string(msg)))
	}
	return nil
}
