package local

import (
	"strconv"

	"github.com/berthdev/berth/lending"
	"github.com/berthdev/berth/providers"
)

func init() { providers.Describe(ID, (*Local)(nil)) }

// Describe implements providers.Describer: the relay the provider reaches
// lenders through (berth dev runs one in its own process and needs
// neither), the size asked for each lent computer, and the lender a
// connection names.
func (*Local) Describe() providers.Description {
	return providers.Description{
		Summary: "someone else's machine, lent by its owner (berth agent run): computers run there, not on this host, reached through the relay the owner's agent connects out to",
		Settings: []providers.Setting{
			{Name: SettingRelayURL, Required: true, Help: "the relay's internal API, http(s)://HOST:PORT, or lookup for several relays that report their lenders (not needed under berth dev)"},
			{Name: SettingRelayToken, Required: true, Secret: true, Help: "the token the relay's internal API shares, at least 16 characters (not needed under berth dev)"},
			{Name: SettingCPUs, Help: "CPUs asked for each lent computer, " + strconv.FormatFloat(lending.MinCPUs, 'g', -1, 64) + " to " + strconv.Itoa(lending.MaxCPUs) + " (the owner's setting when empty)"},
			{Name: SettingMemoryMB, Help: "memory asked for each lent computer, " + strconv.FormatInt(lending.MinMemoryMB, 10) + " to " + strconv.FormatInt(lending.MaxMemoryMB, 10) + " MB (the owner's setting when empty)"},
		},
		Credentials: []providers.Setting{
			{Name: CredLender, Help: "the lender's companion agent id (cp_...), as `berth agent pair` printed it; optional while one lender is connected"},
		},
	}
}

var _ providers.Describer = (*Local)(nil)
