package helm

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/berthdev/berth/agent/lender"
	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/relay"
)

// supervisorsFront stands in for the supervisors' Service, which this
// cluster cannot route (it runs no kube-proxy): it takes connections on
// ln and passes each to the next supervisor pod in turn, until ctx ends.
func supervisorsFront(ctx context.Context, t *testing.T, ln net.Listener, pods []corev1.Pod) {
	t.Helper()
	var next atomic.Uint32
	var wg sync.WaitGroup
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			pod := pods[int(next.Add(1))%len(pods)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				var d net.Dialer
				s, err := d.DialContext(ctx, "tcp", net.JoinHostPort(pod.Status.PodIP, "8080"))
				if err != nil {
					return
				}
				defer s.Close()
				go func() {
					<-ctx.Done()
					c.Close()
					s.Close()
				}()
				go io.Copy(s, c)
				io.Copy(c, s)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
}

// lendThroughRelays pairs two lending agents on this machine's Docker
// engine with the chart's supervisors and links each to the chart's two
// relay pods, in a different order; a computer on each lender is then
// started through one supervisor and used through the other.
func lendThroughRelays(ctx context.Context, t *testing.T, a, b *api.Client, token string, relayPods []corev1.Pod) {
	t.Helper()
	if len(relayPods) != 2 {
		t.Fatalf("%d relay pods, want 2", len(relayPods))
	}
	var urls []string
	for _, p := range relayPods {
		urls = append(urls, "ws://"+net.JoinHostPort(p.Status.PodIP, "8443")+relay.ConnectPath)
	}
	log := slog.New(slog.NewTextHandler(syncbuf.Logged(t.Log), nil))
	var ids [2]string
	for i := range ids {
		code, err := a.CreatePairCode(ctx, "chart lender")
		if err != nil {
			t.Fatal(err)
		}
		paired, err := b.Pair(ctx, code.Code, "chart lender")
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = paired.LenderID
		order := urls[i] + "," + urls[1-i]
		actx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- lender.RunAgent(actx, lender.AgentOptions{
				LenderID: paired.LenderID, Token: paired.Token, RelayURL: order, Insecure: true, SupervisorURL: a.BaseURL(),
				DataDir: t.TempDir(), Socket: "off", Docker: docker.Options{HeadlessImage: "berth/test:latest"},
				Logger: log.With("lender", i+1), Version: "chart-test",
			})
		}()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil && ctx.Err() == nil {
				t.Errorf("lender %d: %v", i+1, err)
			}
		})
	}
	// Each supervisor sees both lenders online, as the relay pods report them.
	for _, c := range []*api.Client{a, b} {
		testkit.EventuallyContext(t, ctx, "both lenders online at "+c.BaseURL(), func() bool {
			return onlineLenders(ctx, c.BaseURL(), token) == 2
		})
	}
	for i, id := range ids {
		agent := "chart-lent-" + string(rune('a'+i))
		if _, err := a.CreateAgent(ctx, api.CreateAgentRequest{ID: agent, Name: agent}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Connect(ctx, api.ConnectRequest{Agent: agent, Provider: "local", LeaseSeconds: 300, DailySeconds: 600,
			Credentials: map[string]string{"lender": id}}); err != nil {
			t.Fatal(err)
		}
		s, err := b.Start(ctx, agent)
		if err != nil {
			t.Fatalf("start on lender %d through the second supervisor: %v", i+1, err)
		}
		t.Cleanup(func() { exec.Command("docker", "rm", "-f", "-v", "berth-c-"+strings.TrimPrefix(s.ID, "s_")).Run() })
		res, err := a.Exec(ctx, agent, api.ExecRequest{Command: "echo lent through the chart", TimeoutSeconds: 30})
		if err != nil || res.ExitCode != 0 || res.Stdout != "lent through the chart\n" {
			t.Fatalf("exec on lender %d through the first supervisor: %+v %v", i+1, res, err)
		}
		if _, err := a.Stop(ctx, agent); err != nil {
			t.Fatal(err)
		}
	}
}

// onlineLenders counts the lenders GET /v1/lenders shows online; -1 when
// the call fails.
func onlineLenders(ctx context.Context, base, token string) int {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/lenders", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var ls []struct{ Online bool }
	if resp.StatusCode != 200 || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ls) != nil {
		return -1
	}
	n := 0
	for _, l := range ls {
		if l.Online {
			n++
		}
	}
	return n
}
