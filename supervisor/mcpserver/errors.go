package mcpserver

import "errors"

// ErrNoToken is returned by Serve when it is asked to serve HTTP without a
// bearer token on an address other than loopback.
var ErrNoToken = errors.New("mcpserver: serving MCP over HTTP beyond loopback needs a bearer token")

// ErrShutdownTimeout is returned by Run and Serve when tool calls were
// still running when the shutdown timeout ran out.
var ErrShutdownTimeout = errors.New("mcpserver: tool calls still running at the end of the shutdown timeout")
