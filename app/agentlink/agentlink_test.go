package agentlink

import (
	"testing"

	"github.com/berthdev/berth/agent/control"
)

func TestStateOf(t *testing.T) {
	paired := control.Pairing{Paired: true, URL: "https://berth.example.com", LenderID: "cp_1"}
	online := control.RelayStatus{Online: true}
	for _, c := range []struct {
		s    control.Status
		want State
	}{
		{control.Status{Lending: true, Supervisor: paired, Relay: online}, StateLending},
		{control.Status{Lending: true, Supervisor: paired, Relay: online, Sessions: 2}, StateBusy},
		{control.Status{Lending: false, Supervisor: paired, Relay: online, Sessions: 1}, StatePaused},
		{control.Status{Lending: true, Supervisor: paired}, StateOffline},
		{control.Status{Lending: false, Supervisor: paired}, StatePaused},
		{control.Status{Lending: true}, StateLending}, // not paired: no relay to be offline from
	} {
		if got := StateOf(c.s); got != c.want {
			t.Errorf("StateOf(%+v) = %s, want %s", c.s, got, c.want)
		}
	}
}

func TestNearlySpent(t *testing.T) {
	for _, c := range []struct {
		today, budget int64
		want          bool
	}{{0, 3600, false}, {3239, 3600, false}, {3240, 3600, true}, {4000, 3600, true}, {10, 0, false}} {
		u := control.Usage{Today: control.DayUsage{Seconds: c.today}, DailySeconds: c.budget}
		if got := NearlySpent(u); got != c.want {
			t.Errorf("NearlySpent(%d of %d) = %v, want %v", c.today, c.budget, got, c.want)
		}
	}
}
