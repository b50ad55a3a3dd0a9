package docker

import (
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/providers"
)

// Settings the docker provider reads, by their SPEC names.
// DefaultNetworkPool is how many computer networks are made ahead of time.
const DefaultNetworkPool = 2

const (
	SettingSocket         = "DOCKER_SOCKET"
	SettingHeadlessImage  = "COMPUTER_IMAGE_HEADLESS"
	SettingDesktopImage   = "COMPUTER_IMAGE_DESKTOP"
	SettingMemoryMB       = "COMPUTER_MEMORY_MB"
	SettingCPUs           = "COMPUTER_CPUS"
	SettingRuntime        = "SANDBOX_RUNTIME"
	SettingPids           = "COMPUTER_PIDS"
	SettingTmpMB          = "COMPUTER_TMP_MB"
	SettingShmMB          = "COMPUTER_SHM_MB"
	SettingJoinContainers = "DOCKER_JOIN_CONTAINERS"
	SettingNetworkPool    = "COMPUTER_NETWORK_POOL"
	SettingWarmPool       = "WARM_POOL_SIZE"
	SettingWarmPoolMin    = "WARM_POOL_MIN"
	SettingWarmPoolMax    = "WARM_POOL_MAX"
	SettingWarmPoolDesk   = "WARM_POOL_DESKTOP"
	SettingSubnets        = "COMPUTER_SUBNETS"
	SettingGrace          = "COMPUTER_GRACE_SECONDS"
	SettingDiskMB         = "COMPUTER_DISK_MB"
)

// Defaults for the settings.
const (
	DefaultSocket        = "unix:///var/run/docker.sock"
	DefaultHeadlessImage = "berth/headless:latest"
	DefaultDesktopImage  = "berth/desktop:latest"
	DefaultMemoryMB      = 2048
	DefaultCPUs          = 1.0
	DefaultPids          = 512
	DefaultTmpMB         = 1024
	DefaultShmMB         = 512
	DefaultGrace         = 10 * time.Minute
	DefaultDiskMB        = 10240
)

// Ranges the settings are checked against.
const (
	MinMemoryMB = 64
	MaxMemoryMB = 1 << 20 // 1 TiB
	MinCPUs     = 0.01
	MaxCPUs     = 1024
	MinPids     = 32
	MaxPids     = 4194304 // the kernel's pid_max ceiling
	MinTmpMB    = 1
	MaxTmpMB    = 1 << 20
	MinShmMB    = 1
	MaxShmMB    = 1 << 20
	MaxWarmPool = 1000
	MaxGrace    = 24 * time.Hour
	MinDiskMB   = 16
	MaxDiskMB   = 1 << 24 // 16 TiB
	// MinSubnetBits and MaxSubnetBits bound COMPUTER_SUBNETS: from a /8 to
	// a /24 (16 computer networks).
	MinSubnetBits = 8
	MaxSubnetBits = SubnetBits - 4
)

// Options configure a Docker provider. A zero field takes its default; a
// field set out of range makes New fail with an error naming the setting.
type Options struct {
	// Host is the Docker engine's address: unix:///var/run/docker.sock, a
	// plain socket path, or tcp://host:port (DOCKER_SOCKET).
	Host string
	// HeadlessImage and DesktopImage are the image references computers
	// start from (COMPUTER_IMAGE_HEADLESS, COMPUTER_IMAGE_DESKTOP).
	HeadlessImage string
	DesktopImage  string
	// MemoryMB is each computer's memory limit; swap is capped at the same
	// amount (COMPUTER_MEMORY_MB).
	MemoryMB int64
	// CPUs is each computer's CPU quota, in CPUs (COMPUTER_CPUS).
	CPUs float64
	// Pids bounds the processes in each computer (COMPUTER_PIDS).
	Pids int64
	// TmpMB is the size of each computer's in-memory /tmp (COMPUTER_TMP_MB).
	TmpMB int64
	// ShmMB is the size of each computer's /dev/shm (COMPUTER_SHM_MB).
	ShmMB int64
	// DiskMB is the most each computer can write to the host's disk: the
	// size of its home's own filesystem (COMPUTER_DISK_MB, default 10240;
	// the setting's 0 is NoDiskLimit here, an unlimited home, unsafe). See
	// quota.go.
	DiskMB int64
	// Runtime is the OCI runtime computers run under (SANDBOX_RUNTIME),
	// which the engine must list; empty means runsc (gVisor) when the
	// engine lists it, else the engine's default. See ChooseRuntime.
	Runtime string
	// JoinContainers are containers (names or ids) connected to every new
	// computer network, so that they can reach the computer: the supervisor
	// when it runs in a container, the egress proxy, the TURN relay
	// (DOCKER_JOIN_CONTAINERS, comma-separated).
	JoinContainers []string
	// EgressContainer is a container (name or id) connected to every new
	// computer network at the network's last host address (EgressAddr),
	// which the computer knows as EgressHost: the lending agent's egress
	// proxy container under its engine guard (see egressjoin.go). It needs
	// networks made at start (NetworkPool 0).
	EgressContainer string
	// NetworkPool is how many computer networks are kept made ahead of time
	// (COMPUTER_NETWORK_POOL, default 2 from settings; 0 makes each network
	// at start). See netpool.go.
	NetworkPool int
	// WarmPool is how many started headless computers wait, unbound, for
	// a session, at least (WARM_POOL_SIZE, also named WARM_POOL_MIN; 0 to
	// 1000, default 0). See pool.go.
	WarmPool int
	// WarmPoolMax is how many may wait when the starts seen ask for more
	// (WARM_POOL_MAX, WarmPool to 1000; 0 or WarmPool: a fixed size). The
	// pool follows demand between the two (warmpool.Pool.Size).
	WarmPoolMax int
	// WarmPoolDesktop is how many started desktop computers wait, unbound,
	// for a session (WARM_POOL_DESKTOP, 0 to 1000, default 0).
	WarmPoolDesktop int
	// Subnets is the IPv4 range computer networks take their subnets from
	// (COMPUTER_SUBNETS); the zero value picks one of
	// DefaultSubnetCandidates. See subnets.go.
	Subnets netip.Prefix
	// Routes lists the host's routes, which Subnets must not overlap
	// (default HostRoutes).
	Routes func() ([]Route, error)
	// Grace is how long past its lease a computer (and its network and
	// volume) is kept before any Berth process on the engine may remove it
	// as garbage (COMPUTER_GRACE_SECONDS, default 600). See garbage.go.
	Grace time.Duration
	// Clock tells the time for expiry labels (default the real clock).
	Clock clock.Clock
	// MemInfo reports the host's available and total memory in bytes, for
	// the warm pool's memory checks (default: read /proc/meminfo).
	MemInfo func() (available, total uint64, err error)
	// Logger receives the provider's logs; nil discards them.
	Logger *slog.Logger
}

// OptionsFromConfig reads the provider's settings. Unset settings take their
// defaults; a malformed or out-of-range value is an error naming the setting
// and the values it accepts.
func OptionsFromConfig(cfg providers.Config) (Options, error) {
	o := Options{
		Host:          cfg.Get(SettingSocket, DefaultSocket),
		HeadlessImage: cfg.Get(SettingHeadlessImage, DefaultHeadlessImage),
		DesktopImage:  cfg.Get(SettingDesktopImage, DefaultDesktopImage),
		Runtime:       cfg.Get(SettingRuntime, ""),
		Logger:        cfg.Logger,
	}
	var err error
	if o.MemoryMB, err = intSetting(cfg, SettingMemoryMB, DefaultMemoryMB, MinMemoryMB, MaxMemoryMB, "megabytes"); err != nil {
		return Options{}, err
	}
	if o.CPUs, err = cpuSetting(cfg); err != nil {
		return Options{}, err
	}
	if o.Pids, err = intSetting(cfg, SettingPids, DefaultPids, MinPids, MaxPids, "processes"); err != nil {
		return Options{}, err
	}
	if o.TmpMB, err = intSetting(cfg, SettingTmpMB, DefaultTmpMB, MinTmpMB, MaxTmpMB, "megabytes"); err != nil {
		return Options{}, err
	}
	if o.ShmMB, err = intSetting(cfg, SettingShmMB, DefaultShmMB, MinShmMB, MaxShmMB, "megabytes"); err != nil {
		return Options{}, err
	}
	if o.DiskMB, err = intSetting(cfg, SettingDiskMB, DefaultDiskMB, 0, MaxDiskMB, "megabytes, 0 for no limit"); err != nil {
		return Options{}, err
	}
	if o.DiskMB == 0 {
		o.DiskMB = NoDiskLimit
	} else if o.DiskMB < MinDiskMB {
		return Options{}, diskRangeError(o.DiskMB)
	}
	pool, err := intSetting(cfg, SettingNetworkPool, DefaultNetworkPool, 0, 64, "networks")
	if err != nil {
		return Options{}, err
	}
	o.NetworkPool = int(pool)
	warm, err := intSetting(cfg, SettingWarmPool, 0, 0, MaxWarmPool, "computers")
	if err != nil {
		return Options{}, err
	}
	if cfg.Get(SettingWarmPoolMin, "") != "" {
		lo, err := intSetting(cfg, SettingWarmPoolMin, 0, 0, MaxWarmPool, "computers")
		if err != nil {
			return Options{}, err
		}
		if cfg.Get(SettingWarmPool, "") != "" && lo != warm {
			return Options{}, fmt.Errorf("%s=%d and %s=%d disagree: they name the same setting; set one", SettingWarmPoolMin, lo, SettingWarmPool, warm)
		}
		warm = lo
	}
	o.WarmPool = int(warm)
	hi, err := intSetting(cfg, SettingWarmPoolMax, warm, warm, MaxWarmPool, "computers, at least "+SettingWarmPool)
	if err != nil {
		return Options{}, err
	}
	o.WarmPoolMax = int(hi)
	desk, err := intSetting(cfg, SettingWarmPoolDesk, 0, 0, MaxWarmPool, "computers")
	if err != nil {
		return Options{}, err
	}
	o.WarmPoolDesktop = int(desk)
	if v := strings.TrimSpace(cfg.Get(SettingSubnets, "")); v != "" {
		if o.Subnets, err = netip.ParsePrefix(v); err != nil {
			return Options{}, fmt.Errorf("%s=%q is not a range: want an IPv4 CIDR from /%d to /%d, e.g. %s", SettingSubnets, v, MinSubnetBits, MaxSubnetBits, DefaultSubnetCandidates[0])
		}
	}
	grace, err := intSetting(cfg, SettingGrace, int64(DefaultGrace/time.Second), 1, int64(MaxGrace/time.Second), "seconds")
	if err != nil {
		return Options{}, err
	}
	o.Grace = time.Duration(grace) * time.Second
	for name := range strings.SplitSeq(cfg.Get(SettingJoinContainers, ""), ",") {
		if name = strings.TrimSpace(name); name != "" {
			o.JoinContainers = append(o.JoinContainers, name)
		}
	}
	return o.withDefaults()
}

func intSetting(cfg providers.Config, name string, def, lo, hi int64, unit string) (int64, error) {
	s := strings.TrimSpace(cfg.Get(name, strconv.FormatInt(def, 10)))
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q is not a whole number: want %d to %d (%s)", name, s, lo, hi, unit)
	}
	if v < lo || v > hi {
		return 0, rangeError(name, strconv.FormatInt(v, 10), lo, hi, unit)
	}
	return v, nil
}

func cpuSetting(cfg providers.Config) (float64, error) {
	s := strings.TrimSpace(cfg.Get(SettingCPUs, strconv.FormatFloat(DefaultCPUs, 'g', -1, 64)))
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s=%q is not a number: want %g to %d (CPUs, fractions allowed)", SettingCPUs, s, MinCPUs, MaxCPUs)
	}
	if v < MinCPUs || v > MaxCPUs {
		return 0, fmt.Errorf("%s=%s is out of range: want %g to %d (CPUs, fractions allowed)", SettingCPUs, s, MinCPUs, MaxCPUs)
	}
	return v, nil
}

// NoDiskLimit in Options.DiskMB turns the disk quota off.
const NoDiskLimit = -1

func diskRangeError(v int64) error {
	return fmt.Errorf("%s=%d is out of range: want 0 (no limit, which lets a computer fill the host's disk) or %d to %d (megabytes)",
		SettingDiskMB, v, MinDiskMB, MaxDiskMB)
}

func rangeError(name, v string, lo, hi int64, unit string) error {
	return fmt.Errorf("%s=%s is out of range: want %d to %d (%s)", name, v, lo, hi, unit)
}

var (
	runtimeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	// computerID is what Docker accepts in container, network and volume
	// names after their prefix.
	computerID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
)

// withDefaults fills zero fields with their defaults and checks the rest.
func (o Options) withDefaults() (Options, error) {
	if o.Host == "" {
		o.Host = DefaultSocket
	}
	host, err := normalizeHost(o.Host)
	if err != nil {
		return Options{}, err
	}
	o.Host = host
	if o.HeadlessImage == "" {
		o.HeadlessImage = DefaultHeadlessImage
	}
	if o.DesktopImage == "" {
		o.DesktopImage = DefaultDesktopImage
	}
	for _, im := range []struct{ setting, ref string }{
		{SettingHeadlessImage, o.HeadlessImage},
		{SettingDesktopImage, o.DesktopImage},
	} {
		if strings.ContainsFunc(im.ref, func(r rune) bool { return r <= ' ' }) {
			return Options{}, fmt.Errorf("%s=%q is not an image reference: want NAME[:TAG], e.g. %s", im.setting, im.ref, DefaultHeadlessImage)
		}
	}
	ints := []struct {
		v       *int64
		def     int64
		lo, hi  int64
		setting string
		unit    string
	}{
		{&o.MemoryMB, DefaultMemoryMB, MinMemoryMB, MaxMemoryMB, SettingMemoryMB, "megabytes"},
		{&o.Pids, DefaultPids, MinPids, MaxPids, SettingPids, "processes"},
		{&o.TmpMB, DefaultTmpMB, MinTmpMB, MaxTmpMB, SettingTmpMB, "megabytes"},
		{&o.ShmMB, DefaultShmMB, MinShmMB, MaxShmMB, SettingShmMB, "megabytes"},
	}
	for _, f := range ints {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < f.lo || *f.v > f.hi {
			return Options{}, rangeError(f.setting, strconv.FormatInt(*f.v, 10), f.lo, f.hi, f.unit)
		}
	}
	if o.DiskMB == 0 {
		o.DiskMB = DefaultDiskMB
	}
	if o.DiskMB != NoDiskLimit && (o.DiskMB < MinDiskMB || o.DiskMB > MaxDiskMB) {
		return Options{}, diskRangeError(o.DiskMB)
	}
	if o.CPUs == 0 {
		o.CPUs = DefaultCPUs
	}
	if !(o.CPUs >= MinCPUs && o.CPUs <= MaxCPUs) {
		return Options{}, fmt.Errorf("%s=%g is out of range: want %g to %d (CPUs, fractions allowed)", SettingCPUs, o.CPUs, MinCPUs, MaxCPUs)
	}
	if o.Runtime != "" && !runtimeName.MatchString(o.Runtime) {
		return Options{}, fmt.Errorf("%s=%q is not a runtime name: want empty (Docker's default) or a runtime registered with the engine, e.g. runsc", SettingRuntime, o.Runtime)
	}
	for _, c := range o.JoinContainers {
		if c == "" || strings.ContainsFunc(c, func(r rune) bool { return r <= ' ' || r == ',' }) {
			return Options{}, fmt.Errorf("%s: %q is not a container name or id", SettingJoinContainers, c)
		}
	}
	if c := o.EgressContainer; c != "" {
		if strings.ContainsFunc(c, func(r rune) bool { return r <= ' ' || r == ',' }) {
			return Options{}, fmt.Errorf("egress container %q is not a container name or id", c)
		}
		if o.NetworkPool > 0 {
			return Options{}, fmt.Errorf("an egress container needs networks made at start: %s=%d, want 0", SettingNetworkPool, o.NetworkPool)
		}
	}
	if o.WarmPool < 0 || o.WarmPool > MaxWarmPool {
		return Options{}, rangeError(SettingWarmPool, strconv.Itoa(o.WarmPool), 0, MaxWarmPool, "computers")
	}
	if o.WarmPoolDesktop < 0 || o.WarmPoolDesktop > MaxWarmPool {
		return Options{}, rangeError(SettingWarmPoolDesk, strconv.Itoa(o.WarmPoolDesktop), 0, MaxWarmPool, "computers")
	}
	if o.WarmPoolMax != 0 && (o.WarmPoolMax < o.WarmPool || o.WarmPoolMax > MaxWarmPool) {
		return Options{}, rangeError(SettingWarmPoolMax, strconv.Itoa(o.WarmPoolMax), int64(o.WarmPool), MaxWarmPool, "computers, at least "+SettingWarmPool)
	}
	if o.Subnets.IsValid() {
		if !o.Subnets.Addr().Is4() || o.Subnets.Bits() < MinSubnetBits || o.Subnets.Bits() > MaxSubnetBits {
			return Options{}, fmt.Errorf("%s=%s: want an IPv4 range from /%d to /%d, e.g. %s", SettingSubnets, o.Subnets, MinSubnetBits, MaxSubnetBits, DefaultSubnetCandidates[0])
		}
		o.Subnets = o.Subnets.Masked()
	}
	if o.Routes == nil {
		o.Routes = HostRoutes
	}
	if o.Grace == 0 {
		o.Grace = DefaultGrace
	}
	if o.Grace < 0 || o.Grace > MaxGrace {
		return Options{}, rangeError(SettingGrace, strconv.FormatInt(int64(o.Grace/time.Second), 10), 1, int64(MaxGrace/time.Second), "seconds")
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.MemInfo == nil {
		o.MemInfo = hostMemInfo
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// normalizeHost turns a DOCKER_SOCKET value into an engine address.
func normalizeHost(h string) (string, error) {
	h = strings.TrimSpace(h)
	if strings.HasPrefix(h, "/") {
		h = "unix://" + h
	}
	bad := fmt.Errorf("%s=%q is not a Docker endpoint: want unix:///path/to/docker.sock, a socket path, or tcp://host:port", SettingSocket, h)
	scheme, rest, ok := strings.Cut(h, "://")
	if !ok || rest == "" {
		return "", bad
	}
	switch scheme {
	case "unix":
		if !strings.HasPrefix(rest, "/") {
			return "", bad
		}
	case "tcp":
		u, err := url.Parse(h)
		if err != nil || u.Host == "" {
			return "", bad
		}
	default:
		return "", bad
	}
	return h, nil
}
