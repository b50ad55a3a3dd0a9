package lender

import (
	"strings"
	"testing"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/providers/docker"
)

// TestTURNTarget: the forwarder connects to the owner's --turn-relay, or
// to the paired supervisor's own host when that is public; never to a
// private address, loopback or this machine's own address because a
// supervisor is there, and never on the supervisor's word alone.
func TestTURNTarget(t *testing.T) {
	own := "127.0.0.2"
	if ip, err := docker.BridgeIPv4(); err == nil {
		own = ip.String()
	}
	for _, tc := range []struct {
		pairing, relay string
		want           string // "" is refused
	}{
		{pairing: "https://93.184.216.34/", want: "93.184.216.34:34780"},
		{pairing: "https://93.184.216.34:8443/", relay: "10.1.2.3:3478", want: "10.1.2.3:3478"},
		{pairing: "http://127.0.0.1:8080/"},
		{pairing: "http://192.168.1.10:8080/"},
		{pairing: "http://10.0.0.5/"},
		{pairing: "http://169.254.169.254/"},
		{pairing: "http://[::1]:8080/"},
		{pairing: "http://" + own + ":8080/"},
		{pairing: ""},
		{pairing: "https://93.184.216.34/", relay: "no-port"},
		{pairing: "https://93.184.216.34/", relay: "10.1.2.3:70000"},
	} {
		l := &core{cfg: Config{TURNRelay: tc.relay, Pairing: control.Pairing{URL: tc.pairing}}}
		got, err := l.turnTarget(34780)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("pairing %q relay %q: target %s, want refused", tc.pairing, tc.relay, got)
		case tc.want != "" && (err != nil || got.String() != tc.want):
			t.Errorf("pairing %q relay %q: %s %v, want %s", tc.pairing, tc.relay, got, err, tc.want)
		}
		if tc.want == "" && err != nil && tc.pairing != "" && tc.relay == "" && !strings.Contains(err.Error(), "--turn-relay") {
			t.Errorf("pairing %q: the refusal does not say what to do: %v", tc.pairing, err)
		}
	}
}
