package tunnel

import "github.com/berthdev/berth/providers"

func init() { providers.Describe(ID, (*Tunnel)(nil)) }

// Describe implements providers.Describer. The tunnel provider reads no
// settings: each connection names its runner.
func (*Tunnel) Describe() providers.Description {
	return providers.Description{
		Summary: "a computer that someone runs with `berth agent tunnel`, reached by its URL",
		Credentials: []providers.Setting{
			{Name: CredURL, Required: true, Help: "the runner's URL, as in its connection file"},
			{Name: CredAPIKey, Required: true, Secret: true, Help: "the connection token from the runner's connection file"},
		},
	}
}

var _ providers.Describer = (*Tunnel)(nil)
