// Package control is the lending agent's local control API, served on a
// unix socket that only the machine's owner can open (mode 0600), for the
// companion app: status, running sessions with their live CPU and memory,
// stop, approvals, the owner's limits, usage history, cleanup prompts and a
// computer's screenshot. api.go holds the wire types and paths; client.go
// the Go client; server.go the server over an agent/lender.Lender.
package control
