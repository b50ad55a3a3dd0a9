package egress

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testkit"
)

var (
	testMailPorts   = []uint16{25, 465, 587, 2525}
	testMiningPorts = []uint16{3333, 4444, 5555, 7777, 8888, 9999, 14444, 45700}
)

func TestAbusePorts(t *testing.T) {
	for _, abuse := range []bool{false, true} {
		t.Run("abuse="+strconv.FormatBool(abuse), func(t *testing.T) {
			h := start(t, func(c *Config) { c.Abuse = abuse })
			echo := newEchoServer(t)
			h.resolver.set("smtp.example", []netip.Addr{publicA})
			ports := append(append([]uint16{}, testMailPorts...), testMiningPorts...)
			for _, port := range ports {
				h.dialer.route(ap(publicA, port), echo.addr())
			}
			for _, port := range ports {
				want := VerdictAllowed
				if abuse {
					want = portVerdict(port)
					if want == VerdictAllowed {
						t.Fatalf("port %d not refused by the abuse checks", port)
					}
				}
				hp := "smtp.example:" + strconv.Itoa(int(port))
				for _, req := range []string{
					"CONNECT " + hp + " HTTP/1.1\r\nHost: " + hp + "\r\n",
					"GET http://" + hp + "/ HTTP/1.1\r\nHost: " + hp + "\r\n",
				} {
					resp, raw, c, _ := h.raw(req + h.auth() + "\r\n")
					c.Close()
					got := Verdict(resp.Header.Get(HeaderRefused))
					if got == "" {
						got = VerdictAllowed
					}
					if !abuse && strings.HasPrefix(req, "GET") {
						// The echo server is not HTTP; the request got as far as it.
						if got != VerdictUpstreamFailure && got != VerdictAllowed {
							t.Errorf("%s: %s %s", firstLine(req), resp.Status, got)
						}
						continue
					}
					if got != want {
						t.Errorf("%s: %s %q, want %s", firstLine(req), resp.Status, got, want)
					}
					if abuse && resp.StatusCode != http.StatusForbidden {
						t.Errorf("%s: %s\n%s", firstLine(req), resp.Status, raw)
					}
				}
			}
			evs := h.events.list()
			if !abuse {
				if len(evs) != 0 {
					t.Errorf("events with abuse checks off: %v", evs)
				}
				return
			}
			if len(evs) != 2*len(ports) {
				t.Fatalf("%d events, want %d", len(evs), 2*len(ports))
			}
			for _, ev := range evs {
				if ev.Type != EventAbuse || ev.ComputerID != computer || ev.Host != "smtp.example" || ev.Verdict != portVerdict(ev.Port) || ev.Time.IsZero() {
					t.Errorf("event %+v", ev)
				}
			}
			if d := h.dialer.dials(); len(d) != 0 {
				t.Errorf("dialled %v", d)
			}
			if n := h.resolver.count("smtp.example"); n != 0 {
				t.Errorf("refused ports were resolved %d times", n)
			}
		})
	}
}

// stratum handshakes, as miners send them.
var stratumLogins = map[string][]string{
	"subscribe":     {`{"id": 1, "method": "mining.subscribe", "params": ["cpuminer/2.5.1"]}` + "\n"},
	"authorize":     {`{"params": ["wallet.worker", "x"], "id": 2, "method": "mining.authorize"}` + "\n"},
	"xmrig":         {`{"id":1,"jsonrpc":"2.0","method":"login","params":{"login":"4A...","pass":"x","agent":"XMRig/6.21.0 (Linux x86_64) libuv/1.44.2 gcc/11.4.0","algo":["rx/0"]}}` + "\n"},
	"ethproxy":      {`{"worker":"eth1.0","jsonrpc":"2.0","params":["0xabc","x"],"id":2,"method":"eth_submitLogin"}` + "\n"},
	"no newline":    {`{"id":1,"method":"mining.subscribe","params":[]}`},
	"escaped":       {`{"id":1,"\u006dethod":"mining.subscribe","params":[]}` + "\n"},
	"split":         {`{"id": 1, "method": "mini`, `ng.subscribe", "params": []}` + "\n"},
	"leading space": {"\r\n  " + `{"method":"mining.subscribe"}` + "\n"},
}

func TestStratumHandshakeRefused(t *testing.T) {
	h := start(t, func(c *Config) { c.Abuse = true })
	echo := newEchoServer(t)
	h.resolver.set("pool.example", []netip.Addr{publicA})
	h.dialer.route(ap(publicA, 443), echo.addr())

	for name, parts := range stratumLogins {
		c, br := h.connect("pool.example:443")
		for i, p := range parts {
			if _, err := io.WriteString(c, p); err != nil {
				break
			}
			if i < len(parts)-1 {
				// Let the first part through before the rest.
				time.Sleep(20 * time.Millisecond)
			}
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(br)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: tunnel left open", name)
		}
		if strings.Contains(string(got), "mining") || strings.Contains(string(got), "login") {
			t.Errorf("%s: the pool answered: %q", name, got)
		}
		c.Close()
	}
	for _, s := range []string{"mining.", "login", "agent", "eth_submitLogin"} {
		if strings.Contains(echo.received(), s) {
			t.Errorf("upstream received %q: %q", s, echo.received())
		}
	}
	testkit.EventuallyContext(t, testContext(t), "no connection left active", func() bool { return h.p.Stats().Active == 0 })
	if got := h.p.Stats().Verdicts[VerdictAbuseMining]; got != uint64(len(stratumLogins)) {
		t.Errorf("%d mining verdicts, want %d", got, len(stratumLogins))
	}
	evs := h.events.list()
	if len(evs) != len(stratumLogins) {
		t.Fatalf("%d events, want %d", len(evs), len(stratumLogins))
	}
	for _, ev := range evs {
		if ev.Type != EventAbuse || ev.Verdict != VerdictAbuseMining || ev.ComputerID != computer || ev.Host != "pool.example" || ev.Port != 443 {
			t.Errorf("event %+v", ev)
		}
	}
	if !strings.Contains(h.logs.String(), `closed="stratum login"`) {
		t.Error("log does not say why the tunnel was closed")
	}
}

// Other traffic, and stratum with the checks off, goes through.
func TestStratumOthersPass(t *testing.T) {
	others := []string{
		`{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}` + "\n",
		`{"id":1,"method":"login","params":{"user":"me","pass":"x"}}` + "\n",
		`{"greeting":"mining.subscribe is a string here"}` + "\n",
		"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"SSH-2.0-OpenSSH_9.6\r\n",
	}
	for _, abuse := range []bool{true, false} {
		h := start(t, func(c *Config) { c.Abuse = abuse })
		echo := newEchoServer(t)
		h.resolver.set("rpc.example", []netip.Addr{publicA})
		h.dialer.route(ap(publicA, 443), echo.addr())
		msgs := others
		if !abuse {
			msgs = nil
			for _, parts := range stratumLogins {
				msgs = append(msgs, strings.Join(parts, ""))
			}
		}
		for _, m := range msgs {
			c, br := h.connect("rpc.example:443")
			io.WriteString(c, m)
			c.(*net.TCPConn).CloseWrite()
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(br)
			if err != nil || string(got) != m+"bye" {
				t.Errorf("abuse=%v %q: got %q, %v", abuse, m, got, err)
			}
			c.Close()
		}
		if len(h.events.list()) != 0 {
			t.Errorf("abuse=%v: events %v", abuse, h.events.list())
		}
	}
}

func TestStratumSniffer(t *testing.T) {
	for name, parts := range stratumLogins {
		var s stratumSniffer
		hit := false
		for _, p := range parts {
			hit = hit || s.feed([]byte(p))
		}
		if !hit {
			t.Errorf("%s: not detected", name)
		}
	}
	// After a non-stratum first message the sniffer stops looking.
	var s stratumSniffer
	if s.feed([]byte(`{"method":"hello"}` + "\n")) {
		t.Fatal("hello detected")
	}
	if s.feed([]byte(`{"method":"mining.subscribe"}` + "\n")) {
		t.Error("looked past the first message")
	}
	// A long first message is looked at only up to sniffLimit.
	var long stratumSniffer
	if long.feed([]byte(`{"pad":"` + strings.Repeat("x", 2*sniffLimit) + `"}`)) {
		t.Fatal("padding detected")
	}
	if len(long.buf) > sniffLimit || !long.done {
		t.Errorf("kept %d bytes, done=%v", len(long.buf), long.done)
	}
}
