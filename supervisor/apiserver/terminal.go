package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/supervisor"
)

const (
	// terminalPingEvery is how often an open terminal's client is pinged;
	// one that does not answer within it is taken as gone, and the
	// terminal is closed.
	terminalPingEvery = 30 * time.Second
	// terminalWriteTimeout bounds one message to the client.
	terminalWriteTimeout = 30 * time.Second
	// terminalOutputChunk is the most output one message carries.
	terminalOutputChunk = 32 << 10
)

// terminal serves GET /v1/agents/{agent}/computer/terminal: an interactive
// terminal over a websocket (the protocol is in package api).
func (h *Handler) terminal(w http.ResponseWriter, r *http.Request) {
	r, ok := h.check(w, r, agentTool)
	if !ok {
		return
	}
	req, err := terminalQuery(r)
	if err != nil {
		writeError(w, supervisor.AsError(err))
		return
	}
	h.serveTerminal(w, r, r.PathValue("agent"), req)
}

// serveTerminal opens a terminal for agent and relays it over the
// request's websocket.
func (h *Handler) serveTerminal(w http.ResponseWriter, r *http.Request, agent string, req supervisor.TerminalRequest) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		w.Header().Set("Upgrade", "websocket")
		writeError(w, &supervisor.Error{Status: http.StatusUpgradeRequired, Code: supervisor.CodeBadRequest,
			Message: r.URL.Path + " is a websocket"})
		return
	}
	t, err := h.svc.OpenTerminal(r.Context(), agent, req)
	if err != nil {
		writeError(w, h.logged(r, err))
		return
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		h.log.Info("terminal: websocket accept failed", "agent", agent, "err", err)
		t.Close()
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(api.TerminalMessageBytes)
	relayTerminal(context.WithoutCancel(r.Context()), conn, t, h.log.With("agent", agent, "session", t.Session()))
}

// terminalQuery reads the route's query parameters.
func terminalQuery(r *http.Request) (supervisor.TerminalRequest, error) {
	q := r.URL.Query()
	req := supervisor.TerminalRequest{Command: q.Get("command")}
	size := func(field string, limit int, dst *int) error {
		v := q.Get(field)
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest,
				Message: fmt.Sprintf("%s: %q is not a whole number (1..%d)", field, v, limit)}
		}
		if n < 1 || n > limit {
			return &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest,
				Message: fmt.Sprintf("%s: %d is outside 1..%d", field, n, limit)}
		}
		*dst = n
		return nil
	}
	if err := size("cols", api.MaxTerminalCols, &req.Cols); err != nil {
		return req, err
	}
	if err := size("rows", api.MaxTerminalRows, &req.Rows); err != nil {
		return req, err
	}
	return req, supervisor.CheckTerminalRequest(&req)
}

// relayTerminal carries a terminal both ways until it ends, then sends
// its exit and closes the websocket.
func relayTerminal(ctx context.Context, conn *websocket.Conn, t *supervisor.Terminal, log *slog.Logger) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	send := func(typ websocket.MessageType, b []byte) error {
		wctx, wcancel := context.WithTimeout(ctx, terminalWriteTimeout)
		defer wcancel()
		return conn.Write(wctx, typ, b)
	}

	// The client's messages: input, resizes, end of input. When the
	// client goes away, the terminal is closed.
	go func() {
		for {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				go t.Close()
				return
			}
			if typ == websocket.MessageBinary {
				if _, err := t.Write(data); err != nil {
					go t.Close()
					return
				}
				continue
			}
			var m api.TerminalMessage
			if err := json.Unmarshal(data, &m); err != nil {
				log.Info("terminal: bad message", "err", err)
				continue
			}
			switch m.Type {
			case "resize":
				if err := t.Resize(m.Cols, m.Rows); err != nil {
					log.Info("terminal: resize", "err", err)
				}
			case "eof":
				t.CloseInput()
			}
		}
	}()

	// Pings find clients that vanished without closing.
	go func() {
		tick := time.NewTicker(terminalPingEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.Done():
				return
			case <-tick.C:
				pctx, pcancel := context.WithTimeout(ctx, terminalPingEvery)
				err := conn.Ping(pctx)
				pcancel()
				if err != nil && ctx.Err() == nil {
					log.Info("terminal: client did not answer a ping", "err", err)
					go t.Close()
					return
				}
			}
		}
	}()

	buf := make([]byte, terminalOutputChunk)
	for {
		n, err := t.Read(buf)
		if n > 0 {
			if werr := send(websocket.MessageBinary, buf[:n]); werr != nil {
				go t.Close()
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				log.Info("terminal: output", "err", err)
			}
			break
		}
	}
	exit := t.Wait()
	b, _ := json.Marshal(api.TerminalMessage{Type: "exit", ExitCode: exit.ExitCode, Code: exit.Code, Message: exit.Message})
	if send(websocket.MessageText, b) != nil {
		return
	}
	status, reason := websocket.StatusCode(api.TerminalCloseExited), fmt.Sprintf("exit %d", exit.ExitCode)
	switch exit.Code {
	case api.CodeSessionEnded:
		status, reason = websocket.StatusCode(api.TerminalCloseSessionEnded), exit.Code
	case "":
	default:
		status, reason = websocket.StatusCode(api.TerminalCloseLost), exit.Code
	}
	conn.Close(status, reason)
}
