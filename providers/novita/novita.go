// Package novita runs Berth computers as Novita Agent Sandbox sandboxes,
// through Novita's E2B-compatible API (https://novita.ai/docs/guides/sandbox-e2b-compatible:
// the E2B API and SDKs with the domain sandbox.novita.ai and a Novita API
// key). Everything but the settings is the e2b provider's, including what
// a create sends: secure true, which E2B's SDKs send and Novita's
// documentation has on for every create since SDK v2.0.0
// (https://novita.ai/docs/guides/sandbox-secured-access).
package novita

import "github.com/berthdev/berth/providers/e2b"

// ID is the provider id.
const ID = "novita"

// Settings are Novita's setting names and defaults.
var Settings = e2b.Settings{
	APIURL: "NOVITA_API_URL", Domain: "NOVITA_DOMAIN",
	HeadlessTemplate: "NOVITA_TEMPLATE_HEADLESS", DesktopTemplate: "NOVITA_TEMPLATE_DESKTOP",
	DefaultAPIURL: "https://api.sandbox.novita.ai", DefaultDomain: "sandbox.novita.ai",
	DefaultHeadless: "berth-headless", DefaultDesktop: "berth-desktop",
}

func init() {
	e2b.Register(ID, "Novita Agent Sandbox sandboxes through its E2B-compatible API", Settings)
}
