package console

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

func secureEqual(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// computersData is the Computers page.
type computersData struct {
	Rows      template.HTML // the table's rows: computerRowsHTML
	Agents    []string      // agents without a connection, for the connect form
	Providers []providerForm
	Default   string
	Limits    limits
	Form      map[string]string // the values of a refused form, shown again
	Workspace string            // the session's workspace ("" for all)
	Links     bool              // live-view and terminal links can be made
}

type limits struct {
	MinLease, MaxLease, DefaultLease, DefaultDaily, MaxDaily int
}

var theLimits = limits{supervisor.MinLeaseSeconds, supervisor.MaxLeaseSeconds, supervisor.DefaultLeaseSeconds,
	supervisor.DefaultDailySeconds, supervisor.MaxDailySeconds}

// providerForm is one provider's part of the connect form: the
// credentials its Describer names.
type providerForm struct {
	ID          string
	Summary     string
	Credentials []providers.Setting
}

func (c *Console) providerForms() []providerForm {
	var out []providerForm
	for _, id := range c.providerIDs() {
		f := providerForm{ID: id}
		if d, ok := c.o.Providers[id].(providers.Describer); ok {
			desc := d.Describe()
			f.Summary, f.Credentials = desc.Summary, desc.Credentials
		}
		out = append(out, f)
	}
	return out
}

func (c *Console) computersData(q request) (*computersData, error) {
	rows, err := c.svc.Overview(q.ctx(), q.workspace())
	if err != nil {
		return nil, err
	}
	d := &computersData{Providers: c.providerForms(), Default: c.o.DefaultProvider, Limits: theLimits, Workspace: q.workspace(), Links: c.o.Link != nil}
	lines := make([]computerRow, 0, len(rows))
	for _, r := range rows {
		if r.Connection == nil {
			d.Agents = append(d.Agents, r.Agent.ID)
		}
		lines = append(lines, c.row(r))
	}
	d.Rows = computerRowsHTML(lines, q.s.csrf, d.Links)
	return d, nil
}

// computerRow is one line of the computers table, its text made here.
type computerRow struct {
	ID, Name, Workspace string
	Connected           bool
	Conn, ConnSub       string
	Session             bool
	SessionID           string
	State, StateText    string
	SessSub             string
	Machine             string
	// Running with a Desktop: the row offers live view; Running, a
	// terminal; Persistent, the agent's checkpoints.
	Running, Desktop, Persistent bool
}

func (c *Console) row(o supervisor.AgentOverview) computerRow {
	r := computerRow{ID: o.Agent.ID, Name: o.Agent.Name, Workspace: o.Agent.Workspace, Machine: o.MachineID}
	if k := o.Connection; k != nil {
		r.Connected = true
		r.Conn = k.Provider + ", " + k.Image
		r.ConnSub = "lease " + duration(k.LeaseSeconds) + ", budget " + duration(k.DailySeconds) + "/day"
		r.Persistent = api.KeepsHome(k.Persistence)
	}
	if x := o.Session; x != nil {
		r.Session, r.SessionID = true, x.ID
		r.State, r.StateText = x.State, stateText[x.State]
		r.SessSub = left(x.RemainingSeconds) + " left · started " + c.when(x.StartedAt)
		r.Running, r.Desktop = x.State == store.StateRunning, x.Image == providers.ImageDesktop
	}
	return r
}

func (c *Console) computers(w http.ResponseWriter, q request) {
	c.computersWith(w, q, http.StatusOK, "", nil)
}

// computersWith draws the Computers page, with msg as the error of a
// refused form whose values form holds.
func (c *Console) computersWith(w http.ResponseWriter, q request, status int, msg string, form map[string]string) {
	d, err := c.computersData(q)
	if err != nil {
		c.log.Error("computers", "err", err)
		status, msg = http.StatusInternalServerError, "The computers could not be listed: "+supervisor.AsError(err).Message
		d = &computersData{Limits: theLimits}
	}
	d.Form = form
	v := q.view("Computers", "computers", d)
	v.Error = msg
	c.render(w, q.Request, status, "computers", v)
}

// liveComputers answers the computers table alone, for the page's script;
// 304 when it has not changed.
func (c *Console) liveComputers(w http.ResponseWriter, q request) {
	d, err := c.computersData(q)
	if err != nil {
		http.Error(w, "the computers could not be listed", http.StatusInternalServerError)
		return
	}
	c.liveRows(w, q, "computers", "computerRows", d)
}

// liveRows answers the rows block of page's template drawn with data, for
// the page's script; 304 when they have not changed (ETag).
func (c *Console) liveRows(w http.ResponseWriter, q request, page, block string, data any) {
	var buf bytes.Buffer
	if err := c.tmpl[page].ExecuteTemplate(&buf, block, q.view("", "", data)); err != nil {
		c.log.Error("render live rows", "page", page, "err", err)
		http.Error(w, "the table could not be drawn", http.StatusInternalServerError)
		return
	}
	if etag(w, q.Request, buf.Bytes()) {
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

func (c *Console) createAgent(w http.ResponseWriter, q request) {
	f := q.PostForm
	req := supervisor.CreateAgentRequest{ID: strings.TrimSpace(f.Get("id")), Name: f.Get("name"), Workspace: strings.TrimSpace(f.Get("workspace"))}
	if ws := q.workspace(); ws != "" {
		if req.Workspace == "" {
			req.Workspace = ws
		}
		if req.Workspace != ws {
			c.fail(w, q, q.s.p.Forbidden(fmt.Sprintf("creating an agent in workspace %q", req.Workspace)), c.againComputers(f))
			return
		}
	}
	a, err := c.svc.CreateAgent(q.ctx(), req)
	if err != nil {
		c.fail(w, q, err, c.againComputers(f))
		return
	}
	c.svc.Record(q.ctx(), "agent.create", a.Workspace, a.ID, "")
	c.done(w, q, "/computers", fmt.Sprintf("Agent %s created in workspace %s.", a.ID, a.Workspace))
}

func (c *Console) againComputers(f map[string][]string) func(http.ResponseWriter, request, int, string) {
	return func(w http.ResponseWriter, q request, status int, msg string) {
		form := map[string]string{}
		for k, v := range f {
			// Credentials are never sent back to the browser.
			if len(v) > 0 && k != "csrf" && !strings.HasPrefix(k, "cred.") {
				form[k] = v[0]
			}
		}
		c.computersWith(w, q, status, msg, form)
	}
}

// intField reads a whole number field; empty is nil.
func intField(f map[string][]string, name string) (*int, error) {
	s := ""
	if v := f[name]; len(v) > 0 {
		s = strings.TrimSpace(v[0])
	}
	if s == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return nil, &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest, Message: fmt.Sprintf("%s: %q is not a whole number of seconds", name, s)}
	}
	return &n, nil
}

func (c *Console) connect(w http.ResponseWriter, q request) {
	f := q.PostForm
	again := c.againComputers(f)
	req := supervisor.ConnectRequest{Agent: f.Get("agent"), Provider: f.Get("provider"), Image: f.Get("image")}
	var err error
	if req.LeaseSeconds, err = intField(f, "leaseSeconds"); err != nil {
		c.fail(w, q, err, again)
		return
	}
	if req.DailySeconds, err = intField(f, "dailySeconds"); err != nil {
		c.fail(w, q, err, again)
		return
	}
	if req.Persistence = f.Get("persistence"); api.KeepsHome(req.Persistence) {
		if req.IdleSleepSeconds, err = intField(f, "idleSleepSeconds"); err != nil {
			c.fail(w, q, err, again)
			return
		}
		if req.MaxCheckpoints, err = intField(f, "maxCheckpoints"); err != nil {
			c.fail(w, q, err, again)
			return
		}
	}
	if req.Agent == "" {
		c.fail(w, q, &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest, Message: "agent: choose an agent"}, again)
		return
	}
	if err := c.inWorkspace(q, req.Agent); err != nil {
		c.fail(w, q, err, again)
		return
	}
	// Only the chosen provider's credential fields count.
	prefix := "cred." + req.Provider + "."
	for k, v := range f {
		if name, ok := strings.CutPrefix(k, prefix); ok && len(v) > 0 && v[0] != "" {
			if req.Credentials == nil {
				req.Credentials = map[string]string{}
			}
			req.Credentials[name] = v[0]
		}
	}
	conn, err := c.svc.Connect(q.ctx(), req)
	if err != nil {
		c.fail(w, q, err, again)
		return
	}
	c.svc.RecordAgent(q.ctx(), "computer.connect", req.Agent)
	c.done(w, q, "/computers", fmt.Sprintf("Agent %s connected to %s (lease %d s, daily budget %d s). Credentials are checked at the first start.",
		conn.AgentID, conn.Provider, conn.LeaseSeconds, conn.DailySeconds))
}

// agentData is an agent's page.
type agentData struct {
	Agent string
	Links bool
	// Persistent is set for a connection that keeps its home; Checkpoints
	// are then its checkpoints, oldest first.
	Persistent  bool
	Checkpoints []api.Archive
	Status      supervisor.StatusView
	HasConn     bool
	Overview    supervisor.AgentOverview
	Limits      limits
}

func (c *Console) agent(w http.ResponseWriter, q request) {
	c.agentWith(w, q, http.StatusOK, "")
}

func (c *Console) agentWith(w http.ResponseWriter, q request, status int, msg string) {
	agent := q.PathValue("agent")
	if err := c.inWorkspace(q, agent); err != nil {
		e := supervisor.AsError(err)
		v := q.view("Not found", "computers", nil)
		v.Error = e.Message
		if msg != "" {
			v.Error = msg // the refused action's answer
		}
		c.render(w, q.Request, e.Status, "error", v)
		return
	}
	d := &agentData{Agent: agent, Limits: theLimits, Links: c.o.Link != nil}
	st, err := c.svc.Status(q.ctx(), agent)
	if err == nil {
		d.Status, d.HasConn = st, true
		if api.KeepsHome(st.Connection.Persistence) {
			d.Persistent = true
			if d.Checkpoints, err = c.svc.Checkpoints(q.ctx(), agent); err != nil && msg == "" {
				e := supervisor.AsError(err)
				status, msg = e.Status, "The checkpoints could not be listed: "+e.Message
			}
		}
	} else if e := supervisor.AsError(err); e.Status != http.StatusNotFound {
		status, msg = e.Status, e.Message
	}
	v := q.view("Agent "+agent, "computers", d)
	v.Error = msg
	c.render(w, q.Request, status, "agent", v)
}

// agentAction runs fn on the path's agent after the workspace check, then
// goes back to the agent's page with done, or shows the Service's answer.
func (c *Console) agentAction(w http.ResponseWriter, q request, fn func(agent string) (string, error)) {
	agent := q.PathValue("agent")
	again := func(w http.ResponseWriter, q request, status int, msg string) { c.agentWith(w, q, status, msg) }
	if err := c.inWorkspace(q, agent); err != nil {
		c.fail(w, q, err, again)
		return
	}
	msg, err := fn(agent)
	if err != nil {
		c.fail(w, q, err, again)
		return
	}
	to := "/agents/" + agent
	if q.PostForm.Get("back") == "computers" {
		to = "/computers"
	}
	c.done(w, q, to, msg)
}

func (c *Console) limits(w http.ResponseWriter, q request) {
	c.agentAction(w, q, func(agent string) (string, error) {
		lease, err := intField(q.PostForm, "leaseSeconds")
		if err != nil {
			return "", err
		}
		daily, err := intField(q.PostForm, "dailySeconds")
		if err != nil {
			return "", err
		}
		if lease == nil || daily == nil {
			return "", &supervisor.Error{Status: http.StatusBadRequest, Code: supervisor.CodeBadRequest, Message: "leaseSeconds and dailySeconds: both required"}
		}
		conn, err := c.svc.SetLimits(q.ctx(), agent, *lease, *daily)
		if err != nil {
			return "", err
		}
		c.svc.RecordAgent(q.ctx(), "computer.limits", agent)
		return fmt.Sprintf("Lease %d s and daily budget %d s saved; they apply from the next start.", conn.LeaseSeconds, conn.DailySeconds), nil
	})
}

func (c *Console) start(w http.ResponseWriter, q request) {
	c.agentAction(w, q, func(agent string) (string, error) {
		s, err := c.svc.StartFrom(q.ctx(), agent, q.PostForm.Get("checkpoint"))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("Session %s of %s: %s, %s left.", s.ID, agent, stateText[s.State], left(s.RemainingSeconds)), nil
	})
}

func (c *Console) stop(w http.ResponseWriter, q request) {
	c.agentAction(w, q, func(agent string) (string, error) {
		s, err := c.svc.Stop(q.ctx(), agent)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("Session %s of %s: %s.", s.ID, agent, stateText[s.State]), nil
	})
}

func (c *Console) disconnect(w http.ResponseWriter, q request) {
	c.agentAction(w, q, func(agent string) (string, error) {
		if err := c.svc.Disconnect(q.ctx(), agent); err != nil {
			return "", err
		}
		c.svc.RecordAgent(q.ctx(), "computer.disconnect", agent)
		return fmt.Sprintf("Agent %s disconnected: its session was stopped, then its connection and credentials removed.", agent), nil
	})
}

// openLink sends the browser to a new live-view or terminal link of the
// agent's running computer.
func (c *Console) openLink(w http.ResponseWriter, q request) {
	agent := q.PathValue("agent")
	again := func(w http.ResponseWriter, q request, status int, msg string) { c.agentWith(w, q, status, msg) }
	if c.o.Link == nil {
		c.fail(w, q, &supervisor.Error{Status: http.StatusServiceUnavailable, Code: supervisor.CodeUnavailable, Message: "links are not available on this supervisor"}, again)
		return
	}
	if err := c.inWorkspace(q, agent); err != nil {
		c.fail(w, q, err, again)
		return
	}
	url, err := c.o.Link(q.Request, agent, q.PostForm.Get("kind"))
	if err != nil {
		c.fail(w, q, err, again)
		return
	}
	c.svc.RecordAgent(q.ctx(), "computer.link", agent)
	http.Redirect(w, q.Request, url, http.StatusSeeOther)
}

func (c *Console) checkpoint(w http.ResponseWriter, q request) {
	c.agentAction(w, q, func(agent string) (string, error) {
		a, err := c.svc.Checkpoint(q.ctx(), agent, api.CheckpointRequest{Name: strings.TrimSpace(q.PostForm.Get("name"))})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("Checkpoint %s of %s saved (%d bytes).", a.Name, agent, a.Bytes), nil
	})
}

func (c *Console) deleteCheckpoint(w http.ResponseWriter, q request) {
	c.agentAction(w, q, func(agent string) (string, error) {
		name := q.PathValue("name")
		if err := c.svc.DeleteCheckpoint(q.ctx(), agent, name); err != nil {
			return "", err
		}
		return fmt.Sprintf("Checkpoint %s of %s deleted.", name, agent), nil
	})
}
