package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/supervisor/mcpserver"
)

func init() { addCommand(newMCPCmd) }

func newMCPCmd() *cobra.Command {
	var (
		httpAddr string
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve an agent's computer tools over MCP (stdio or streamable HTTP)",
		Long: `mcp serves the six computer tools of one agent (computer_start, computer_exec,
computer_read_file, computer_write_file, computer_stop, and computer_checkpoint
for persistent computers) to an MCP client. Each
tool calls the supervisor at --url or $BERTH_URL, for the agent named by
--agent or $BERTH_AGENT, with the agent key in $BERTH_AGENT_KEY (made with
` + "`berth key create --scope agent --agent X`" + `), which opens only that agent's
computer tools; without one it uses --token or $SUPERVISOR_TOKEN.

By default it speaks MCP on stdin and stdout, for clients that start it as a
subprocess; logs go to stderr. With --http HOST:PORT it serves streamable
HTTP at http://HOST:PORT` + mcpserver.Path + ` instead. HTTP clients must then send
"Authorization: Bearer TOKEN" with the token from --http-token or
$BERTH_MCP_TOKEN. Without a token it serves only on a loopback address
(127.0.0.1, ::1, localhost), where any local user and process can use the
tools, and refuses any other address.

Every tool call carries an idempotency key derived from the MCP session and
the call's id, so a client that sends the same call again gets the first
outcome and a command never runs twice. On SIGINT or SIGTERM it stops taking
calls, waits for the running ones to be answered, and exits.`,
		Example: `  berth mcp --agent a1
  BERTH_MCP_TOKEN=$(openssl rand -hex 32) berth mcp --agent a1 --http 0.0.0.0:7331`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return usagef("--log-level: %v", err)
			}
			agent, err := agentOf(cmd)
			if err != nil {
				return err
			}
			token := flagOrEnv(cmd, "http-token", "BERTH_MCP_TOKEN", "")
			if httpAddr == "" && cmd.Flags().Changed("http-token") {
				return usagef("--http-token needs --http")
			}
			c, err := newAgentClient(cmd)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
			s := mcpserver.New(c, agent, mcpserver.WithLogger(log), mcpserver.WithVersion(version))
			checkAgent(cmd, c, agent)
			if httpAddr == "" {
				return s.Run(cmd.Context(), stdioTransport(cmd))
			}
			return serveMCPHTTP(cmd, s, agent, httpAddr, token)
		},
	}
	cmd.Flags().String("agent", "", "the agent's id (default $BERTH_AGENT)")
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP on HOST:PORT instead of stdio")
	cmd.Flags().String("http-token", "", "bearer token that HTTP clients must send (default $BERTH_MCP_TOKEN; a flag is visible to other local users)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// checkAgent warns, without stopping, when the supervisor cannot serve the
// agent's tools right now; the tools report the same to the model.
func checkAgent(cmd *cobra.Command, c *api.Client, agent string) {
	ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
	defer cancel()
	_, err := c.Status(ctx, agent)
	var ae *api.APIError
	switch {
	case err == nil:
	case errors.As(err, &ae) && ae.Status == 404:
		warnf(cmd, "agent %s has no computer connection yet (%v); connect one with `berth computer connect --agent %s`", agent, err, agent)
	case errors.As(err, &ae) && (ae.Status == 401 || ae.Status == 403):
		warnf(cmd, "the supervisor refused the token (%v); check BERTH_AGENT_KEY or SUPERVISOR_TOKEN", err)
	default:
		warnf(cmd, "cannot check agent %s at the supervisor (%v); serving anyway", agent, err)
	}
}

// stdioTransport speaks MCP on the command's input and output. The end of
// the input does not cut short the calls read before it: they are
// answered first, so that `printf '...' | berth mcp` gets every answer.
func stdioTransport(cmd *cobra.Command) mcp.Transport {
	in := cmd.InOrStdin()
	if in == os.Stdin && cmd.OutOrStdout() == os.Stdout {
		return answerBeforeEOF{&mcp.StdioTransport{}}
	}
	rc, ok := in.(io.ReadCloser)
	if !ok {
		rc = io.NopCloser(in)
	}
	return answerBeforeEOF{&mcp.IOTransport{Reader: rc, Writer: nopWriteCloser{cmd.OutOrStdout()}}}
}

// answerBeforeEOF holds back the end of a connection's input until every
// call read from it has been answered (or the connection is closed).
// Without it, the MCP server cancels the calls in flight when its input
// ends, and a client that writes its requests and closes its side gets
// no answers.
type answerBeforeEOF struct{ t mcp.Transport }

func (a answerBeforeEOF) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := a.t.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &eofHoldingConn{Connection: c, open: map[jsonrpc.ID]bool{}, idle: make(chan struct{}), closed: make(chan struct{})}, nil
}

type eofHoldingConn struct {
	mcp.Connection
	mu        sync.Mutex
	open      map[jsonrpc.ID]bool // calls read and not yet answered
	idle      chan struct{}       // closed while open is empty; replaced when a call arrives
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *eofHoldingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if errors.Is(err, io.EOF) {
		c.mu.Lock()
		idle := c.idle
		if len(c.open) == 0 {
			idle = nil
		}
		c.mu.Unlock()
		if idle != nil {
			select {
			case <-idle:
			case <-c.closed:
			case <-ctx.Done():
			}
		}
		return nil, err
	}
	if req, ok := msg.(*jsonrpc.Request); ok && err == nil && req.IsCall() {
		c.mu.Lock()
		if len(c.open) == 0 {
			c.idle = make(chan struct{})
		}
		c.open[req.ID] = true
		c.mu.Unlock()
	}
	return msg, err
}

func (c *eofHoldingConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		if c.open[resp.ID] {
			delete(c.open, resp.ID)
			if len(c.open) == 0 {
				close(c.idle)
			}
		}
		c.mu.Unlock()
	}
	return err
}

func (c *eofHoldingConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Connection.Close()
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// serveMCPHTTP serves the tools over streamable HTTP on addr until the
// command's context ends.
func serveMCPHTTP(cmd *cobra.Command, s *mcpserver.Server, agent, addr, token string) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(cmd.Context(), "tcp", addr)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	if token == "" && !isLoopback(ln.Addr()) {
		ln.Close()
		return usagef("--http %s is not a loopback address: set BERTH_MCP_TOKEN (or --http-token) so that clients must authenticate", addr)
	}
	auth := "clients must send the bearer token"
	if token == "" {
		auth = "no token: any local user or process can use it"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "berth mcp: serving agent %s at http://%s%s (%s)\n", agent, ln.Addr(), mcpserver.Path, auth)
	err = s.Serve(cmd.Context(), ln, token)
	if errors.Is(err, mcpserver.ErrNoToken) {
		return usageError{err}
	}
	return err
}

// isLoopback reports whether addr is a TCP address on a loopback interface.
func isLoopback(addr net.Addr) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// newAgentClient is newClient with the agent key of $BERTH_AGENT_KEY, when
// set, in place of the operator token.
func newAgentClient(cmd *cobra.Command) (*api.Client, error) {
	key := os.Getenv("BERTH_AGENT_KEY")
	if key == "" {
		return newClient(cmd)
	}
	c, err := api.New(flagOrEnv(cmd, "url", "BERTH_URL", defaultURL), key, api.WithUserAgent("berth/"+version))
	if err != nil {
		return nil, usageError{err}
	}
	return c, nil
}
