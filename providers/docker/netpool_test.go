package docker

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/internal/testkit"
)

// poolImage has computerd, which holders run; `make images` builds it.
const poolImage = "berth/test:latest"

func (p *netPool) readyCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// TestNetworkPool creates a computer in a network made ahead of time and
// checks that it is isolated the same way, reachable, listed, and that
// destroying it, and closing the provider, leave nothing behind.
func TestNetworkPool(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	if err := exec.CommandContext(ctx, "docker", "image", "inspect", poolImage).Run(); err != nil {
		t.Fatalf("image %s missing: run `make images` (%v)", poolImage, err)
	}
	d := newTestDocker(t, ctx, Options{HeadlessImage: poolImage, NetworkPool: 2})
	d.Warm(ctx)
	testkit.Eventually(t, 90*time.Second, "2 network holders ready", func() bool { return d.pool.readyCount() >= 2 })

	spec := testSpec(t)
	m := create(t, ctx, d, spec)
	res, err := d.cli.ContainerInspect(ctx, m.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hold, err := d.cli.ContainerInspect(ctx, HolderPrefix+spec.ComputerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("holder of %s: %v", spec.ComputerID, err)
	}
	if got := string(res.Container.HostConfig.NetworkMode); got != "container:"+hold.Container.ID {
		t.Fatalf("network mode %q, want the holder's namespace", got)
	}
	hc := hold.Container.HostConfig
	if hold.Container.Config.User != User || !hc.ReadonlyRootfs || len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL" {
		t.Errorf("holder not hardened: user %q readonly %v capdrop %v", hold.Container.Config.User, hc.ReadonlyRootfs, hc.CapDrop)
	}
	var netID string
	for _, ep := range hold.Container.NetworkSettings.Networks {
		netID = ep.NetworkID
	}
	nw, err := d.cli.NetworkInspect(ctx, netID, client.NetworkInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !nw.Network.Internal || !strings.HasPrefix(nw.Network.Options[bridgeNameOption], BridgePrefix) {
		t.Errorf("holder network: internal %v, bridge %q", nw.Network.Internal, nw.Network.Options[bridgeNameOption])
	}
	// The supervisor's side: computerd answers at the endpoint.
	testkit.Eventually(t, 30*time.Second, "computerd to answer at "+m.Endpoint, func() bool {
		resp, err := http.Get(m.Endpoint + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	ms, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, x := range ms {
		found = found || (x.ID == m.ID && x.Endpoint == m.Endpoint)
	}
	if !found {
		t.Errorf("List does not show %s at %s: %+v", m.ID, m.Endpoint, ms)
	}
	testkit.Eventually(t, 90*time.Second, "the pool refilled to 2 holders", func() bool { return d.pool.readyCount() >= 2 })

	if err := d.Destroy(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	requireGone(t, ctx, d, spec.ComputerID)
	if _, err := d.cli.ContainerInspect(ctx, HolderPrefix+spec.ComputerID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("holder left after destroy: %v", err)
	}
	if _, err := d.cli.NetworkInspect(ctx, netID, client.NetworkInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("holder network left after destroy: %v", err)
	}

	var waiting []string
	d.pool.mu.Lock()
	for _, h := range d.pool.ready {
		waiting = append(waiting, h.id)
	}
	d.pool.mu.Unlock()
	d.pool.close(ctx)
	for _, id := range waiting {
		if _, err := d.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
			t.Errorf("waiting holder %s left after close: %v", id, err)
		}
	}
}
