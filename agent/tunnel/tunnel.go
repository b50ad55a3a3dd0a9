// Package tunnel is the bring-your-own-computer runner behind
// `berth agent tunnel`: it starts a disposable computer through the Docker
// provider, serves its computerd on a loopback port through a reverse proxy,
// exposes that port through cloudflared when it is installed, and writes a
// connection file (URL and token) that a supervisor's `tunnel` connection
// takes. Next to the proxy it serves the runner API (runner.go): a
// supervisor claims the computer for one session at a time, and when the
// session ends the runner destroys it and starts a fresh one, so that every
// session starts empty. When the lifetime ends or the context is cancelled
// it removes the file and destroys the computer.
package tunnel

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/docker"
)

// Lifetime bounds the command line accepts, and its default.
const (
	MinLifetime     = 60 * time.Second
	MaxLifetime     = 24 * time.Hour
	DefaultLifetime = 15 * time.Minute
)

// Timeouts of the runner's steps.
const (
	healthTimeout  = 90 * time.Second // computerd answering after start
	tunnelTimeout  = 60 * time.Second // cloudflared printing its URL
	cleanupTimeout = 60 * time.Second // destroying the computer
)

// Cloudflared is the name of the binary the runner exposes the port with.
const Cloudflared = "cloudflared"

// ErrFileExists is returned when the connection file already exists; the
// runner never overwrites one.
var ErrFileExists = errors.New("connection file already exists")

// Options configure a run.
type Options struct {
	// Lifetime is how long the computer lives; it must be positive (the
	// command line holds it to MinLifetime..MaxLifetime).
	Lifetime time.Duration
	// ConnectionFile is where the connection file is written. It must not
	// exist.
	ConnectionFile string
	// URL is a named tunnel's public URL routed to the port. When set, no
	// quick tunnel is started and the connection file carries it.
	URL string
	// Port is the loopback port the computer is served on; 0 picks a free
	// one.
	Port int
	// Docker configures the computer (engine, image, CPU, memory and
	// process limits). The network pool is not used.
	Docker docker.Options
	// Image is the image kind, providers.ImageHeadless unless set.
	Image string
	// Unguarded starts the computer even when the host firewall cannot
	// close this host to it (--unguarded); logged as an error.
	Unguarded bool
	// GuardHost closes this host to computers except for the egress
	// proxy's port (0: none); nil is the docker provider's guard
	// (iptables and ip6tables).
	GuardHost func(ctx context.Context, egressPort int) error
	// Egress configures the computers' egress proxy.
	Egress EgressOptions
	// TURNRelay is the supervisor's TURN relay, HOST:PORT, that a desktop
	// computer's live view goes through (--turn-relay); empty is no live
	// view. The runner forwards a port on docker0 to it (liveview.go).
	TURNRelay string
	// TURNForwardHost is where the forwarder listens; empty is the
	// docker0 address.
	TURNForwardHost string
	// LookPath finds cloudflared; nil means exec.LookPath.
	LookPath func(string) (string, error)
	// Out receives the messages for the person running the command; nil
	// discards them.
	Out io.Writer
	// Logger receives the runner's logs; nil discards them.
	Logger *slog.Logger
	// Ready, when set, is called once the connection file is written.
	Ready func(Info)
	// Clock times the lifetime; nil is the system clock.
	Clock clock.Clock
}

// Info describes a running computer.
type Info struct {
	URL       string // the URL in the connection file
	LocalURL  string // http://127.0.0.1:PORT
	Token     string // the connection token
	MachineID string // the first computer's machine id (the container name); each session gets a fresh one
	Endpoint  string // the first computer's computerd on the Docker network
	Tunnel    string // "quick", "named" or "none"
	// Egress is the egress proxy's address as the computer reaches it;
	// empty without one.
	Egress string
	// TURN is the TURN forwarder's address as a desktop computer reaches
	// it; empty without live view.
	TURN string
}

// Connection is the content of the connection file.
type Connection struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// Run starts the computer and serves it until ctx ends or the lifetime is
// over, then removes the connection file and destroys the computer. Both
// endings return nil.
func Run(ctx context.Context, opts Options) error {
	if opts.Lifetime <= 0 {
		return fmt.Errorf("lifetime %v: want a positive duration", opts.Lifetime)
	}
	if opts.ConnectionFile == "" {
		return errors.New("connection file: want a path")
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return fmt.Errorf("port %d: want 0 (any free port) to 65535", opts.Port)
	}
	if opts.URL != "" {
		if u, err := url.Parse(opts.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("url %q: want the named tunnel's http(s) URL", opts.URL)
		}
	}
	if opts.Image == "" {
		opts.Image = providers.ImageHeadless
	}
	if opts.LookPath == nil {
		opts.LookPath = exec.LookPath
	}
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "tunnel")

	// Claim the connection file first, so that a mistake costs no computer.
	f, err := os.OpenFile(opts.ConnectionFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s (remove it, or choose another path)", ErrFileExists, opts.ConnectionFile)
	}
	if err != nil {
		return fmt.Errorf("connection file: %w", err)
	}
	var removeOnce sync.Once
	removeFile := func() {
		removeOnce.Do(func() {
			f.Close()
			if err := os.Remove(opts.ConnectionFile); err != nil && !errors.Is(err, os.ErrNotExist) {
				log.Error("remove connection file", "path", opts.ConnectionFile, "err", err)
				fmt.Fprintf(out, "could not remove the connection file %s: %v\n", opts.ConnectionFile, err)
			} else {
				fmt.Fprintf(out, "removed the connection file %s\n", opts.ConnectionFile)
			}
		})
	}
	defer removeFile()

	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.Port)))
	if err != nil {
		return fmt.Errorf("listen on 127.0.0.1:%d: %w", opts.Port, err)
	}
	defer ln.Close()
	local := "http://" + ln.Addr().String()

	tok, err := token.NewSecret(32)
	if err != nil {
		return err
	}
	r, err := startRunner(ctx, opts, tok, log)
	if err != nil {
		return err
	}
	defer func() {
		if machine, err := r.close(); err != nil {
			log.Error("destroy computer", "machine", machine, "err", err)
			fmt.Fprintf(out, "could not destroy the computer %s: %v (remove it with: docker rm -f %s)\n", machine, err, machine)
		} else if machine != "" {
			fmt.Fprintf(out, "destroyed the computer %s\n", machine)
		}
		r.d.Close()
	}()
	// What Berth processes on this engine left past their time goes too.
	gcCtx, stopGC := context.WithCancel(context.WithoutCancel(ctx))
	gcDone := make(chan struct{})
	go func() { defer close(gcDone); r.d.RunGarbageCollector(gcCtx) }()
	defer func() { stopGC(); <-gcDone }()

	srv := &http.Server{
		Handler:           r,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
		<-served
	}()

	m, _ := r.current()
	info := Info{LocalURL: local, Token: tok, MachineID: m.machine, Endpoint: m.endpoint}
	if r.egress != nil {
		info.Egress = r.egress.addr
	}
	info.TURN = r.turn.addr()
	tunnelDone := make(chan error, 1)
	switch bin, lerr := opts.LookPath(Cloudflared); {
	case opts.URL != "":
		info.URL, info.Tunnel = opts.URL, "named"
		fmt.Fprintf(out, "serving the computer on %s; route your named tunnel %s to it\n", local, opts.URL)
	case lerr == nil:
		tctx, cancel := context.WithCancel(ctx)
		defer cancel()
		pub, wait, err := quickTunnel(tctx, bin, local, log)
		if err != nil {
			return err
		}
		defer func() { cancel(); <-tunnelDone }()
		go func() { tunnelDone <- wait() }()
		info.URL, info.Tunnel = pub, "quick"
		fmt.Fprintf(out, "serving the computer on %s, exposed by a cloudflared quick tunnel at %s\n", local, pub)
	default:
		info.URL, info.Tunnel = local, "none"
		fmt.Fprintf(out, "cloudflared is not on PATH: serving the computer only on %s (this machine).\n"+
			"To expose it, install cloudflared and run it again, or run `cloudflared tunnel --url %s`\n"+
			"yourself, or route a named tunnel to the port and pass its URL with --url.\n", local, local)
	}

	b, err := json.Marshal(Connection{URL: info.URL, Token: tok})
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write connection file %s: %w", opts.ConnectionFile, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write connection file %s: %w", opts.ConnectionFile, err)
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	end := clk.Now().Add(opts.Lifetime)
	fmt.Fprintf(out, "wrote the connection file %s (url and token, readable only by you)\n", opts.ConnectionFile)
	fmt.Fprintf(out, "the token grants command access to the computer: give it only to the supervisor you connect\n")
	fmt.Fprintf(out, "the computer ends at %s (lifetime %v), or on Ctrl-C\n", end.Format(time.TimeOnly), opts.Lifetime)
	log.Info("computer served", "machine", m.machine, "url", info.URL, "local", local, "lifetime", opts.Lifetime)
	if opts.Ready != nil {
		opts.Ready(info)
	}

	lifetimeOver := clk.After(opts.Lifetime)
	// The file goes first, so that nobody picks up a computer that is
	// about to end.
	defer removeFile()
	select {
	case <-ctx.Done():
		fmt.Fprintln(out, "stopping")
		return nil
	case <-lifetimeOver:
		fmt.Fprintln(out, "lifetime over")
		return nil
	case err := <-served:
		served <- err
		return fmt.Errorf("serve %s: %w", local, err)
	case err := <-tunnelDone:
		tunnelDone <- err
		return fmt.Errorf("cloudflared ended: %v", err)
	}
}

// startRunner makes the Docker provider, closes this host to its
// computers, and starts the first computer.
func startRunner(ctx context.Context, opts Options, tok string, log *slog.Logger) (*runner, error) {
	dopts := opts.Docker
	dopts.NetworkPool = 0
	if dopts.Logger == nil {
		dopts.Logger = log
	}
	d, err := docker.New(dopts)
	if err != nil {
		return nil, err
	}
	eg, err := listenEgress(opts.Egress, log)
	if err != nil {
		d.Close()
		return nil, err
	}
	guard := opts.GuardHost
	if guard == nil {
		guard = d.GuardHost
	}
	guarded := false
	if err := guard(ctx, eg.port()); err != nil {
		if !opts.Unguarded {
			eg.close()
			d.Close()
			return nil, fmt.Errorf("cannot close this host to the computer (%v): it would reach every service this host listens on. "+
				"Run as root with iptables and ip6tables installed, or pass --unguarded to run it anyway", err)
		}
		log.Error("UNGUARDED: the computer can reach every service this host listens on (--unguarded)", "err", err)
	} else if opts.GuardHost == nil {
		guarded = true
		if eg.port() != 0 {
			eg.unguard = func(ctx context.Context) error { return docker.UnguardPort(ctx, eg.port()) }
		}
	}
	r := newRunner(ctx, d, tok, opts.Image, time.Now().Add(opts.Lifetime), log)
	if err := r.serveEgress(eg, opts.Egress); err != nil {
		r.close()
		d.Close()
		return nil, err
	}
	if r.turn, err = startTURN(ctx, opts, guarded, log); err != nil {
		r.close()
		d.Close()
		return nil, err
	}
	c, err := r.start(ctx, nil)
	if err != nil {
		r.close()
		d.Close()
		return nil, err
	}
	r.set(c, nil)
	return r, nil
}

func waitHealthy(ctx context.Context, endpoint, tok string) error {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	c := computerd.NewClient(endpoint, tok, computerd.WithHTTPClient(&http.Client{Timeout: 5 * time.Second}))
	var err error
	for {
		if _, err = c.Processes(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("computer at %s did not answer: %w (last error: %v)", endpoint, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// newProxy forwards every request to target, and nothing else.
func newProxy(target *url.URL, log *slog.Logger) http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("proxy", "path", r.URL.Path, "err", err)
			http.Error(w, "computer unreachable", http.StatusBadGateway)
		},
	}
}

// quickURL is the URL a cloudflared quick tunnel prints.
var quickURL = regexp.MustCompile(`https://[a-z0-9-]+\.trycloudflare\.com`)

// quickTunnel starts `cloudflared tunnel --no-autoupdate --url local` and
// returns the URL it prints, and a function that waits for it to exit.
func quickTunnel(ctx context.Context, bin, local string, log *slog.Logger) (string, func() error, error) {
	cmd := exec.CommandContext(ctx, bin, "tunnel", "--no-autoupdate", "--url", local)
	cmd.WaitDelay = 5 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		return "", nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.CloseWithError(io.EOF)
		exited <- err
	}()
	found := make(chan string, 1)
	var once sync.Once
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			log.Debug("cloudflared", "line", line)
			if u := quickURL.FindString(line); u != "" {
				once.Do(func() { found <- u })
			}
		}
		io.Copy(io.Discard, pr)
	}()
	wait := func() error { return <-exited }
	timer := time.NewTimer(tunnelTimeout)
	defer timer.Stop()
	select {
	case u := <-found:
		return u, wait, nil
	case err := <-exited:
		return "", nil, fmt.Errorf("cloudflared exited before printing a tunnel URL: %v", err)
	case <-timer.C:
	case <-ctx.Done():
	}
	// Stop it: the caller's cancel ends the process; wait for it here so
	// that nothing is left running.
	cmd.Process.Kill()
	<-exited
	if ctx.Err() != nil {
		return "", nil, ctx.Err()
	}
	return "", nil, fmt.Errorf("cloudflared printed no https://....trycloudflare.com URL within %v", tunnelTimeout)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
