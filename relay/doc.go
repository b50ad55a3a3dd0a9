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
// Only one relay is run today, but nothing ties an agent to a given relay.
// With several relays behind one name, each agent lands on whichever relay
// its connection reaches. Each relay reports presence to the supervisor's
// store as (agent id, relay address, online, connected at, last seen,
// version), where the relay address is the relay's own internal URL, not
// the shared public name. To reach an agent, the supervisor reads the row
// for that agent and sends its request to the relay recorded there (which
// exposes the same per-agent transport over an internal, authenticated
// endpoint). When an agent moves, the newer connection's row replaces the
// older one (rows carry connected-at, and the latest wins); a relay that
// stops reporting has its rows expire after a few report intervals, so the
// agent shows as offline with its last-seen time until it reconnects
// somewhere. A request in flight on a relay that dies fails and is reported
// as uncertain by the caller; it is never replayed.
package relay
