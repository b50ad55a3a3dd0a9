package apiserver_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/computerd/desktop"
)

// seatEnv is an env whose fake machines serve a desktop that answers the
// pointer's position.
func seatEnv(t *testing.T) *env {
	e := newEnv(t)
	e.fake.SetDesktop(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != desktop.PathCursor {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(desktop.ActionResult{Cursor: []int{1, 2}, ScreenWidth: 1280, ScreenHeight: 720})
	}))
	return e
}

// connectDesktop connects agent to a desktop computer with extra fields
// and starts it.
func (e *env) connectDesktop(agent string, extra map[string]any) {
	e.t.Helper()
	e.mustCall("POST", "/v1/agents", map[string]any{"id": agent, "name": agent}, 201, nil)
	body := map[string]any{"agent": agent, "provider": "fake", "image": "desktop", "leaseSeconds": 900}
	for k, v := range extra {
		body[k] = v
	}
	e.mustCall("POST", "/v1/computers", body, 201, nil)
	e.mustCall("POST", "/v1/agents/"+agent+"/computer/start", nil, 200, nil)
}

// cursor calls a desktop tool of agent as holder ("" sends no holder) and
// returns the status, the error code and message.
func (e *env) cursor(agent, holder string) (int, string, string) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/agents/"+agent+"/computer/desktop/cursor", nil)
	req.Header.Set("Authorization", "Bearer "+e.bearer)
	if holder != "" {
		req.Header.Set(api.HeaderDesktopHolder, holder)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var eb struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	json.Unmarshal(raw, &eb)
	return resp.StatusCode, eb.Error.Code, eb.Error.Message
}

func (e *env) wantCursor(agent, holder string, want int, wantCode string) string {
	e.t.Helper()
	st, code, msg := e.cursor(agent, holder)
	if st != want || code != wantCode {
		e.t.Fatalf("desktop call of %s as %q: %d %s %q; want %d %s", agent, holder, st, code, msg, want, wantCode)
	}
	return msg
}

// TestDesktopSeats: with desktopUsers 1, holder A's desktop call seats it;
// holder B is refused 409 desktop_busy, told how many seats there are and
// when the first frees; once A's seat lapses (60 s after its last call) B
// gets it, and A is refused in turn. A holder's further calls keep its
// seat. With desktopUsers 2 two holders use the desktop at once, and a
// third is refused.
func TestDesktopSeats(t *testing.T) {
	e := seatEnv(t)
	e.connectDesktop("one", nil)
	var st struct {
		Connection map[string]any `json:"connection"`
	}
	e.mustCall("GET", "/v1/agents/one/computer", nil, 200, &st)
	if st.Connection["desktopUsers"] != float64(1) {
		t.Errorf("connection %v: want desktopUsers 1 by default", st.Connection)
	}

	e.wantCursor("one", "A", 200, "")
	msg := e.wantCursor("one", "B", 409, "desktop_busy")
	frees := e.clock.Now().Add(api.DesktopSeatSeconds * time.Second).UTC().Format(time.RFC3339)
	if !strings.Contains(msg, "1 desktop seat") || !strings.Contains(msg, frees) || !strings.Contains(msg, "desktopUsers 1") {
		t.Errorf("desktop_busy message %q: want the seats (1, desktopUsers) and when the first frees (%s)", msg, frees)
	}
	// A acts again 30 s later: its seat lasts 60 s from then.
	e.clock.Advance(30 * time.Second)
	e.wantCursor("one", "A", 200, "")
	e.clock.Advance(59 * time.Second)
	e.wantCursor("one", "B", 409, "desktop_busy")
	e.clock.Advance(time.Second)
	e.wantCursor("one", "B", 200, "")
	e.wantCursor("one", "A", 409, "desktop_busy")
	// Without a holder the caller's key holds the seat: another holder.
	e.wantCursor("one", "", 409, "desktop_busy")

	e.connectDesktop("two", map[string]any{"desktopUsers": 2})
	e.wantCursor("two", "A", 200, "")
	e.wantCursor("two", "B", 200, "")
	msg = e.wantCursor("two", "C", 409, "desktop_busy")
	if !strings.Contains(msg, "all 2 of its desktop seats") {
		t.Errorf("desktop_busy message %q: want the 2 seats", msg)
	}
	e.wantCursor("two", "A", 200, "")
	e.wantCursor("two", "", 409, "desktop_busy")

	// A new session starts with every seat free.
	e.mustCall("POST", "/v1/agents/one/computer/stop", nil, 200, nil)
	e.mustCall("POST", "/v1/agents/one/computer/start", nil, 200, nil)
	e.wantCursor("one", "A", 200, "")
}

// TestDesktopSeatInput: desktopUsers outside 1..10 is 422 naming the field
// and the limit, on a computer without a desktop 400; a malformed holder
// header is 400 naming it.
func TestDesktopSeatInput(t *testing.T) {
	e := seatEnv(t)
	e.mustCall("POST", "/v1/agents", map[string]any{"id": "d", "name": "d"}, 201, nil)
	for _, c := range []struct {
		body       map[string]any
		status     int
		code, want string
	}{
		{map[string]any{"image": "desktop", "desktopUsers": 0}, 422, "limit_exceeded", "desktopUsers: 0 is outside 1..10"},
		{map[string]any{"image": "desktop", "desktopUsers": 11}, 422, "limit_exceeded", "desktopUsers: 11 is outside 1..10"},
		{map[string]any{"desktopUsers": 2}, 400, "bad_request", "desktopUsers: only with image \"desktop\""},
	} {
		body := map[string]any{"agent": "d", "provider": "fake"}
		for k, v := range c.body {
			body[k] = v
		}
		var out struct {
			Error struct{ Message string } `json:"error"`
		}
		st, code := e.call("POST", "/v1/computers", body, &out)
		if st != c.status || code != c.code || !strings.Contains(out.Error.Message, c.want) {
			t.Errorf("connect %v: %d %s %q; want %d %s %q", c.body, st, code, out.Error.Message, c.status, c.code, c.want)
		}
	}
	e.connectDesktop("h", nil)
	for _, bad := range []string{strings.Repeat("x", api.MaxDesktopHolderChars+1), "two words", "caf\u00e9"} {
		if msg := e.wantCursor("h", bad, 400, "bad_request"); !strings.Contains(msg, api.HeaderDesktopHolder) {
			t.Errorf("holder %q: %q, want the header named", bad, msg)
		}
	}
	e.wantCursor("h", strings.Repeat("x", api.MaxDesktopHolderChars), 200, "")
}
