package e2e

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/supervisor/supervisortest"

	"github.com/chromedp/chromedp"
	"github.com/moby/moby/client"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/daemon"
	"github.com/berthdev/berth/supervisor/liveview"
	"github.com/berthdev/berth/supervisor/store"
)

// startPoolSupervisor runs an in-process supervisor with the docker
// provider and a warm pool of size computers made from image. stop shuts
// it down as a signal would (the pool is drained); it is also run at
// cleanup.
func startPoolSupervisor(t *testing.T, image string, size int) (s *super, stop func()) {
	t.Helper()
	return serveDaemon(t, daemon.Options{
		Egress: daemon.EgressOptions{Listen: ":0"},
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
	}, map[string]string{
		"COMPUTER_IMAGE_HEADLESS": image, "COMPUTER_MEMORY_MB": "256", "COMPUTER_NETWORK_POOL": "1",
		"WARM_POOL_SIZE": fmt.Sprint(size),
	})
}

// liveSession reads the agent's live session from the supervisor's store.
func (s *super) liveSession(agent string) store.Session {
	s.t.Helper()
	x, err := s.d.Store.LiveSession(context.Background(), agent)
	if err != nil {
		s.t.Fatalf("live session of %s: %v", agent, err)
	}
	return x
}

// poolContainers lists the deployment's warm-pool containers on the
// engine, by computer id.
func poolContainers(t *testing.T, cli *client.Client, deployment string) map[string]string {
	t.Helper()
	out, err := listPool(cli, deployment)
	if err != nil {
		t.Fatalf("list pool containers: %v", err)
	}
	return out
}

func listPool(cli *client.Client, deployment string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", providers.LabelPool+"=true").Add("label", providers.LabelDeployment+"="+deployment)})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range res.Items {
		out[c.Labels[providers.LabelComputer]] = string(c.State)
	}
	return out, nil
}

func deploymentOf(t *testing.T, s *super) string {
	t.Helper()
	dep, err := s.d.Service.Deployment(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return dep
}

// TestWarmPoolNoLeaks: a start claims a waiting computer; what one session
// leaves (files in the home folder and /tmp, a background process, its
// proxy credentials) is never seen by the next, which gets a different
// computer with only its own credentials; a waiting computer holds no
// credential at all.
func TestWarmPoolNoLeaks(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	s, stop := startPoolSupervisor(t, "berth/test:latest", 2)
	cli := dockerClient(t)
	dep := deploymentOf(t, s)
	testkit.Eventually(t, 90*time.Second, "pool of 2 filled", func() bool { return s.d.Service.PoolStats().Waiting == 2 })

	// Waiting computers carry no credential: only the bind secret's hash.
	for id := range poolContainers(t, cli, dep) {
		ins, err := cli.ContainerInspect(context.Background(), docker.ContainerPrefix+id, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range ins.Container.Config.Env {
			k, _, _ := strings.Cut(kv, "=")
			if strings.Contains(strings.ToLower(k), "proxy") || k == "BERTH_TOKEN_SHA256" {
				t.Errorf("waiting computer %s has %s in its environment", id, k)
			}
		}
	}

	connect(s, "leak1")
	connect(s, "leak2")
	s.must("POST", "/v1/agents/leak1/computer/start", nil, 200, nil)
	first := s.liveSession("leak1")
	if got := s.d.Service.PoolStats().Claimed; got != 1 {
		t.Fatalf("claimed %d from the pool, want 1", got)
	}
	if _, ok := poolContainers(t, cli, dep)[first.ComputerID]; !ok {
		t.Fatalf("session 1 runs on %s, not a pool computer", first.MachineID)
	}
	x := s.exec("leak1", `echo one > ~/mark-home; echo one > /tmp/mark-tmp; (sleep 1000 >/dev/null 2>&1 &); printf %s "$HTTP_PROXY"`)
	if x.ExitCode != 0 || !strings.Contains(x.Stdout, "@") {
		t.Fatalf("session 1: %+v", x)
	}
	proxy1, err := url.Parse(x.Stdout)
	if err != nil || proxy1.User.Username() != first.ComputerID {
		t.Fatalf("session 1 proxy %q: want user %s (%v)", x.Stdout, first.ComputerID, err)
	}
	pass1, _ := proxy1.User.Password()
	// The forked child may not have exec'd sleep yet when the call answers.
	if x := s.exec("leak1", "for i in $(seq 50); do n=$(ps -o args | grep -c '^sleep 1000'); [ $n = 1 ] && break; sleep 0.1; done; echo $n"); strings.TrimSpace(x.Stdout) != "1" {
		t.Fatalf("session 1 background process not running: %+v", x)
	}
	if _, ok := s.d.Service.EgressAuth(first.ComputerID, pass1); !ok {
		t.Fatal("session 1's proxy credentials refused while it runs")
	}
	s.must("POST", "/v1/agents/leak1/computer/stop", nil, 200, nil)
	// Its credentials die with the session (within the 5 s the proxy
	// remembers an answer).
	testkit.Eventually(t, 15*time.Second, "session 1's proxy credentials refused", func() bool {
		_, ok := s.d.Service.EgressAuth(first.ComputerID, pass1)
		return !ok
	})

	// The next sessions, of the same agent and of another, come from the pool too.
	for i, agent := range []string{"leak1", "leak2"} {
		s.must("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, nil)
		x := s.liveSession(agent)
		if x.ComputerID == first.ComputerID || x.MachineID == first.MachineID {
			t.Fatalf("%s got session 1's computer %s again", agent, x.MachineID)
		}
		if got := s.d.Service.PoolStats().Claimed; got != int64(i+2) {
			t.Fatalf("claimed %d from the pool, want %d", got, i+2)
		}
		r := s.exec(agent, `for f in ~/mark-home /tmp/mark-tmp; do test -e $f && echo "LEAK $f"; done; `+
			`ps -o args | grep -q '^sleep 1000' && echo LEAK-PROCESS; ls -A ~ | sed 's/^/HOME-ENTRY /'; env | sort`)
		if strings.Contains(r.Stdout, "LEAK") || strings.Contains(r.Stdout, "HOME-ENTRY") {
			t.Errorf("%s sees session 1's files or processes:\n%s", agent, r.Stdout)
		}
		if strings.Contains(r.Stdout, pass1) || strings.Contains(r.Stdout, first.ComputerID) {
			t.Errorf("%s sees session 1's credentials:\n%s", agent, r.Stdout)
		}
		if strings.Contains(r.Stdout, "BERTH_") {
			t.Errorf("%s sees computerd's settings:\n%s", agent, r.Stdout)
		}
		var proxy *url.URL
		for _, line := range strings.Split(r.Stdout, "\n") {
			if v, ok := strings.CutPrefix(line, "HTTP_PROXY="); ok {
				proxy, _ = url.Parse(v)
			}
		}
		if proxy == nil || proxy.User == nil {
			t.Fatalf("%s has no proxy credentials:\n%s", agent, r.Stdout)
		}
		pass, _ := proxy.User.Password()
		if _, ok := s.d.Service.EgressAuth(proxy.User.Username(), pass); !ok || proxy.User.Username() != x.ComputerID {
			t.Errorf("%s: HTTP_PROXY user %q is not its own computer %s with valid credentials", agent, proxy.User.Username(), x.ComputerID)
		}
	}
	// The pool's figures on /metrics (operator token).
	req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	waiting := s.d.Service.PoolStats().Waiting
	for _, want := range []string{"berth_pool_claimed_total 3\n", "berth_pool_creating ", fmt.Sprintf("berth_pool_waiting %d\n", waiting)} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	stop()
	if left := poolContainers(t, cli, dep); len(left) > 2 {
		// The two running sessions stay (they outlive a restart); the
		// waiting computers are gone.
		t.Errorf("after shutdown the engine holds %d pool containers, want the 2 of live sessions: %v", len(left), left)
	}
	cleanupDeployment(t, dep)
}

// cleanupDeployment removes whatever of the deployment is left on the
// engine (sessions that outlive their supervisor by design).
func cleanupDeployment(t *testing.T, dep string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := docker.New(docker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ms, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Labels[providers.LabelDeployment] == dep {
			if err := d.Destroy(ctx, m.ID); err != nil {
				t.Errorf("destroy %s: %v", m.ID, err)
			}
		}
	}
	if left := deploymentObjects(t, dep); left != "" {
		t.Errorf("left on the engine: %s", left)
	}
}

// TestWarmPoolConcurrentStarts: 50 starts at once, across agents, against a
// pool of 3. Every start succeeds, the engine never holds more than 3
// waiting computers (sampled throughout), the pool refills, and a shutdown
// removes it.
func TestWarmPoolConcurrentStarts(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	heavy(t)
	const size, agents, perAgent = 3, 25, 2
	s, stop := startPoolSupervisor(t, "berth/test:latest", size)
	cli := dockerClient(t)
	dep := deploymentOf(t, s)
	testkit.Eventually(t, 90*time.Second, "pool of 3 filled", func() bool { return s.d.Service.PoolStats().Waiting == size })
	for i := range agents {
		connect(s, fmt.Sprintf("conc%02d", i))
	}

	// Sample the engine: a pool container counts as waiting unless the
	// store says a session claimed it.
	var maxWaiting atomic.Int64
	var sampleErrs atomic.Int64
	sample := func() {
		cs, err := listPool(cli, dep)
		if err != nil {
			sampleErrs.Add(1)
			return
		}
		ms, err := s.d.Store.PoolMembers(context.Background())
		if err != nil {
			sampleErrs.Add(1)
			return
		}
		claimed := map[string]bool{}
		for _, m := range ms {
			claimed[m.ComputerID] = m.State == store.PoolClaimed
		}
		n := int64(0)
		for id := range cs {
			if !claimed[id] {
				n++
			}
		}
		if n > maxWaiting.Load() {
			maxWaiting.Store(n)
		}
	}
	stopSampling := make(chan struct{})
	sampled := make(chan int)
	go func() {
		n := 0
		defer func() { sampled <- n }()
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(25 * time.Millisecond):
				sample()
				n++
			}
		}
	}()

	var wg sync.WaitGroup
	statuses := make([]int, agents*perAgent)
	sessions := make([]session, agents*perAgent)
	for i := range statuses {
		wg.Go(func() {
			st, err := callAPI(s.url, s.token, "POST", fmt.Sprintf("/v1/agents/conc%02d/computer/start", i%agents), "", nil, &sessions[i])
			if err != nil {
				t.Errorf("start %d: %v", i, err)
			}
			statuses[i] = st
		})
	}
	wg.Wait()
	for i, st := range statuses {
		if st != 200 || sessions[i].State != "running" {
			t.Errorf("start %d (agent conc%02d): status %d, session %+v", i, i%agents, st, sessions[i])
		}
		if other := sessions[i%agents]; sessions[i].ID != other.ID {
			t.Errorf("agent conc%02d got two sessions: %s and %s", i%agents, sessions[i].ID, other.ID)
		}
	}
	claimed := s.d.Service.PoolStats().Claimed
	if claimed < size {
		t.Errorf("%d starts were served from the pool, want at least %d", claimed, size)
	}
	// The pool refills behind the starts.
	testkit.Eventually(t, 90*time.Second, "pool refilled", func() bool { return s.d.Service.PoolStats().Waiting == size })
	close(stopSampling)
	n := <-sampled
	sample()
	t.Logf("%d starts, %d from the pool; %d engine samples, at most %d waiting", len(statuses), claimed, n, maxWaiting.Load())
	if got := maxWaiting.Load(); got > size || got < size {
		t.Errorf("the engine held at most %d waiting computers, want exactly the pool's size %d", got, size)
	}
	if n < 10 || sampleErrs.Load() > int64(n)/2 {
		t.Errorf("only %d engine samples, %d of them failed", n, sampleErrs.Load())
	}

	// Sessions stopped, then the supervisor: nothing of the deployment is left.
	for i := range agents {
		wg.Go(func() { s.must("POST", fmt.Sprintf("/v1/agents/conc%02d/computer/stop", i), nil, 200, nil) })
	}
	wg.Wait()
	stop()
	if left := deploymentObjects(t, dep); left != "" {
		t.Errorf("after the sessions stopped and the supervisor shut down, left on the engine: %s", left)
		cleanupDeployment(t, dep)
	}
}

// memInfo is an injected host memory reading, in percent available.
type memInfo struct{ free atomic.Int64 }

func (m *memInfo) read() (uint64, uint64, error) {
	const total = 24 << 30
	return uint64(m.free.Load()) * total / 100, total, nil
}

// poolService assembles a supervisor service on the docker provider with an
// injected memory reading, without the HTTP side.
func poolService(t *testing.T, image string, size int, mem *memInfo) (*supervisor.Service, *docker.Docker, store.Store) {
	t.Helper()
	return poolServiceIn(t, t.TempDir(), image, size, mem, nil)
}

// poolServiceIn is poolService on the store and secrets kept in dir, with
// clock clk (nil: the real one).
func poolServiceIn(t *testing.T, dir, image string, size int, mem *memInfo, clk clock.Clock) (*supervisor.Service, *docker.Docker, store.Store) {
	t.Helper()
	d, err := docker.New(docker.Options{HeadlessImage: image, MemoryMB: 256, NetworkPool: 1, WarmPool: size, MemInfo: mem.read,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	parts := supervisortest.NewParts(t, dir)
	st, box, tokens := parts.Store, parts.Box, parts.Tokens
	svc, err := supervisor.New(supervisor.Config{Store: st, Providers: map[string]providers.Provider{"docker": d},
		Box: box, Tokens: tokens, Clock: clk, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		st.Close()
	})
	return svc, d, st
}

// TestWarmPoolMemoryPressure: the pool fills while memory is plentiful,
// stops growing below 10% available, shrinks below 5%, and grows back
// when memory returns; draining removes it.
func TestWarmPoolMemoryPressure(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	heavy(t)
	mem := &memInfo{}
	mem.free.Store(50)
	svc, _, _ := poolService(t, "berth/test:latest", 2, mem)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		svc.RunPool(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-ran
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		svc.DrainPool(dctx)
	})
	cli := dockerClient(t)
	dep, err := svc.Deployment(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 90*time.Second, "pool filled at 50% free", func() bool { return svc.PoolStats().Waiting == 2 })

	// 7% free: a claim is not replaced.
	mem.free.Store(7)
	if _, err := svc.CreateAgent(ctx, supervisor.CreateAgentRequest{ID: "mem", Name: "mem"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Connect(ctx, supervisor.ConnectRequest{Agent: "mem", Provider: "docker"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Start(ctx, "mem"); err != nil {
		t.Fatal(err)
	}
	if got := svc.PoolStats(); got.Claimed != 1 || got.Waiting != 1 {
		t.Fatalf("after a claim at 7%% free: %+v, want 1 claimed and 1 waiting", got)
	}
	time.Sleep(3 * time.Second) // three pool passes
	if got := svc.PoolStats(); got.Waiting != 1 || got.Creating != 0 {
		t.Fatalf("the pool grew at 7%% free: %+v", got)
	}

	// 3% free: the waiting computer goes; the session's stays.
	mem.free.Store(3)
	testkit.Eventually(t, 30*time.Second, "pool shrunk at 3% free", func() bool {
		return svc.PoolStats().Waiting == 0 && len(poolContainers(t, cli, dep)) == 1
	})
	if _, err := svc.Exec(ctx, "mem", supervisor.ExecRequest{Command: "true"}); err != nil {
		t.Errorf("the session's computer after the pool shrank: %v", err)
	}

	// Memory back: the pool grows to its size again.
	mem.free.Store(40)
	testkit.Eventually(t, 90*time.Second, "pool refilled at 40% free", func() bool { return svc.PoolStats().Waiting == 2 })
	if _, err := svc.Stop(ctx, "mem"); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-ran
	dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
	defer dcancel()
	if n := svc.DrainPool(dctx); n != 2 {
		t.Errorf("drain removed %d computers, want 2", n)
	}
	if left := deploymentObjects(t, dep); left != "" {
		t.Errorf("left on the engine: %s", left)
	}
}

// later is the real clock moved ahead by d.
type later struct{ d time.Duration }

func (l later) Now() time.Time                         { return time.Now().Add(l.d) }
func (l later) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestWarmPoolAfterCrash: a supervisor dies with computers waiting in its
// pool and one claimed by a running session. The next supervisor on the
// same store removes the waiting ones (their bind secrets died with their
// maker), keeps the session's computer and serves it, and fills a pool of
// its own.
func TestWarmPoolAfterCrash(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	heavy(t)
	dir := t.TempDir()
	mem := &memInfo{}
	mem.free.Store(50)
	a, _, ast := poolServiceIn(t, dir, "berth/test:latest", 2, mem, nil)
	ctx := context.Background()
	if err := ast.Heartbeat(ctx, a.Instance(), time.Now()); err != nil {
		t.Fatal(err)
	}
	actx, crash := context.WithCancel(ctx)
	aran := make(chan struct{})
	go func() {
		defer close(aran)
		a.RunPool(actx)
	}()
	testkit.Eventually(t, 90*time.Second, "first pool filled", func() bool { return a.PoolStats().Waiting == 2 })
	if _, err := a.CreateAgent(ctx, supervisor.CreateAgentRequest{ID: "survivor", Name: "survivor"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Connect(ctx, supervisor.ConnectRequest{Agent: "survivor", Provider: "docker"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Start(ctx, "survivor"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, "survivor", supervisor.ExecRequest{Command: "echo kept > ~/kept"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 90*time.Second, "first pool refilled", func() bool { return a.PoolStats().Waiting == 2 })
	// The crash: the pool stops, nothing is drained, no more heartbeats.
	crash()
	<-aran
	dep, err := a.Deployment(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cli := dockerClient(t)
	orphans := poolContainers(t, cli, dep)
	if len(orphans) != 3 {
		t.Fatalf("after the crash the engine holds %d pool computers, want 2 waiting and 1 claimed: %v", len(orphans), orphans)
	}

	// The next supervisor sees the first one's heartbeat as stale.
	b, _, _ := poolServiceIn(t, dir, "berth/test:latest", 1, mem, later{supervisor.InstanceTTL + time.Second})
	rep, err := b.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Kept != 1 || rep.Destroyed != 2 || rep.Pooled != 0 {
		t.Errorf("reconcile: %+v, want the session's computer kept and the 2 waiting ones destroyed", rep)
	}
	x, err := b.Exec(ctx, "survivor", supervisor.ExecRequest{Command: "cat ~/kept"})
	if err != nil || x.Stdout != "kept\n" {
		t.Fatalf("the surviving session through the next supervisor: %+v %v", x, err)
	}
	bctx, stop := context.WithCancel(ctx)
	bran := make(chan struct{})
	go func() {
		defer close(bran)
		b.RunPool(bctx)
	}()
	testkit.Eventually(t, 90*time.Second, "second pool filled", func() bool { return b.PoolStats().Waiting == 1 })
	left := poolContainers(t, cli, dep)
	if len(left) != 2 {
		t.Errorf("engine holds %d pool computers, want the session's and the new pool's: %v", len(left), left)
	}
	for id := range orphans {
		if _, ok := left[id]; ok && len(orphans) > 0 {
			m, _ := ast.GetPoolMember(ctx, id)
			if m.State != store.PoolClaimed {
				t.Errorf("waiting computer %s of the dead supervisor is still there", id)
			}
		}
	}
	if _, err := b.Stop(ctx, "survivor"); err != nil {
		t.Fatal(err)
	}
	stop()
	<-bran
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	b.DrainPool(dctx)
	if left := deploymentObjects(t, dep); left != "" {
		t.Errorf("left on the engine: %s", left)
		cleanupDeployment(t, dep)
	}
}

var _ supervisor.Pooler = (*docker.Docker)(nil)

// TestWarmPoolDesktop: with WARM_POOL_DESKTOP a desktop computer waits
// started, its screen up; a desktop start claims it, and its screen works
// at once: a
// screenshot of the whole screen, and live view through the TURN relay,
// whose address the pooled computer had from the start.
func TestWarmPoolDesktop(t *testing.T) {
	requireDocker(t, desktopImage)
	requireChromium(t)
	heavy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, _ := serveDaemon(t, daemon.Options{
		Egress:   daemon.EgressOptions{Listen: ":0"},
		LiveView: daemon.LiveViewOptions{Listen: ":0", DesktopUsers: 2, IdleStopMS: idleStopMS, Secret: "e2e-turn-secret-0123456789"},
	}, map[string]string{"COMPUTER_IMAGE_DESKTOP": desktopImage, "COMPUTER_MEMORY_MB": "1024", "COMPUTER_NETWORK_POOL": "1",
		"WARM_POOL_DESKTOP": "1"})
	testkit.EventuallyContext(t, ctx, "a desktop computer waiting in the pool", func() bool { return s.d.Service.PoolStats().Waiting == 1 })
	// It was offered once its screen had answered a first screenshot.
	members, err := s.d.Store.PoolMembers(ctx)
	if err != nil || len(members) != 1 {
		t.Fatalf("pool members: %+v %v", members, err)
	}
	if h, err := computerd.NewClient(members[0].Endpoint, "").Health(ctx); err != nil || h.Screen != computerd.ScreenReady {
		t.Fatalf("the waiting desktop's health: %+v %v, want its screen ready", h, err)
	}

	s.must("POST", "/v1/agents", map[string]any{"id": "wd", "name": "wd"}, 201, nil)
	s.must("POST", "/v1/computers", map[string]any{"agent": "wd", "provider": "docker", "image": "desktop", "leaseSeconds": 600}, 201, nil)
	began := time.Now()
	var sess session
	s.must("POST", "/v1/agents/wd/computer/start", nil, 200, &sess)
	t.Cleanup(func() { s.call("POST", "/v1/agents/wd/computer/stop", nil, nil) })
	cl, err := api.New(s.url, s.token)
	if err != nil {
		t.Fatal(err)
	}
	shot, err := cl.DesktopScreenshot(ctx, "wd", api.ScreenshotRequest{Format: "png"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("warm desktop start to its first screenshot: %v", time.Since(began).Round(time.Millisecond))
	x := s.liveSession("wd")
	if m, err := s.d.Store.GetPoolMember(ctx, x.ComputerID); err != nil || m.State != store.PoolClaimed || m.SessionID != x.ID || m.Image != "desktop" {
		t.Fatalf("the start did not claim the pooled desktop: %+v %v", m, err)
	}
	if img, err := png.Decode(bytes.NewReader(shot.Data)); err != nil || img.Bounds().Dx() != 1280 || img.Bounds().Dy() != 720 {
		t.Fatalf("screenshot of the pooled desktop: %v %v", err, shot.ScreenWidth)
	}
	// The bind gave commands the session's environment (the egress proxy
	// with the computer's own credentials).
	if out := s.exec("wd", `printf %s "$HTTP_PROXY"`).Stdout; !strings.HasPrefix(out, "http://"+x.ComputerID+":") {
		t.Errorf("HTTP_PROXY in the pooled desktop: %q", out)
	}
	var g liveview.Grant
	s.must("POST", "/v1/agents/wd/computer/view", nil, 201, &g)
	bctx := browser(t, ctx)
	if err := chromedp.Do(bctx, chromedp.Navigate(g.URL)); err != nil {
		t.Fatal(err)
	}
	v := waitView(t, bctx, 30*time.Second, func(v viewState) bool { return v.FramesDecoded > 0 && v.LocalCandidateType != "" })
	if v.LocalCandidateType != "relay" || v.Width != 1280 {
		t.Errorf("live view of the pooled desktop: %+v", v)
	}
	// The pool refills behind the start.
	testkit.EventuallyContext(t, ctx, "the desktop pool refilled", func() bool { return s.d.Service.PoolStats().Waiting == 1 })
}

// BenchmarkDesktopWarmStart times a desktop start from the warm pool
// (WARM_POOL_DESKTOP=1) until its first full-screen screenshot answers,
// against a cold desktop start to its first screenshot on a supervisor
// without a pool, in the same run.
func BenchmarkDesktopWarmStart(b *testing.B) {
	requireDocker(b, desktopImage)
	warm, _ := serveDaemon(b, daemon.Options{
		Egress: daemon.EgressOptions{Listen: ":0"},
		Logger: slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, map[string]string{"COMPUTER_IMAGE_DESKTOP": desktopImage, "COMPUTER_MEMORY_MB": "1024", "COMPUTER_NETWORK_POOL": "1", "WARM_POOL_DESKTOP": "1"})
	cold := startDesktopSupervisor(b)
	for _, s := range []*super{warm, cold} {
		s.must("POST", "/v1/agents", map[string]any{"id": "bd", "name": "bd"}, 201, nil)
		s.must("POST", "/v1/computers", map[string]any{"agent": "bd", "provider": "docker", "image": "desktop", "leaseSeconds": 600}, 201, nil)
	}
	timed := func(s *super, pooled bool) func() time.Duration {
		cl, err := api.New(s.url, s.token)
		if err != nil {
			b.Fatal(err)
		}
		return func() time.Duration {
			if pooled {
				testkit.Eventually(b, 2*time.Minute, "a desktop waiting in the pool", func() bool { return s.d.Service.PoolStats().Waiting >= 1 })
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			began := time.Now()
			s.must("POST", "/v1/agents/bd/computer/start", nil, 200, nil)
			var shot *api.Screenshot
			for {
				if shot, err = cl.DesktopScreenshot(ctx, "bd", api.ScreenshotRequest{Format: "png"}); err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(20 * time.Millisecond) // a cold desktop's X server may still be starting
			}
			d := time.Since(began)
			if err != nil || shot.Width != 1280 {
				b.Fatalf("first screenshot: %v", err)
			}
			s.must("POST", "/v1/agents/bd/computer/stop", nil, 200, nil)
			return d
		}
	}
	claimed := warm.d.Service.PoolStats().Claimed
	pairedRuns(b, "warm-desktop-start-to-screenshot-ms", timed(warm, true), "base-cold-desktop-start-to-screenshot-ms", timed(cold, false))
	if got := warm.d.Service.PoolStats().Claimed - claimed; got != int64(b.N) {
		b.Fatalf("%d of %d warm starts came from the pool", got, b.N)
	}
}

// BenchmarkBurstStarts times a burst of 50 concurrent starts, each from
// its REST call to its first answered exec, on a pool that follows demand
// (WARM_POOL_SIZE 2, WARM_POOL_MAX 50). An untimed burst of 50 first
// teaches the pool the demand; after a quiet minute, in which it refills,
// the timed burst comes. The baseline is 50 concurrent bare `docker
// create` + `start` of the same image, in the same run. One burst per
// iteration:
//
//	go test ./e2e -run '^$' -bench BurstStarts -benchtime 1x
func BenchmarkBurstStarts(b *testing.B) {
	requireDocker(b, "berth/test:latest")
	const burst = 50
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	s, _ := serveDaemon(b, daemon.Options{
		Egress: daemon.EgressOptions{Listen: ":0"},
		Logger: slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, map[string]string{
		"COMPUTER_IMAGE_HEADLESS": "berth/test:latest", "COMPUTER_MEMORY_MB": "256", "COMPUTER_NETWORK_POOL": "2",
		"WARM_POOL_SIZE": "2", "WARM_POOL_MAX": strconv.Itoa(burst),
	})
	cli := dockerClient(b)
	agents := make([]string, burst)
	for i := range agents {
		agents[i] = fmt.Sprintf("burst%02d", i)
		connect(s, agents[i])
	}
	// run starts every agent at once and returns each one's time to its
	// first exec, and the CPU the machine and this process spent until the
	// last one answered; every session is stopped after.
	// The agents' clients keep their connections from a start to its
	// exec, as an HTTP/1.1 client does, where http.DefaultClient keeps
	// two of the fifty; every burst begins with none, so each start dials.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: burst}}
	defer hc.CloseIdleConnections()
	var machineCPU, processCPU time.Duration
	run := func() []float64 {
		hc.CloseIdleConnections()
		ds := make([]float64, burst)
		m0, p0 := cpuMark(b)
		var wg sync.WaitGroup
		for i, a := range agents {
			wg.Go(func() {
				began := time.Now()
				var x execResult
				if st, err := callAPIWith(hc, s.url, s.token, "POST", "/v1/agents/"+a+"/computer/start", "", nil, nil); err != nil || st != 200 {
					b.Errorf("start %s: %d %v", a, st, err)
					return
				}
				if st, err := callAPIWith(hc, s.url, s.token, "POST", "/v1/agents/"+a+"/computer/exec", "", map[string]any{"command": "echo hi"}, &x); err != nil || st != 200 || x.Stdout != "hi\n" {
					b.Errorf("first exec on %s: %d %v %+v", a, st, err, x)
					return
				}
				ds[i] = float64(time.Since(began)) / float64(time.Millisecond)
			})
		}
		wg.Wait()
		m1, p1 := cpuMark(b)
		machineCPU, processCPU = m1-m0, p1-p0
		for _, a := range agents {
			s.call("POST", "/v1/agents/"+a+"/computer/stop", nil, nil)
		}
		if b.Failed() {
			b.FailNow()
		}
		return ds
	}
	bare := func() []float64 {
		ds := make([]float64, burst)
		var wg sync.WaitGroup
		for i := range ds {
			wg.Go(func() {
				began := time.Now()
				ready, err := startBare(ctx, cli, "berth/test:latest", fmt.Sprintf("berth-bench-burst-%d-%d", time.Now().UnixNano(), i))
				if err != nil {
					b.Error(err)
					return
				}
				ds[i] = float64(ready.Sub(began)) / float64(time.Millisecond)
			})
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		return ds
	}
	run() // the demand the pool learns
	var ours, base []float64
	for b.Loop() {
		b.StopTimer()
		quiet := time.Now().Add(time.Minute)
		testkit.EventuallyContext(b, ctx, "the pool grown to the burst", func() bool { return s.d.Service.PoolStats().Waiting >= burst })
		time.Sleep(time.Until(quiet))
		claimed := s.d.Service.PoolStats().Claimed
		b.StartTimer()
		ours = append(ours, run()...)
		b.StopTimer()
		b.Logf("timed burst: %d of %d starts from the pool; CPU until the last first exec: %v on the machine, %v in this process (supervisor and clients)",
			s.d.Service.PoolStats().Claimed-claimed, burst, machineCPU, processCPU)
		base = append(base, bare()...)
		b.StartTimer()
	}
	b.ReportMetric(percentile(ours, 0.5), "start-p50-ms")
	b.ReportMetric(percentile(ours, 0.99), "start-p99-ms")
	// The bare create + start of each container, concurrent as ours.
	b.ReportMetric(percentile(base, 0.5), "bare-start-p50-ms")
	b.ReportMetric(percentile(base, 0.99), "bare-start-p99-ms")
}

// cpuMark returns the CPU time the whole machine has spent busy so far
// and this process's own.
func cpuMark(tb testing.TB) (machine, process time.Duration) {
	machine = testkit.MachineCPUTime()
	if machine == 0 {
		tb.Fatal("the machine's CPU time cannot be read from /proc/stat")
	}
	return machine, testkit.CPUTime()
}

// BenchmarkSustainedStarts holds a steady rate of starts for a minute: each
// start, from its scheduled moment to its first answered exec, then a stop,
// on a pool that follows demand (WARM_POOL_SIZE 2, WARM_POOL_MAX 20). The
// rate is the highest the engine holds here for both kinds of start: two
// workers each run a closed loop for 15 seconds, of bare `docker create` +
// `start` + `rm`, and of Berth's start + exec + stop, whose time runs on
// until the pool has made the computers the loop took; the rate is three
// quarters of the slower of the two. The baseline is bare creates and
// starts of the same image at that same rate for a minute, in the same
// run. Times are taken from each start's scheduled moment, so a start that
// waits for a free agent or a busy engine counts the wait.
//
//	go test ./e2e -run '^$' -bench SustainedStarts -benchtime 1x
func BenchmarkSustainedStarts(b *testing.B) {
	requireDocker(b, "berth/test:latest")
	const (
		window = time.Minute
		agents = 60
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	s, _ := serveDaemon(b, daemon.Options{
		Egress: daemon.EgressOptions{Listen: ":0"},
		Logger: slog.New(slog.NewTextHandler(b.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, map[string]string{
		"COMPUTER_IMAGE_HEADLESS": "berth/test:latest", "COMPUTER_MEMORY_MB": "256", "COMPUTER_NETWORK_POOL": "4",
		"WARM_POOL_SIZE": "2", "WARM_POOL_MAX": "20",
	})
	cli := dockerClient(b)
	free := make(chan string, agents)
	for i := range agents {
		a := fmt.Sprintf("steady%02d", i)
		connect(s, a)
		free <- a
	}
	// Each one returns when its computer is ready, after which it is
	// removed or stopped, untimed.
	bareOne := func(i int) (time.Time, error) {
		return startBare(ctx, cli, "berth/test:latest", fmt.Sprintf("berth-bench-steady-%d-%d", time.Now().UnixNano(), i))
	}
	berthOne := func(int) (ready time.Time, err error) {
		a := <-free
		defer func() { free <- a }()
		var x execResult
		if st, err := callAPI(s.url, s.token, "POST", "/v1/agents/"+a+"/computer/start", "", nil, nil); err != nil || st != 200 {
			return ready, fmt.Errorf("start %s: %d %v", a, st, err)
		}
		defer s.call("POST", "/v1/agents/"+a+"/computer/stop", nil, nil)
		if st, err := callAPI(s.url, s.token, "POST", "/v1/agents/"+a+"/computer/exec", "", map[string]any{"command": "echo hi"}, &x); err != nil || st != 200 || x.Stdout != "hi\n" {
			return ready, fmt.Errorf("first exec on %s: %d %v %+v", a, st, err, x)
		}
		return time.Now(), nil
	}
	// What the engine holds: two workers in a closed loop, for 15 s, and
	// then the work the loop left behind, if any (drain): the rate is what
	// was done over the time it all took.
	closedLoop := func(one func(i int) (time.Time, error), drain func()) float64 {
		const probe = 15 * time.Second
		var done atomic.Int64
		begin := time.Now()
		end := begin.Add(probe)
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				for i := 0; time.Now().Before(end); i++ {
					if _, err := one(w*100000 + i); err != nil {
						b.Error(err)
						return
					}
					done.Add(1)
				}
			})
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		if drain != nil {
			drain()
		}
		return float64(done.Load()) / time.Since(begin).Seconds()
	}
	// A bare start's removal is in its loop. Each Berth start takes a
	// computer from the pool, whose refill runs after the start has
	// returned: the engine holds a rate only if it also makes those.
	bareRate := closedLoop(bareOne, nil)
	berthRate := closedLoop(berthOne, func() {
		testkit.EventuallyContext(b, ctx, "the pool made what the loop took", func() bool { return s.d.Service.PoolStats().Creating == 0 })
	})
	rate := 0.75 * min(bareRate, berthRate)
	if rate <= 0 {
		b.Fatal("the engine started nothing in 15 s")
	}
	interval := time.Duration(float64(time.Second) / rate)
	// steady runs one at each interval for the window, each timed from its
	// scheduled moment.
	steady := func(one func(i int) (time.Time, error)) []float64 {
		n := int(window / interval)
		ds := make([]float64, n)
		var wg sync.WaitGroup
		start := time.Now()
		for i := range n {
			at := start.Add(time.Duration(i) * interval)
			time.Sleep(time.Until(at))
			wg.Go(func() {
				ready, err := one(i)
				if err != nil {
					b.Error(err)
					return
				}
				ds[i] = float64(ready.Sub(at)) / float64(time.Millisecond)
			})
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		return ds
	}
	var ours, base []float64
	for b.Loop() {
		b.StopTimer()
		base = append(base, steady(bareOne)...)
		testkit.EventuallyContext(b, ctx, "the pool refilled", func() bool { return s.d.Service.PoolStats().Waiting >= 2 })
		claimed := s.d.Service.PoolStats().Claimed
		b.StartTimer()
		ours = append(ours, steady(berthOne)...)
		b.StopTimer()
		b.Logf("%.2f starts a second for %v: %d of %d from the pool", rate, window, s.d.Service.PoolStats().Claimed-claimed, int(window/interval))
		b.StartTimer()
	}
	b.ReportMetric(rate, "starts/s")
	b.ReportMetric(berthRate, "closed-loop-starts/s")
	b.ReportMetric(bareRate, "bare-closed-loop-starts/s")
	b.ReportMetric(percentile(ours, 0.5), "sustained-start-p50-ms")
	b.ReportMetric(percentile(ours, 0.99), "sustained-start-p99-ms")
	b.ReportMetric(percentile(base, 0.5), "bare-sustained-start-p50-ms")
	b.ReportMetric(percentile(base, 0.99), "bare-sustained-start-p99-ms")
}
