package docker

import (
	"strconv"
	"time"

	"github.com/berthdev/berth/providers"
)

func init() { providers.Describe(ID, (*Docker)(nil)) }

// Describe implements providers.Describer: the settings OptionsFromConfig
// reads, with their defaults. The docker provider takes no credentials.
func (*Docker) Describe() providers.Description {
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	return providers.Description{
		Summary: "hardened containers on the supervisor's Docker engine",
		Settings: []providers.Setting{
			{Name: SettingSocket, Default: DefaultSocket, Help: "the engine's address (unix:///PATH, tcp://HOST:PORT, or a socket path)"},
			{Name: SettingHeadlessImage, Default: DefaultHeadlessImage, Help: "image of headless computers"},
			{Name: SettingDesktopImage, Default: DefaultDesktopImage, Help: "image of desktop computers"},
			{Name: SettingMemoryMB, Default: itoa(DefaultMemoryMB), Help: "memory of each computer, " + itoa(MinMemoryMB) + " to " + itoa(MaxMemoryMB) + " MB"},
			{Name: SettingCPUs, Default: strconv.FormatFloat(DefaultCPUs, 'g', -1, 64), Help: "CPUs of each computer, fractions allowed"},
			{Name: SettingPids, Default: itoa(DefaultPids), Help: "most processes in each computer"},
			{Name: SettingTmpMB, Default: itoa(DefaultTmpMB), Help: "size of each computer's in-memory /tmp, MB"},
			{Name: SettingDiskMB, Default: itoa(DefaultDiskMB), Help: "most each computer can write to disk (its home), " + itoa(MinDiskMB) + " to " + itoa(MaxDiskMB) + " MB; 0 for no limit, which lets a computer fill the host's disk"},
			{Name: SettingShmMB, Default: itoa(DefaultShmMB), Help: "size of each computer's /dev/shm, MB"},
			{Name: SettingRuntime, Help: "container runtime computers run under; unset: runsc (gVisor) when the engine lists it, else the engine's default; the default's name (runc) turns gVisor off"},
			{Name: SettingNetworkPool, Default: itoa(DefaultNetworkPool), Help: "computer networks made ahead of time, 0 to 64"},
			{Name: SettingWarmPool, Default: "0", Help: "started headless computers kept waiting, at least, 0 to " + itoa(MaxWarmPool) + " (also " + SettingWarmPoolMin + ")"},
			{Name: SettingWarmPoolMin, Help: "another name for " + SettingWarmPool},
			{Name: SettingWarmPoolMax, Help: "most computers kept waiting when recent bursts of starts ask for more, " + SettingWarmPool + " to " + itoa(MaxWarmPool) + " (default: " + SettingWarmPool + ", a fixed size): the pool follows the largest burst seen within one refill in the last 10 minutes"},
			{Name: SettingWarmPoolDesk, Default: "0", Help: "started desktop computers kept waiting, 0 to " + itoa(MaxWarmPool)},
			{Name: SettingSubnets, Help: "IPv4 range computer networks take a /28 each from (default: the first of 10.213.0.0/16 to 10.228.0.0/16 that no route or other Docker network uses)"},
			{Name: SettingGrace, Default: itoa(int64(DefaultGrace / time.Second)), Help: "seconds past its lease after which any Berth process on the engine removes a computer as garbage"},
			{Name: SettingJoinContainers, Help: "containers (comma-separated) joined to each computer's network, such as the supervisor's own"},
		},
	}
}

var _ providers.Describer = (*Docker)(nil)
