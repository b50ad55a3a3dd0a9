package turnfwd

import (
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"
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
	f, err := Start("127.0.0.1", relay, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
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
	f.SetTarget(echoRelay(t, "b:"))
	if got := udp("u2"); got != "b:u2" {
		t.Errorf("UDP after the relay moved: %q, want %q", got, "b:u2")
	}

	f.Close()
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
