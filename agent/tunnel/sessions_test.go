package tunnel

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/providers"
	ptunnel "github.com/berthdev/berth/providers/tunnel"
)

// TestSessionsInARow runs two sessions on one runner: while the first holds
// the computer a second claim is refused, and after the first ends the
// second starts on a fresh computer, without the first one's file and
// background process.
func TestSessionsInARow(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	cli := engine(t, ctx)
	path := filepath.Join(t.TempDir(), "connection.json")
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := start(t, rctx, Options{Lifetime: time.Hour, ConnectionFile: path, LookPath: noCloudflared})
	info := r.ready(t, ctx)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	p := ptunnel.New(ptunnel.Options{Transport: tr})
	creds := map[string]string{"url": info.URL, "apiKey": info.Token}

	first := claim(t, ctx, p, info, 1, nil)
	if x := first.run(t, ctx, "echo left behind > ~/first.txt && (setsid sleep 3600 >/dev/null 2>&1 &) && sleep 0.2 && "+findSleeper); x.ExitCode != 0 {
		t.Fatalf("first session: %+v", x)
	}
	_, err := p.Create(ctx, providers.Spec{ComputerID: "c-x", SessionID: "s-x", AttemptID: "a-x", Credentials: creds})
	var re *providers.RefusedError
	if !errors.As(err, &re) || re.Code != ptunnel.CodeInUse || !strings.Contains(re.Message, "in use") {
		t.Errorf("a second session's claim while the first runs: %v, want a refusal saying the runner is in use", err)
	}
	if ms, err := p.List(providers.WithCredentials(ctx, creds)); err != nil || len(ms) != 1 || ms[0].ID != first.m.ID || ms[0].Labels[providers.LabelSession] != "s-1" {
		t.Errorf("List = %+v %v, want the first session's machine", ms, err)
	}
	if err := p.Destroy(providers.WithCredentials(ctx, creds), first.m.ID); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	requireGone(t, ctx, cli, "", first.m.ID)
	// A retried destroy of the same machine finds it gone.
	if err := p.Destroy(providers.WithCredentials(ctx, creds), first.m.ID); err != nil {
		t.Errorf("Destroy again: %v", err)
	}

	second := claim(t, ctx, p, info, 2, nil)
	if second.m.ID == first.m.ID {
		t.Fatalf("the second session got the first one's machine %s", first.m.ID)
	}
	if x := second.run(t, ctx, "ls -A ~; cat ~/first.txt; "+findSleeper); strings.Contains(x.Stdout, "left behind") || strings.Contains(x.Stdout, "first.txt") || x.ExitCode == 0 {
		t.Errorf("the second session sees the first one's file or process: %+v", x)
	}
	if err := p.Destroy(providers.WithCredentials(ctx, creds), second.m.ID); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	cancel()
	r.wait(t, ctx)
	requireGone(t, ctx, cli, path, second.m.ID)
}
