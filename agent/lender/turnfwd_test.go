package lender

import (
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/agent/control"
	"github.com/berthdev/berth/providers/docker"
)

// echoRelay stands in for the TURN relay: it echoes UDP packets, after
// tag, and TCP bytes, on one port for both.
func echoRelay(t *testing.T, tag string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", pc.LocalAddr().String())
	if err != nil {
		pc.Close()
		t.Skipf("no TCP port beside UDP %s: %v", pc.LocalAddr(), err)
	}
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 2048)
		for {
			n, src, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte(tag), buf[:n]...), src)
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	t.Cleanup(func() { pc.Close(); ln.Close(); <-done; <-done })
	return pc.LocalAddr().String()
}

// TestTURNForward: UDP packets and TCP streams reach the relay through the
// forwarder and come back to their sender, each UDP sender on a flow of
// its own; a moved relay takes new flows; closing ends every flow.
func TestTURNForward(t *testing.T) {
	relay := echoRelay(t, "a:")
	f, err := startTURNForward("127.0.0.1", relay, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	addr := net.JoinHostPort(f.host, strconv.Itoa(f.port))

	udp := func(msg string) string {
		t.Helper()
		c, err := net.Dial("udp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 64)
		n, err := c.Read(got)
		if err != nil {
			t.Fatalf("UDP through the forwarder: %v", err)
		}
		return string(got[:n])
	}
	for _, msg := range []string{"u0", "u1"} {
		if got := udp(msg); got != "a:"+msg {
			t.Fatalf("UDP through the forwarder: %q, want %q", got, "a:"+msg)
		}
	}
	f.mu.Lock()
	flows := len(f.flows)
	f.mu.Unlock()
	if flows != 2 {
		t.Errorf("UDP flows: %d, want one per sender (2)", flows)
	}

	tc, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	tc.Write([]byte("turn over tcp"))
	got := make([]byte, len("turn over tcp"))
	if _, err := io.ReadFull(tc, got); err != nil || string(got) != "turn over tcp" {
		t.Fatalf("TCP through the forwarder: %q %v", got, err)
	}

	// The relay moved: a new sender reaches the new one.
	f.setTarget(echoRelay(t, "b:"))
	if got := udp("u2"); got != "b:u2" {
		t.Errorf("UDP after the relay moved: %q, want %q", got, "b:u2")
	}

	f.close()
	// The TCP stream was cut.
	if _, err := tc.Read(got); err == nil {
		t.Error("a TCP stream outlived the forwarder")
	}
	f.mu.Lock()
	flows, conns := len(f.flows), len(f.conns)
	f.mu.Unlock()
	if flows != 0 || conns != 0 {
		t.Errorf("after close: %d UDP flows, %d TCP connections", flows, conns)
	}
}

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
