// Package relay holds the protocol pieces shared by the relay server
// (package relayserver) and the agent side (package relayclient).
//
// # The link
//
// An agent on a lender's machine has no inbound port. It connects out to a
// relay over a websocket at [ConnectPath], presenting its agent token as a
// bearer token and its version in the [VersionHeader] header. Once the relay
// accepts the token, the websocket carries one yamux session. The relay is
// the yamux client: it opens one stream per connection it needs toward the
// agent, and the agent serves its local computer API (plain HTTP) on each
// stream it accepts. The supervisor therefore reaches an agent's API by agent
// id, as ordinary HTTP whose dialer opens a stream through the relay.
//
// Both ends ping each other over the session at a fixed interval; a ping
// that is not answered within the timeout closes the session, the relay
// marks the agent offline, and the agent reconnects with jittered
// exponential backoff.
//
// # Several relays
//
// Lenders may be spread over several relays. Each relay reports the
// lenders it holds to the supervisor (relayserver.Server.Report, at
// relayserver.ReportPath), naming itself by its internal API's URL; the
// supervisor keeps each report in its store as a lease that the relay
// renews, so a relay that dies loses its lenders within seconds. A
// supervisor with RELAY_URL=lookup reaches each lender through the relay
// its row names (relayserver.Router). When a lender is reported by two
// relays, the link that began later wins. A lending agent given several
// relay URLs moves to the next when its relay goes away; a request in
// flight on a relay that dies fails, is reported as uncertain by the
// caller, and is never replayed.
package relay
