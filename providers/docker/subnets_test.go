package docker

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/providers"
)

func TestParseRoutes(t *testing.T) {
	raw := []byte(`Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
eth0	00000000	010011AC	0003	0	0	0	00000000	0	0	0
eth0	000011AC	00000000	0001	0	0	0	0000FFFF	0	0	0
docker0	000011AC	00000000	0001	0	0	0	0000FFFF	0	0	0
berth0123456789	0000D50A	00000000	0001	0	0	0	F0FFFFFF	0	0	0
wlan0	0001A8C0	00000000	0001	0	0	0	00FFFFFF	0	0	0
`)
	got, err := parseRoutes(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := []Route{
		{netip.MustParsePrefix("172.17.0.0/16"), "eth0"},
		{netip.MustParsePrefix("172.17.0.0/16"), "docker0"},
		{netip.MustParsePrefix("192.168.1.0/24"), "wlan0"},
	}
	if len(got) != len(want) {
		t.Fatalf("routes = %v, want %v (no default route, no computer network)", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("route %d = %v, want %v", i, got[i], want[i])
		}
	}
	if _, err := parseRoutes([]byte("Iface\tDestination\nx\tzz\t0\t0\t0\t0\t0\tzz\n")); err == nil {
		t.Error("a malformed line parsed")
	}
}

func TestChooseRange(t *testing.T) {
	first, second := DefaultSubnetCandidates[0], DefaultSubnetCandidates[1]
	got, err := chooseRange(netip.Prefix{}, nil, nil)
	if err != nil || got != first {
		t.Fatalf("default on an empty host = %v, %v; want %v", got, err, first)
	}
	// A route or a foreign network in the first candidate moves to the next.
	lan := []Route{{netip.MustParsePrefix(first.Addr().String() + "/24"), "eth1"}}
	if got, _ := chooseRange(netip.Prefix{}, lan, nil); got != second {
		t.Errorf("with a route in %v: %v, want %v", first, got, second)
	}
	if got, _ := chooseRange(netip.Prefix{}, nil, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}); got.IsValid() {
		t.Errorf("with 10/8 taken by a Docker network: %v, want none", got)
	}
	_, err = chooseRange(netip.Prefix{}, nil, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	if err == nil || !strings.Contains(err.Error(), SettingSubnets) {
		t.Errorf("no free default: err = %v, want one naming %s", err, SettingSubnets)
	}
	// A configured range is checked against the routes only.
	cfg := netip.MustParsePrefix("192.168.0.0/16")
	_, err = chooseRange(cfg, []Route{{netip.MustParsePrefix("192.168.1.0/24"), "wlan0"}}, nil)
	if err == nil || !strings.Contains(err.Error(), "192.168.1.0/24") || !strings.Contains(err.Error(), "wlan0") {
		t.Errorf("configured range over a LAN route: err = %v, want the route named", err)
	}
	if got, err := chooseRange(cfg, nil, []netip.Prefix{netip.MustParsePrefix("192.168.5.0/24")}); err != nil || got != cfg {
		t.Errorf("configured range beside a Docker network = %v, %v; want it (the network's subnets are skipped)", got, err)
	}
}

func TestSubnetPoolHandsOutDistinctSubnets(t *testing.T) {
	p := newSubnetPool(netip.MustParsePrefix("10.99.0.0/24"))  // 16 subnets
	p.markLocked(netip.MustParsePrefix("10.99.0.32/27"), true) // 2 taken by another network
	p.markLocked(netip.MustParsePrefix("10.98.0.0/24"), true)  // outside: no effect
	seen := map[netip.Prefix]bool{}
	for {
		s, ok := p.take()
		if !ok {
			break
		}
		if s.Bits() != SubnetBits || !p.rng.Contains(s.Addr()) || seen[s] {
			t.Fatalf("handed out %v (seen before: %v)", s, seen[s])
		}
		if s == netip.MustParsePrefix("10.99.0.32/28") || s == netip.MustParsePrefix("10.99.0.48/28") {
			t.Fatalf("handed out %v, which another network uses", s)
		}
		seen[s] = true
		p.made(s, true)
	}
	if len(seen) != 14 {
		t.Fatalf("handed out %d subnets, want 14 (16 less 2 taken)", len(seen))
	}
	s := netip.MustParsePrefix("10.99.0.64/28")
	p.release(s)
	if got, ok := p.take(); !ok || got != s {
		t.Fatalf("after a release: %v, %v; want %v", got, ok, s)
	}
	// A failed create that was not an overlap frees the subnet again.
	p.made(s, false)
	if got, ok := p.take(); !ok || got != s {
		t.Fatalf("after a failed create: %v, %v; want %v again", got, ok, s)
	}
}

func TestOptionsSubnetsAndGrace(t *testing.T) {
	o, err := OptionsFromConfig(env(map[string]string{SettingSubnets: "10.77.3.4/16", SettingGrace: "30"}))
	if err != nil {
		t.Fatal(err)
	}
	if o.Subnets != netip.MustParsePrefix("10.77.0.0/16") || o.Grace != 30*time.Second {
		t.Errorf("options = %v, %v; want 10.77.0.0/16, 30s", o.Subnets, o.Grace)
	}
	if d, _ := OptionsFromConfig(env(nil)); d.Grace != DefaultGrace || d.Subnets.IsValid() {
		t.Errorf("defaults = %v, %v; want %v and none (chosen at first use)", d.Grace, d.Subnets, DefaultGrace)
	}
	for _, bad := range []map[string]string{
		{SettingSubnets: "10.0.0.0"},
		{SettingSubnets: "10.0.0.0/26"},
		{SettingSubnets: "fd00::/64"},
		{SettingGrace: "0"},
		{SettingGrace: "abc"},
	} {
		_, err := OptionsFromConfig(env(bad))
		for k := range bad {
			if err == nil || !strings.Contains(err.Error(), k) {
				t.Errorf("%v: err = %v, want one naming %s", bad, err, k)
			}
		}
	}
}

// forgetSubnetPool makes the next use of d's range read the engine again,
// as a new process would.
func forgetSubnetPool(d *Docker) {
	subnetPoolsMu.Lock()
	delete(subnetPools, d.subnetPoolKey())
	subnetPoolsMu.Unlock()
}

// TestNetworksFromOwnRange makes networks from two providers that do not
// share a view of the range (two processes) and start at the same subnet:
// the engine refuses the overlaps, the providers move on, and no two
// networks share a subnet. Removing a network frees its subnet.
func TestNetworksFromOwnRange(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	rng := netip.MustParsePrefix("10.231.0.0/24") // 16 subnets
	d1 := newTestDocker(t, ctx, Options{Subnets: rng})
	d2 := newTestDocker(t, ctx, Options{Subnets: rng})
	forgetSubnetPool(d1)
	t.Cleanup(func() { forgetSubnetPool(d1) })
	p1, err := d1.subnets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	forgetSubnetPool(d1)
	p2, err := d2.subnets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p1 == p2 {
		t.Fatal("the two providers share one view")
	}
	p1.next, p2.next = 0, 0

	// Networks of an earlier run that was killed would hold part of the
	// range; only this test makes networks named berth-n-subnets-.
	removeNetworksNamed(t, ctx, d1, "berth-n-subnets-")
	tag := "subnets-" + randomID(t)
	labels := map[string]string{providers.LabelManaged: "true", providers.LabelComputer: tag}
	// Every network of this run, even one whose create answered an error
	// after the engine made it.
	t.Cleanup(func() { removeNetworksNamed(t, context.Background(), d1, "berth-n-"+tag+"-") })
	var (
		mu   sync.Mutex
		ids  []string
		errs []error
		wg   sync.WaitGroup
	)
	for i := range 12 {
		d := d1
		if i%2 == 1 {
			d = d2
		}
		wg.Go(func() {
			id, err := d.createComputerNetwork(ctx, "berth-n-"+tag+"-"+string(rune('a'+i)), bridgeName(tag+string(rune('a'+i))), labels)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ids = append(ids, id)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		cctx, cancel := cleanupContext()
		defer cancel()
		for _, id := range ids {
			d1.removeNetwork(cctx, id, id)
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	subnets := map[netip.Prefix]string{}
	for _, id := range ids {
		res, err := d1.cli.NetworkInspect(ctx, id, client.NetworkInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := res.Network.IPAM.Config
		if len(cfg) != 1 || cfg[0].Subnet.Bits() != SubnetBits || !rng.Contains(cfg[0].Subnet.Addr()) {
			t.Fatalf("network %s has IPAM %+v, want one /%d of %v", res.Network.Name, cfg, SubnetBits, rng)
		}
		if other, dup := subnets[cfg[0].Subnet]; dup {
			t.Fatalf("networks %s and %s share %v", other, res.Network.Name, cfg[0].Subnet)
		}
		subnets[cfg[0].Subnet] = res.Network.Name
	}

	// Fill the range, then the next is a capacity error naming the setting.
	var more []string
	t.Cleanup(func() {
		cctx, cancel := cleanupContext()
		defer cancel()
		for _, id := range more {
			d1.removeNetwork(cctx, id, id)
		}
	})
	for i := 0; ; i++ {
		id, err := d1.createComputerNetwork(ctx, "berth-n-"+tag+"-x"+string(rune('a'+i)), bridgeName(tag+"x"+string(rune('a'+i))), labels)
		if err != nil {
			if !errors.Is(err, providers.ErrCapacity) || !strings.Contains(err.Error(), SettingSubnets) {
				t.Fatalf("full range: err = %v, want ErrCapacity naming %s", err, SettingSubnets)
			}
			break
		}
		more = append(more, id)
		if i > 16 {
			t.Fatal("more networks than the range has subnets")
		}
	}
	if len(ids)+len(more) != 16 {
		t.Errorf("made %d networks in a range of 16 subnets", len(ids)+len(more))
	}
	// A removed network's subnet is handed out again.
	if err := d1.removeNetwork(ctx, more[0], more[0]); err != nil {
		t.Fatal(err)
	}
	id, err := d1.createComputerNetwork(ctx, "berth-n-"+tag+"-again", bridgeName(tag+"again"), labels)
	if err != nil {
		t.Fatalf("after a removal: %v", err)
	}
	more[0] = id
}

// TestCollectorRemovesExpired: a computer past its lease and grace is
// removed with its network and volume by a collector of another process;
// a live one is left alone.
func TestCollectorRemovesExpired(t *testing.T) {
	// Three creates and the release of two disks: on an engine that other
	// packages' tests load (make test runs them side by side), a create
	// has taken over a minute.
	ctx := testContext(t, 5*time.Minute)
	clk := clock.NewFake(time.Now())
	d := newTestDocker(t, ctx, Options{Grace: 5 * time.Second, Clock: clk})
	// One computer in a network of its own, one in a network holder's.
	held := newTestDocker(t, ctx, Options{Grace: 5 * time.Second, Clock: clk, NetworkPool: 1, HeadlessImage: poolImage})
	old, oldHeld, live := testSpec(t), testSpec(t), testSpec(t)
	old.Deployment, oldHeld.Deployment, live.Deployment = "gone-"+randomID(t), "gone-"+randomID(t), "live-"+randomID(t)
	old.Lease, oldHeld.Lease, live.Lease = time.Minute, time.Minute, time.Hour
	for _, s := range []providers.Spec{old, oldHeld, live} {
		d := d
		if s.ComputerID == oldHeld.ComputerID {
			d = held
		}
		m, err := d.Create(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cctx, cancel := cleanupContext()
			defer cancel()
			d.Destroy(cctx, m.ID)
		})
	}
	gc, err := NewCollector(d.opts.Host, clk, d.log)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	gc.deployments = map[string]bool{old.Deployment: true, oldHeld.Deployment: true, live.Deployment: true}

	// Within the lease and the grace nothing goes.
	clk.Advance(time.Minute + 4*time.Second)
	if n, err := gc.Collect(ctx); err != nil || countOf(t, ctx, d, old.ComputerID) != 3 {
		t.Fatalf("before the grace ended: removed %+v, err %v", n, err)
	}
	clk.Advance(2 * time.Second)
	n, err := gc.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Containers < 1 || n.Networks < 1 || n.Volumes < 1 {
		t.Errorf("collected %+v, want the container, network and volume", n)
	}
	if c := countOf(t, ctx, d, old.ComputerID); c != 0 {
		t.Errorf("%d resources of the expired computer are left", c)
	}
	if c := countOf(t, ctx, d, oldHeld.ComputerID); c != 0 {
		t.Errorf("%d resources of the expired computer in a holder's network are left", c)
	}
	if _, err := d.cli.ContainerInspect(ctx, HolderPrefix+oldHeld.ComputerID, client.ContainerInspectOptions{}); err == nil {
		t.Errorf("the network holder of the expired computer is left")
	}
	if c := countOf(t, ctx, d, live.ComputerID); c != 3 {
		t.Errorf("the live computer has %d of its 3 resources", c)
	}
}

// countOf counts the containers, networks and volumes of a computer, its
// disk volume aside.
func countOf(t *testing.T, ctx context.Context, d *Docker, computerID string) int {
	t.Helper()
	f := labelFilter(computerID, "")
	cs, err1 := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	ns, err2 := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	vs, err3 := d.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	n := len(cs.Items) + len(ns.Items)
	for _, v := range vs.Items {
		if !isDiskVolume(v.Name) { // it goes with the home (TestCollectorReleasesDisks)
			n++
		}
	}
	return n
}

// TestRangeOverRouteRefused: a configured range that would shadow a route
// of the host makes every network create fail with the route named.
func TestRangeOverRouteRefused(t *testing.T) {
	ctx := testContext(t, time.Minute)
	lan := Route{netip.MustParsePrefix("10.232.7.0/24"), "eth9"}
	d := newTestDocker(t, ctx, Options{
		Subnets: netip.MustParsePrefix("10.232.0.0/16"),
		Routes:  func() ([]Route, error) { return []Route{lan}, nil },
	})
	forgetSubnetPool(d)
	t.Cleanup(func() { forgetSubnetPool(d) })
	_, err := d.createComputerNetwork(ctx, "berth-n-refused-"+randomID(t), bridgeName("refused"+randomID(t)), nil)
	if err == nil || !strings.Contains(err.Error(), SettingSubnets) || !strings.Contains(err.Error(), "10.232.7.0/24") || !strings.Contains(err.Error(), "eth9") {
		t.Fatalf("create on a range over a route: %v, want an error naming %s and the route", err, SettingSubnets)
	}
}

// removeNetworksNamed removes the networks whose names start with prefix.
func removeNetworksNamed(t *testing.T, ctx context.Context, d *Docker, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: make(client.Filters).Add("name", prefix)})
	if err != nil {
		t.Errorf("list networks named %s*: %v", prefix, err)
		return
	}
	for _, n := range res.Items {
		if strings.HasPrefix(n.Name, prefix) {
			if err := d.removeNetwork(ctx, n.ID, n.Name); err != nil {
				t.Errorf("remove network %s: %v", n.Name, err)
			}
		}
	}
}
