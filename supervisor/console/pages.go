package console

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/supervisor"
	"github.com/berthdev/berth/supervisor/store"
)

// The session page.

func (c *Console) session(w http.ResponseWriter, q request) {
	d, err := c.svc.SessionCalls(q.ctx(), q.PathValue("id"), q.workspace())
	if err != nil {
		e := supervisor.AsError(err)
		if e.Status >= 500 {
			c.log.Error("session", "err", err)
		}
		v := q.view("Session", "computers", nil)
		v.Error = e.Message
		c.render(w, q.Request, e.Status, "error", v)
		return
	}
	c.render(w, q.Request, http.StatusOK, "session", q.view("Session "+d.Session.ID, "computers", d))
}

// The attention page.

func (c *Console) attention(w http.ResponseWriter, q request) {
	c.attentionWith(w, q, http.StatusOK, "")
}

func (c *Console) attentionWith(w http.ResponseWriter, q request, status int, msg string) {
	xs, err := c.svc.Attention(q.ctx(), q.workspace())
	if err != nil {
		c.log.Error("attention", "err", err)
		status, msg = http.StatusInternalServerError, "The sessions could not be listed."
	}
	v := q.view("Needs attention", "attention", xs)
	v.Error = msg
	c.render(w, q.Request, status, "attention", v)
}

// liveAttention answers the attention table's rows, for the page's
// script; 304 when they have not changed.
func (c *Console) liveAttention(w http.ResponseWriter, q request) {
	xs, err := c.svc.Attention(q.ctx(), q.workspace())
	if err != nil {
		http.Error(w, "the sessions could not be listed", http.StatusInternalServerError)
		return
	}
	c.liveRows(w, q, "attention", "attentionRows", xs)
}

// confirmPage is the confirmation step before "Confirm provider cleanup".
func (c *Console) confirmPage(w http.ResponseWriter, q request) {
	agent := q.PathValue("agent")
	if err := c.inWorkspace(q, agent); err != nil {
		c.fail(w, q, err, c.againAttention)
		return
	}
	xs, err := c.svc.Attention(q.ctx(), q.workspace())
	if err != nil {
		c.fail(w, q, err, c.againAttention)
		return
	}
	i := slices.IndexFunc(xs, func(x supervisor.AttentionView) bool { return x.Agent == agent })
	if i < 0 {
		c.againAttention(w, q, http.StatusConflict, fmt.Sprintf("Agent %s has no uncertain session or failed cleanup.", agent))
		return
	}
	c.render(w, q.Request, http.StatusOK, "confirm", q.view("Confirm provider cleanup", "attention", xs[i]))
}

func (c *Console) againAttention(w http.ResponseWriter, q request, status int, msg string) {
	c.attentionWith(w, q, status, msg)
}

func (c *Console) confirm(w http.ResponseWriter, q request) {
	agent := q.PathValue("agent")
	if err := c.inWorkspace(q, agent); err != nil {
		c.fail(w, q, err, c.againAttention)
		return
	}
	if q.PostForm.Get("removed") != "yes" {
		c.againAttention(w, q, http.StatusBadRequest,
			"Tick the box to say you removed any machine of this session at the provider. Nothing was changed.")
		return
	}
	yes := true
	s, err := c.svc.ConfirmCleanup(q.ctx(), agent, supervisor.ConfirmRequest{ProviderCleanupConfirmed: &yes})
	if err != nil {
		c.fail(w, q, err, c.againAttention)
		return
	}
	c.svc.RecordAgent(q.ctx(), "computer.confirm_cleanup", agent)
	c.done(w, q, "/attention", fmt.Sprintf("Cleanup of session %s (agent %s) confirmed: it is now %s.", s.ID, agent, stateText[s.State]))
}

// The usage page.

// usageDays is how many days the usage page shows.
const usageDays = 30

type usageSeries struct {
	By    string
	Keys  []string
	Days  []usageDay
	Total []int64 // by key
	Chart chart
}

type usageDay struct {
	Day     string
	Seconds []int64 // by key, as Keys
	Total   int64
}

type usageData struct {
	Series  []usageSeries
	Budgets []budgetRow
	Note    string
}

type budgetRow struct {
	Agent  string
	Budget store.Budget
}

// series reads usage by day for the last usageDays days.
func (c *Console) series(q request, by string) (usageSeries, error) {
	now := c.clk.Now().UTC()
	first := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC).AddDate(0, 0, -(usageDays - 1))
	s := usageSeries{By: by}
	index := map[string]int{}
	for i := range usageDays {
		from := first.AddDate(0, 0, i)
		u, err := c.svc.Usage(q.ctx(), by, from, from.AddDate(0, 0, 1))
		if err != nil {
			return s, err
		}
		d := usageDay{Day: from.Format("2006-01-02")}
		for _, r := range u.Rows {
			if ws := q.workspace(); ws != "" && r.Key != ws {
				continue
			}
			if _, ok := index[r.Key]; !ok {
				index[r.Key] = len(s.Keys)
				s.Keys = append(s.Keys, r.Key)
			}
			for len(d.Seconds) < len(s.Keys) {
				d.Seconds = append(d.Seconds, 0)
			}
			d.Seconds[index[r.Key]] += r.Seconds
			d.Total += r.Seconds
		}
		s.Days = append(s.Days, d)
	}
	s.Total = make([]int64, len(s.Keys))
	for i := range s.Days {
		for len(s.Days[i].Seconds) < len(s.Keys) {
			s.Days[i].Seconds = append(s.Days[i].Seconds, 0)
		}
		for k, v := range s.Days[i].Seconds {
			s.Total[k] += v
		}
	}
	s.Chart = drawChart(s)
	return s, nil
}

func (c *Console) usageData(q request) (*usageData, error) {
	d := &usageData{}
	bys := []string{"provider", "workspace"}
	if q.workspace() != "" {
		bys = []string{"workspace"}
		d.Note = "A workspace key sees its own workspace's usage only."
	}
	for _, by := range bys {
		s, err := c.series(q, by)
		if err != nil {
			return nil, err
		}
		d.Series = append(d.Series, s)
	}
	rows, err := c.svc.Overview(q.ctx(), q.workspace())
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		if r.Connection == nil {
			continue
		}
		st, err := c.svc.Status(q.ctx(), r.Agent.ID)
		if err != nil {
			continue // disconnected meanwhile
		}
		d.Budgets = append(d.Budgets, budgetRow{Agent: r.Agent.ID, Budget: st.Budget})
	}
	return d, nil
}

func (c *Console) usage(w http.ResponseWriter, q request) {
	d, err := c.usageData(q)
	status, msg := http.StatusOK, ""
	if err != nil {
		c.log.Error("usage", "err", err)
		e := supervisor.AsError(err)
		status, msg, d = e.Status, "Usage could not be read: "+e.Message, &usageData{}
	}
	v := q.view("Usage", "usage", d)
	v.Error = msg
	c.render(w, q.Request, status, "usage", v)
}

// usageCSV answers the usage table as CSV: by, key, day, seconds.
func (c *Console) usageCSV(w http.ResponseWriter, q request) {
	d, err := c.usageData(q)
	if err != nil {
		http.Error(w, "usage could not be read", supervisor.AsError(err).Status)
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="berth-usage.csv"`)
	cw := csv.NewWriter(w)
	cw.Write([]string{"by", "key", "day", "seconds"})
	for _, s := range d.Series {
		for _, day := range s.Days {
			for i, k := range s.Keys {
				cw.Write([]string{s.By, k, day.Day, strconv.FormatInt(day.Seconds[i], 10)})
			}
		}
	}
	cw.Flush()
}

// The lenders page.

type lendersData struct {
	Lenders    []Lender
	Companions []supervisor.CompanionView
	Relay      bool
	Code       *supervisor.PairCode
}

func (c *Console) lenders(w http.ResponseWriter, q request) {
	c.lendersWith(w, q, http.StatusOK, "", nil)
}

func (c *Console) lendersWith(w http.ResponseWriter, q request, status int, msg string, code *supervisor.PairCode) {
	d := &lendersData{Relay: c.o.Lenders != nil, Code: code}
	if q.workspace() == "" {
		var online func(string) bool
		if c.o.Lenders != nil {
			ls, err := c.o.Lenders(q.ctx())
			if err != nil {
				c.log.Warn("lenders", "err", err)
				msg = "The relay's list of lent machines could not be read."
			}
			d.Lenders = ls
			up := map[string]bool{}
			for _, l := range ls {
				up[l.ID] = l.Online
			}
			online = func(id string) bool { return up[id] }
		}
		cs, err := c.svc.Companions(q.ctx(), online)
		if err != nil {
			c.log.Error("companions", "err", err)
			status, msg = http.StatusInternalServerError, "The paired lenders could not be listed."
		}
		d.Companions = cs
	}
	v := q.view("Lenders", "lenders", d)
	v.Error = msg
	c.render(w, q.Request, status, "lenders", v)
}

func (c *Console) pairCode(w http.ResponseWriter, q request) {
	name := q.PostForm.Get("name")
	code, err := c.svc.CreatePairCode(q.ctx(), supervisor.CreatePairCodeRequest{Name: name})
	if err != nil {
		c.fail(w, q, err, func(w http.ResponseWriter, q request, status int, msg string) { c.lendersWith(w, q, status, msg, nil) })
		return
	}
	c.svc.Record(q.ctx(), "pair_code.create", q.s.p.Workspace, "", name)
	// Shown once, on this answer only; never stored in the session.
	c.lendersWith(w, q, http.StatusCreated, "", &code)
}

func (c *Console) revoke(w http.ResponseWriter, q request) {
	id := q.PathValue("id")
	again := func(w http.ResponseWriter, q request, status int, msg string) { c.lendersWith(w, q, status, msg, nil) }
	if q.workspace() != "" {
		c.fail(w, q, q.s.p.Forbidden("revoking lender "+id), again)
		return
	}
	n, err := c.svc.RevokeCompanion(q.ctx(), id)
	if err != nil {
		c.fail(w, q, err, again)
		return
	}
	c.done(w, q, "/lenders", fmt.Sprintf("Lender %s revoked; %d sessions on its machine ended.", id, n))
}

// The providers page.

type providerInfo struct {
	ID       string
	Default  bool
	Summary  string
	Settings []settingInfo
	Creds    []providers.Setting
}

type settingInfo struct {
	providers.Setting
	Value string // "" when unset; "(set, hidden)" for secrets
}

func (c *Console) providersPage(w http.ResponseWriter, q request) {
	var out []providerInfo
	for _, id := range c.providerIDs() {
		p := providerInfo{ID: id, Default: id == c.o.DefaultProvider}
		if d, ok := c.o.Providers[id].(providers.Describer); ok {
			desc := d.Describe()
			p.Summary, p.Creds = desc.Summary, desc.Credentials
			for _, s := range desc.Settings {
				si := settingInfo{Setting: s}
				if c.o.Getenv != nil {
					if v := c.o.Getenv(s.Name); v != "" {
						si.Value = v
						if s.Secret {
							si.Value = "(set, hidden)"
						}
					}
				}
				p.Settings = append(p.Settings, si)
			}
		}
		out = append(out, p)
	}
	c.render(w, q.Request, http.StatusOK, "providers", q.view("Providers", "providers", out))
}
