// Package incus is the provider that runs each computer as an Incus
// container made from Berth's image in an OCI registry. It speaks the
// Incus REST API with net/http, over the local unix socket or over HTTPS
// with a TLS client certificate (or an OIDC bearer token), follows its
// asynchronous operations, and reaches computerd at the container's
// address on port 7070.
package incus

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/internal/httpapi"
)

// ID is the provider id the package registers under.
const ID = "incus"

// Settings the provider reads, by name.
const (
	// SettingURL is unix:///var/lib/incus/unix.socket (the default) or
	// https://HOST:8443.
	SettingURL        = "INCUS_URL"
	SettingToken      = "INCUS_TOKEN" // an OIDC bearer token, for HTTPS
	SettingClientCert = "INCUS_CLIENT_CERT"
	SettingClientKey  = "INCUS_CLIENT_KEY"
	SettingCAFile     = "INCUS_CA_FILE"
	// SettingRegistry is the OCI registry the images are pulled from
	// (https://registry.example.com).
	SettingRegistry      = "INCUS_REGISTRY"
	SettingProject       = "INCUS_PROJECT"
	SettingHeadlessImage = "COMPUTER_IMAGE_HEADLESS"
	SettingDesktopImage  = "COMPUTER_IMAGE_DESKTOP"
	SettingMemoryMB      = "COMPUTER_MEMORY_MB"
	SettingCPUs          = "COMPUTER_CPUS"
)

// Defaults of the settings.
const (
	DefaultURL           = "unix:///var/lib/incus/unix.socket"
	DefaultProject       = "default"
	DefaultHeadlessImage = "berth/headless:latest"
	DefaultDesktopImage  = "berth/desktop:latest"
	DefaultMemoryMB      = 2048
	DefaultCPUs          = 1
)

// configPrefix is where Berth's labels live in an instance's config:
// dev.berth.managed is user.berth.managed, and so on.
const configPrefix = "user.berth."

// Timeouts of the provider's calls.
const (
	callTimeout  = 30 * time.Second
	readyTimeout = 3 * time.Minute
)

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		o, err := OptionsFromConfig(cfg)
		if err != nil {
			return nil, err
		}
		return New(o)
	})
	providers.Describe(ID, (*Incus)(nil))
}

// Options configure an Incus provider.
type Options struct {
	URL        string
	Token      string
	ClientCert string // PEM file
	ClientKey  string // PEM file
	CAFile     string
	Registry   string
	Project    string

	HeadlessImage string
	DesktopImage  string
	MemoryMB      int64
	CPUs          int

	// Client overrides the HTTP client built from the settings (tests).
	Client *http.Client
	// PollInterval is how often Create looks at a new container (default
	// 250 ms).
	PollInterval time.Duration
	Logger       *slog.Logger
}

// OptionsFromConfig reads the settings; a malformed value is an error
// naming the setting.
func OptionsFromConfig(cfg providers.Config) (Options, error) {
	o := Options{
		URL: cfg.Get(SettingURL, DefaultURL), Token: cfg.Get(SettingToken, ""),
		ClientCert: cfg.Get(SettingClientCert, ""), ClientKey: cfg.Get(SettingClientKey, ""), CAFile: cfg.Get(SettingCAFile, ""),
		Registry: cfg.Get(SettingRegistry, ""), Project: cfg.Get(SettingProject, DefaultProject),
		HeadlessImage: cfg.Get(SettingHeadlessImage, DefaultHeadlessImage), DesktopImage: cfg.Get(SettingDesktopImage, DefaultDesktopImage),
		Logger: cfg.Logger,
	}
	s := cfg.Get(SettingMemoryMB, strconv.Itoa(DefaultMemoryMB))
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || v < 64 || v > 1<<20 {
		return o, fmt.Errorf("%s=%q: want a whole number of MB from 64 to %d", SettingMemoryMB, s, 1<<20)
	}
	o.MemoryMB = v
	s = cfg.Get(SettingCPUs, strconv.Itoa(DefaultCPUs))
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || f < 0.01 || f > 1024 {
		return o, fmt.Errorf("%s=%q: want a number of CPUs from 1 to 1024 (Incus counts whole CPUs; fractions round up)", SettingCPUs, s)
	}
	o.CPUs = int(math.Ceil(f))
	return o, nil
}

// Incus is the provider.
type Incus struct {
	o    Options
	base string // http://incus or https://host:port
	hc   *http.Client
	log  *slog.Logger
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9-]{1,63}$`)

// New checks o and returns a provider.
func New(o Options) (*Incus, error) {
	if o.URL == "" {
		o.URL = DefaultURL
	}
	if o.Project == "" {
		o.Project = DefaultProject
	}
	if !nameRE.MatchString(o.Project) {
		return nil, fmt.Errorf("%s=%q: want a project name (letters, digits, '-')", SettingProject, o.Project)
	}
	if o.Registry == "" {
		return nil, fmt.Errorf("%s is unset: want the OCI registry that serves Berth's images, such as https://registry.example.com", SettingRegistry)
	}
	if u, err := url.Parse(o.Registry); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("%s=%q: want https://HOST[:PORT]", SettingRegistry, o.Registry)
	}
	if o.HeadlessImage == "" {
		o.HeadlessImage = DefaultHeadlessImage
	}
	if o.DesktopImage == "" {
		o.DesktopImage = DefaultDesktopImage
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = DefaultMemoryMB
	}
	if o.CPUs == 0 {
		o.CPUs = DefaultCPUs
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 250 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Incus{o: o, log: o.Logger.With("component", "incus")}
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: want unix:///PATH or https://HOST[:PORT]", SettingURL, o.URL)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}
	switch u.Scheme {
	case "unix":
		sock := u.Path
		if sock == "" {
			return nil, fmt.Errorf("%s=%q: the socket path is missing", SettingURL, o.URL)
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		p.base = "http://incus"
	case "https":
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.CAFile != "" {
			pem, err := os.ReadFile(o.CAFile)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", SettingCAFile, err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s=%s holds no PEM certificate", SettingCAFile, o.CAFile)
			}
			tc.RootCAs = pool
		}
		if (o.ClientCert == "") != (o.ClientKey == "") {
			return nil, fmt.Errorf("%s and %s go together: set both or neither", SettingClientCert, SettingClientKey)
		}
		if o.ClientCert != "" {
			cert, err := tls.LoadX509KeyPair(o.ClientCert, o.ClientKey)
			if err != nil {
				return nil, fmt.Errorf("%s/%s: %w", SettingClientCert, SettingClientKey, err)
			}
			tc.Certificates = []tls.Certificate{cert}
		} else if o.Token == "" {
			return nil, fmt.Errorf("%s is https: set %s and %s (a trusted client certificate) or %s", SettingURL, SettingClientCert, SettingClientKey, SettingToken)
		}
		tr.TLSClientConfig = tc
		p.base = strings.TrimRight(u.Scheme+"://"+u.Host, "/")
	default:
		return nil, fmt.Errorf("%s=%q: want unix:///PATH or https://HOST[:PORT]", SettingURL, o.URL)
	}
	p.hc = o.Client
	if p.hc == nil {
		p.hc = &http.Client{Transport: tr}
	}
	return p, nil
}

// Name returns the container name of a computer.
func Name(computerID string) string {
	n := "berth-c-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, computerID)
	if len(n) > 63 {
		n = n[:63]
	}
	return strings.TrimRight(n, "-")
}

// response is the envelope of every Incus answer.
type response struct {
	Type       string          `json:"type"` // sync, async, error
	Status     string          `json:"status"`
	StatusCode int             `json:"status_code"`
	Operation  string          `json:"operation"`
	ErrorCode  int             `json:"error_code"`
	Error      string          `json:"error"`
	Metadata   json.RawMessage `json:"metadata"`
}

// operation is an asynchronous operation's metadata.
type operation struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	StatusCode int    `json:"status_code"`
	Err        string `json:"err"`
}

// instance is the part of an instance Berth reads.
type instance struct {
	Name   string            `json:"name"`
	Status string            `json:"status"`
	Config map[string]string `json:"config"`
	// State comes with recursion=2.
	State *instanceState `json:"state"`
}

type instanceState struct {
	Status  string `json:"status"`
	Network map[string]struct {
		Addresses []struct {
			Family  string `json:"family"`
			Address string `json:"address"`
			Scope   string `json:"scope"`
		} `json:"addresses"`
	} `json:"network"`
}

// call sends one request; an error answer becomes an error that maps the
// status to the providers' errors.
func (p *Incus) call(ctx context.Context, method, path string, body any) (response, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(raw)
	}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	req, err := http.NewRequestWithContext(ctx, method, p.base+path+sep+"project="+url.QueryEscape(p.o.Project), rd)
	if err != nil {
		return response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if p.o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+p.o.Token)
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return response{}, httpapi.Unreachable(method+" "+stripQuery(path), err)
	}
	defer resp.Body.Close()
	var r response
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&r); err != nil {
		return r, fmt.Errorf("%w: %s %s: %d with an unreadable answer", providers.ErrUnavailable, method, stripQuery(path), resp.StatusCode)
	}
	if resp.StatusCode >= 300 || r.Type == "error" {
		code := r.ErrorCode
		if code == 0 {
			code = resp.StatusCode
		}
		return r, statusErr(code, fmt.Sprintf("%s %s: %d %s", method, stripQuery(path), code, httpapi.Redact(r.Error, p.o.Token)))
	}
	return r, nil
}

func stripQuery(p string) string { s, _, _ := strings.Cut(p, "?"); return s }

// statusErr maps an error answer as httpapi.StatusError does (a 400, such
// as a config Incus will not take, is a definite refusal), with a full
// storage pool (507) as no room.
func statusErr(code int, msg string) error {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		msg += " (the server does not trust this client's certificate or token)"
	case http.StatusInsufficientStorage:
		return fmt.Errorf("%w: %s", providers.ErrCapacity, msg)
	}
	return httpapi.StatusError(code, msg)
}

// wait follows an asynchronous answer to its end.
func (p *Incus) wait(ctx context.Context, r response) error {
	if r.Type != "async" {
		return nil
	}
	id := r.Operation
	if id == "" {
		var op operation
		json.Unmarshal(r.Metadata, &op)
		id = "/1.0/operations/" + op.ID
	}
	for {
		wr, err := p.call(ctx, "GET", id+"/wait?timeout=30", nil)
		if err != nil {
			return err
		}
		var op operation
		if err := json.Unmarshal(wr.Metadata, &op); err != nil {
			return fmt.Errorf("%w: operation %s: unreadable: %v", providers.ErrUnavailable, id, err)
		}
		switch op.Status {
		case "Success":
			return nil
		case "Failure", "Cancelled":
			if strings.Contains(op.Err, "not found") || strings.Contains(op.Err, "manifest unknown") {
				return fmt.Errorf("%w: %s", providers.ErrBadImage, op.Err)
			}
			return fmt.Errorf("%w: operation %s: %s", providers.ErrUnavailable, op.Status, op.Err)
		}
		// The wait answers when the operation ends or after its timeout;
		// a server that answers sooner is not asked again at once.
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: operation %s still %s: %v", providers.ErrUnavailable, id, op.Status, ctx.Err())
		case <-time.After(p.o.PollInterval):
		}
	}
}

// Create makes the container from the OCI image, started, and waits until
// it runs with an address.
func (p *Incus) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	name := Name(spec.ComputerID)
	image := p.o.HeadlessImage
	if spec.Image == providers.ImageDesktop {
		image = p.o.DesktopImage
	}
	config := map[string]string{
		"limits.memory":                          strconv.FormatInt(p.o.MemoryMB, 10) + "MiB",
		"limits.memory.swap":                     "false",
		"limits.cpu":                             strconv.Itoa(p.o.CPUs),
		"limits.processes":                       "512",
		"security.privileged":                    "false",
		"security.nesting":                       "false",
		"security.protection.delete":             "false",
		"environment." + computerd.EnvTokenHash:  spec.TokenHash,
		"environment." + computerd.EnvComputerID: spec.ComputerID,
	}
	for k, v := range spec.Env {
		config["environment."+k] = v
	}
	if at := spec.ExpiresAt(time.Now()); at != "" {
		// Incus has no lifetime for an instance: computerd, the
		// container's first process, ends it a minute after the lease,
		// should the supervisor not be there to delete it.
		config["environment."+computerd.EnvExpiresAt] = at
	}
	for k, v := range spec.Labels() {
		config[configKey(k)] = v
	}
	body := map[string]any{
		"name":      name,
		"type":      "container",
		"start":     true,
		"ephemeral": false,
		"config":    config,
		"source":    map[string]any{"type": "image", "protocol": "oci", "server": p.o.Registry, "alias": image},
	}
	cctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	r, err := p.call(cctx, "POST", "/1.0/instances", body)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, err)
	}
	if err := p.wait(cctx, r); err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, err)
	}
	for {
		sr, err := p.call(cctx, "GET", "/1.0/instances/"+name+"/state", nil)
		if err != nil {
			return providers.Machine{}, fmt.Errorf("create computer %s: state: %w", spec.ComputerID, err)
		}
		var st instanceState
		json.Unmarshal(sr.Metadata, &st)
		if ip := address(st); st.Status == "Running" && ip != "" {
			m := providers.Machine{ID: name, Endpoint: "http://" + net.JoinHostPort(ip, strconv.Itoa(computerd.Port)), Labels: spec.Labels()}
			p.log.Info("computer created", "computer", spec.ComputerID, "instance", name, "ip", ip)
			return m, nil
		}
		if st.Status == "Stopped" || st.Status == "Error" {
			return providers.Machine{}, fmt.Errorf("create computer %s: container %s is %s: %w", spec.ComputerID, name, st.Status, providers.ErrUnavailable)
		}
		select {
		case <-cctx.Done():
			return providers.Machine{}, fmt.Errorf("create computer %s: container %s has no address after %s: %w", spec.ComputerID, name, readyTimeout, providers.ErrUnavailable)
		case <-time.After(p.o.PollInterval):
		}
	}
}

// address is the container's first global IPv4 address (IPv6 otherwise).
func address(st instanceState) string {
	names := make([]string, 0, len(st.Network))
	for n := range st.Network {
		if n != "lo" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var v6 string
	for _, n := range names {
		for _, a := range st.Network[n].Addresses {
			if a.Scope != "global" && a.Scope != "" {
				continue
			}
			if a.Family == "inet" {
				return a.Address
			}
			if a.Family == "inet6" && v6 == "" {
				v6 = a.Address
			}
		}
	}
	return v6
}

func configKey(label string) string {
	return configPrefix + strings.TrimPrefix(label, "dev.berth.")
}

// Destroy stops the container (forcefully) and deletes it; a container
// already gone counts as deleted.
func (p *Incus) Destroy(ctx context.Context, machineID string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*callTimeout)
	defer cancel()
	r, err := p.call(ctx, "PUT", "/1.0/instances/"+machineID+"/state", map[string]any{"action": "stop", "force": true, "timeout": -1})
	if err == nil {
		err = p.wait(ctx, r)
	}
	if err != nil && !errors.Is(err, providers.ErrNotFound) && !strings.Contains(err.Error(), "already stopped") {
		return fmt.Errorf("destroy %s: stop: %w", machineID, err)
	}
	r, err = p.call(ctx, "DELETE", "/1.0/instances/"+machineID, nil)
	if err == nil {
		err = p.wait(ctx, r)
	}
	if err != nil && !errors.Is(err, providers.ErrNotFound) {
		return fmt.Errorf("destroy %s: %w", machineID, err)
	}
	p.log.Info("computer destroyed", "instance", machineID)
	return nil
}

// List returns the containers whose config carries user.berth.managed,
// with their addresses (one call, recursion=2).
func (p *Incus) List(ctx context.Context) ([]providers.Machine, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	r, err := p.call(ctx, "GET", "/1.0/instances?recursion=2", nil)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	var all []instance
	if err := json.Unmarshal(r.Metadata, &all); err != nil {
		return nil, fmt.Errorf("list: %w: unreadable answer", providers.ErrUnavailable)
	}
	var out []providers.Machine
	for _, in := range all {
		if in.Config[configKey(providers.LabelManaged)] != "true" {
			continue
		}
		m := providers.Machine{ID: in.Name, Labels: map[string]string{}}
		if in.State != nil && in.State.Status == "Running" {
			if ip := address(*in.State); ip != "" {
				m.Endpoint = "http://" + net.JoinHostPort(ip, strconv.Itoa(computerd.Port))
			}
		}
		for k, v := range in.Config {
			if rest, ok := strings.CutPrefix(k, configPrefix); ok {
				m.Labels["dev.berth."+rest] = v
			}
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Describe implements providers.Describer.
func (*Incus) Describe() providers.Description {
	return providers.Description{
		Summary: "one Incus container per computer, from Berth's image in an OCI registry",
		Settings: []providers.Setting{
			{Name: SettingURL, Default: DefaultURL, Help: "the Incus API: its unix socket or https://HOST:8443"},
			{Name: SettingClientCert, Help: "a client certificate the server trusts (PEM file), for https"},
			{Name: SettingClientKey, Secret: true, Help: "the client certificate's key (PEM file)"},
			{Name: SettingToken, Secret: true, Help: "an OIDC bearer token, instead of a client certificate"},
			{Name: SettingCAFile, Help: "the CA that signs the server's certificate"},
			{Name: SettingRegistry, Required: true, Help: "the OCI registry that serves Berth's images"},
			{Name: SettingProject, Default: DefaultProject, Help: "the Incus project"},
			{Name: SettingHeadlessImage, Default: DefaultHeadlessImage, Help: "the headless image in the registry"},
			{Name: SettingDesktopImage, Default: DefaultDesktopImage, Help: "the desktop image in the registry"},
			{Name: SettingMemoryMB, Default: strconv.Itoa(DefaultMemoryMB), Help: "limits.memory, MB"},
			{Name: SettingCPUs, Default: strconv.Itoa(DefaultCPUs), Help: "limits.cpu, whole CPUs"},
		},
	}
}

var (
	_ providers.Provider  = (*Incus)(nil)
	_ providers.Lister    = (*Incus)(nil)
	_ providers.Describer = (*Incus)(nil)
)
