// Package railway is the provider that runs each computer as one Railway
// service deployed from Berth's image, through Railway's public GraphQL
// API. The supervisor reaches computerd through the service's Railway
// domain, so commands are not bound by the minute that Railway's own exec
// allows.
package railway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/internal/httpapi"
)

// ID is the provider id the package registers under.
const ID = "railway"

// The connection credentials the provider takes.
const (
	CredToken         = "token"
	CredProjectID     = "projectId"
	CredEnvironmentID = "environmentId"
	// CredTokenKind is account (default), team or project: account and team
	// tokens are sent as a bearer token, project tokens in the
	// Project-Access-Token header.
	CredTokenKind = "tokenKind"
)

// Settings the provider reads, by name.
const (
	SettingAPIURL        = "RAILWAY_API_URL"
	SettingHeadlessImage = "RAILWAY_IMAGE_HEADLESS" // an image Railway can pull
	SettingDesktopImage  = "RAILWAY_IMAGE_DESKTOP"
)

// Defaults of the settings.
const (
	DefaultAPIURL        = "https://backboard.railway.com/graphql/v2"
	DefaultHeadlessImage = "ghcr.io/berthdev/headless:latest"
	DefaultDesktopImage  = "ghcr.io/berthdev/desktop:latest"
)

// VarLabels is the service variable that carries Berth's labels (JSON), so
// that List can tell Berth's services and their attempts apart.
const VarLabels = "BERTH_LABELS"

const (
	callTimeout  = 30 * time.Second
	readyTimeout = 5 * time.Minute
)

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		return New(Options{
			APIURL:        cfg.Get(SettingAPIURL, DefaultAPIURL),
			HeadlessImage: cfg.Get(SettingHeadlessImage, DefaultHeadlessImage),
			DesktopImage:  cfg.Get(SettingDesktopImage, DefaultDesktopImage),
			Logger:        cfg.Logger,
		})
	})
	providers.Describe(ID, (*Railway)(nil))
}

// Options configure a Railway provider.
type Options struct {
	APIURL        string
	HeadlessImage string
	DesktopImage  string
	// DomainScheme is how service domains are reached (default https).
	DomainScheme string
	Client       *http.Client
	// PollInterval is how often a deployment is polled (default 2 s).
	PollInterval time.Duration
	Logger       *slog.Logger
}

// Railway is the provider.
type Railway struct {
	o   Options
	hc  *http.Client
	log *slog.Logger
}

// New checks o and returns a provider.
func New(o Options) (*Railway, error) {
	api, err := httpapi.BaseURL(SettingAPIURL, cmp.Or(o.APIURL, DefaultAPIURL), DefaultAPIURL)
	if err != nil {
		return nil, err
	}
	o.APIURL = api
	if o.HeadlessImage == "" {
		o.HeadlessImage = DefaultHeadlessImage
	}
	if o.DesktopImage == "" {
		o.DesktopImage = DefaultDesktopImage
	}
	if o.DomainScheme == "" {
		o.DomainScheme = "https"
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Railway{o: o, hc: o.Client, log: o.Logger.With("component", "railway")}
	if r.hc == nil {
		r.hc = httpapi.NewHTTPClient()
	}
	return r, nil
}

// creds are a connection's checked credentials.
type creds struct{ token, project, env, kind string }

func credsOf(c map[string]string) (creds, error) {
	for k := range c {
		switch k {
		case CredToken, CredProjectID, CredEnvironmentID, CredTokenKind:
		default:
			return creds{}, fmt.Errorf("%q is not a railway credential: want %s, %s, %s and optional %s", k, CredToken, CredProjectID, CredEnvironmentID, CredTokenKind)
		}
	}
	cr := creds{token: c[CredToken], project: c[CredProjectID], env: c[CredEnvironmentID], kind: c[CredTokenKind]}
	if cr.kind == "" {
		cr.kind = "account"
	}
	switch {
	case strings.TrimSpace(cr.token) == "" || strings.ContainsAny(cr.token, " \t\r\n"):
		return cr, fmt.Errorf("%s is missing or has white space: want a Railway account, team or project token", CredToken)
	case cr.project == "":
		return cr, fmt.Errorf("%s is missing: want the id of the Railway project computers run in", CredProjectID)
	case cr.env == "":
		return cr, fmt.Errorf("%s is missing: want the id of the project's environment", CredEnvironmentID)
	case cr.kind != "account" && cr.kind != "team" && cr.kind != "project":
		return cr, fmt.Errorf("%s %q: want account, team or project", CredTokenKind, cr.kind)
	}
	return cr, nil
}

// CheckCredentials implements providers.CredentialChecker.
func (r *Railway) CheckCredentials(c map[string]string) error {
	_, err := credsOf(c)
	return err
}

type gqlError struct {
	Message    string `json:"message"`
	Extensions struct {
		Code string `json:"code"`
	} `json:"extensions"`
}

// gql sends one GraphQL request; out receives its data.
func (r *Railway) gql(ctx context.Context, cr creds, query string, vars map[string]any, out any) error {
	raw, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", r.o.APIURL, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if cr.kind == "project" {
		req.Header.Set("Project-Access-Token", cr.token)
	} else {
		req.Header.Set("Authorization", "Bearer "+cr.token)
	}
	op := opName(query)
	resp, err := r.hc.Do(req)
	if err != nil {
		return httpapi.Unreachable(op, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	var env struct {
		Data   json.RawMessage `json:"data"`
		Errors []gqlError      `json:"errors"`
	}
	json.Unmarshal(body, &env)
	if resp.StatusCode >= 300 {
		msg := fmt.Sprintf("%s: %d", op, resp.StatusCode)
		if len(env.Errors) > 0 {
			msg += " " + httpapi.Redact(env.Errors[0].Message, cr.token)
		}
		if resp.StatusCode == http.StatusNotFound {
			// One endpoint serves every call: a 404 is a wrong API URL,
			// never a machine that is gone.
			return fmt.Errorf("%w: %s (is %s Railway's GraphQL API?)", providers.ErrUnavailable, msg, SettingAPIURL)
		}
		return httpapi.StatusError(resp.StatusCode, msg)
	}
	if len(env.Errors) > 0 {
		e := env.Errors[0]
		msg := httpapi.Redact(e.Message, cr.token)
		low := strings.ToLower(msg)
		switch {
		case e.Extensions.Code == "GRAPHQL_VALIDATION_FAILED" || e.Extensions.Code == "GRAPHQL_PARSE_FAILED" || e.Extensions.Code == "BAD_USER_INPUT":
			// The schema refused the request, as a 400 would say.
			return httpapi.StatusError(http.StatusBadRequest, op+": "+msg)
		case strings.Contains(low, "not authorized") || strings.Contains(low, "unauthorized") || e.Extensions.Code == "UNAUTHENTICATED":
			return fmt.Errorf("%w: %s: %s", providers.ErrBadCredentials, op, msg)
		case strings.Contains(low, "not found"):
			return fmt.Errorf("%w: %s: %s", providers.ErrNotFound, op, msg)
		case strings.Contains(low, "rate limit") || strings.Contains(low, "limit reached") || strings.Contains(low, "usage limit"):
			return fmt.Errorf("%w: %s: %s", providers.ErrCapacity, op, msg)
		}
		return fmt.Errorf("%w: %s: %s", providers.ErrUnavailable, op, msg)
	}
	if out != nil {
		if err := json.Unmarshal(env.Data, out); err != nil {
			return fmt.Errorf("%w: %s: unreadable answer", providers.ErrUnavailable, op)
		}
	}
	return nil
}

func opName(q string) string {
	f := strings.Fields(q)
	if len(f) >= 2 {
		n, _, _ := strings.Cut(f[1], "(")
		return n
	}
	return "graphql"
}

// The GraphQL documents the provider sends.
const (
	qServiceCreate = `mutation serviceCreate($input: ServiceCreateInput!) { serviceCreate(input: $input) { id name } }`
	qPolicy        = `mutation serviceInstanceUpdate($serviceId: String!, $environmentId: String, $input: ServiceInstanceUpdateInput!) { serviceInstanceUpdate(serviceId: $serviceId, environmentId: $environmentId, input: $input) }`
	qDeploy        = `mutation serviceInstanceDeploy($serviceId: String!, $environmentId: String!) { serviceInstanceDeploy(serviceId: $serviceId, environmentId: $environmentId) }`
	qDeployments   = `query deployments($input: DeploymentListInput!) { deployments(first: 1, input: $input) { edges { node { id status } } } }`
	qDomainCreate  = `mutation serviceDomainCreate($input: ServiceDomainCreateInput!) { serviceDomainCreate(input: $input) { id domain } }`
	qServiceDelete = `mutation serviceDelete($id: String!, $environmentId: String) { serviceDelete(id: $id, environmentId: $environmentId) }`
	qServices      = `query project($id: String!) { project(id: $id) { services { edges { node { id name serviceInstances { edges { node { environmentId domains { serviceDomains { domain } } } } } } } } } }`
	qVariables     = `query variables($projectId: String!, $environmentId: String!, $serviceId: String) { variables(projectId: $projectId, environmentId: $environmentId, serviceId: $serviceId) }`
)

// Name returns the service name of a computer.
func Name(computerID string) string { return "berth-c-" + strings.ToLower(computerID) }

// Create makes the service from the image with the computer's variables,
// deploys it, waits for the deployment, and gives it a domain on
// computerd's port.
func (r *Railway) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	cr, err := credsOf(spec.Credentials)
	if err != nil {
		return providers.Machine{}, fmt.Errorf("create computer %s: %w: %v", spec.ComputerID, providers.ErrBadCredentials, err)
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	image := r.o.HeadlessImage
	if spec.Image == providers.ImageDesktop {
		image = r.o.DesktopImage
	}
	labels, _ := json.Marshal(spec.Labels())
	vars := map[string]string{computerd.EnvTokenHash: spec.TokenHash, computerd.EnvComputerID: spec.ComputerID, VarLabels: string(labels)}
	for k, v := range providers.HostedEnv(spec.Env) {
		vars[k] = v
	}
	if at := spec.ExpiresAt(time.Now()); at != "" {
		// A Railway service has no lifetime: computerd ends the computer
		// itself a minute after the lease, and the restart policy set
		// below keeps it ended, should the supervisor not be there to
		// delete the service.
		vars[computerd.EnvExpiresAt] = at
	}
	name := Name(spec.ComputerID)
	var created struct {
		ServiceCreate struct{ ID, Name string } `json:"serviceCreate"`
	}
	err = r.gql(ctx, cr, qServiceCreate, map[string]any{"input": map[string]any{
		"projectId": cr.project, "environmentId": cr.env, "name": name,
		"source": map[string]any{"image": image}, "variables": vars,
	}}, &created)
	id := created.ServiceCreate.ID
	if errors.Is(err, providers.ErrNotFound) {
		// Railway answered, and has no such project or environment: the
		// connection's ids are wrong, and nothing was made.
		return providers.Machine{}, &providers.RefusedError{Status: http.StatusUnprocessableEntity, Code: httpapi.CodeRefused,
			Message: fmt.Sprintf("Railway has no project %q with environment %q for this token: check the connection's %s and %s (%v)",
				cr.project, cr.env, CredProjectID, CredEnvironmentID, err)}
	}
	if err != nil {
		if !errors.Is(err, providers.ErrUnavailable) {
			return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, err)
		}
		// The reply may be lost after Railway made the service: look for it
		// by its name before giving up.
		ms, lerr := r.services(ctx, cr)
		for _, s := range ms {
			if s.name == name {
				id = s.id
			}
		}
		if id == "" {
			if lerr != nil {
				err = errors.Join(err, lerr)
			}
			return providers.Machine{}, fmt.Errorf("create computer %s: %w", spec.ComputerID, err)
		}
		r.log.Warn("create reply lost; found the service by its name", "computer", spec.ComputerID, "service", id)
	}
	endpoint, err := r.finish(ctx, cr, id)
	if err != nil {
		if definite(err) {
			// The service will not serve: delete it, since the supervisor
			// takes a definite failure to mean nothing was left behind; if
			// that fails too, answer an outage, so that it searches for
			// the service by its labels instead.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
			defer cancel()
			if derr := r.Destroy(providers.WithCredentials(dctx, spec.Credentials), id); derr != nil {
				err = fmt.Errorf("%w: %v; deleting its service failed too: %v", providers.ErrUnavailable, err, derr)
			}
		}
		var re *providers.RefusedError
		if errors.As(err, &re) {
			re.Message = fmt.Sprintf("create computer %s from image %s: %s", spec.ComputerID, image, re.Message)
			return providers.Machine{}, re
		}
		return providers.Machine{}, fmt.Errorf("create computer %s: image %s: %w", spec.ComputerID, image, err)
	}
	r.log.Info("computer created", "computer", spec.ComputerID, "service", id)
	return providers.Machine{ID: id, Endpoint: endpoint, Labels: spec.Labels()}, nil
}

// finish sets the service's restart policy, deploys it, waits for the
// deployment and gives it a domain on computerd's port, returning the
// endpoint.
func (r *Railway) finish(ctx context.Context, cr creds, id string) (string, error) {
	if err := r.gql(ctx, cr, qPolicy, map[string]any{"serviceId": id, "environmentId": cr.env,
		"input": map[string]any{"restartPolicyType": "NEVER"}}, nil); err != nil {
		return "", fmt.Errorf("restart policy: %w", err)
	}
	if err := r.gql(ctx, cr, qDeploy, map[string]any{"serviceId": id, "environmentId": cr.env}, nil); err != nil {
		return "", fmt.Errorf("deploy: %w", err)
	}
	if err := r.waitDeployed(ctx, cr, id); err != nil {
		return "", err
	}
	var dom struct {
		ServiceDomainCreate struct{ ID, Domain string } `json:"serviceDomainCreate"`
	}
	if err := r.gql(ctx, cr, qDomainCreate, map[string]any{"input": map[string]any{"serviceId": id, "environmentId": cr.env, "targetPort": computerd.Port}}, &dom); err != nil {
		return "", fmt.Errorf("domain: %w", err)
	}
	return r.o.DomainScheme + "://" + dom.ServiceDomainCreate.Domain, nil
}

// definite reports whether err says for sure that a call was refused or
// failed, rather than that Railway could not be reached.
func definite(err error) bool {
	return errors.Is(err, providers.ErrRefused) || errors.Is(err, providers.ErrBadCredentials) ||
		errors.Is(err, providers.ErrBadImage) || errors.Is(err, providers.ErrCapacity)
}

// waitDeployed polls the service's latest deployment until it succeeds.
func (r *Railway) waitDeployed(ctx context.Context, cr creds, id string) error {
	for {
		var got struct {
			Deployments struct {
				Edges []struct {
					Node struct{ ID, Status string } `json:"node"`
				} `json:"edges"`
			} `json:"deployments"`
		}
		if err := r.gql(ctx, cr, qDeployments, map[string]any{"input": map[string]any{"serviceId": id, "environmentId": cr.env}}, &got); err != nil {
			return fmt.Errorf("deployment: %w", err)
		}
		status := ""
		if len(got.Deployments.Edges) > 0 {
			status = got.Deployments.Edges[0].Node.Status
		}
		switch status {
		case "SUCCESS":
			return nil
		case "FAILED", "CRASHED":
			// The deployment ended for sure. Railway says why only in its
			// logs, so this is not taken for a missing image.
			return &providers.RefusedError{Status: http.StatusBadGateway, Code: httpapi.CodeRefused,
				Message: fmt.Sprintf("Railway's deployment %s: the image did not pull or did not start; its deployment logs at Railway say why", status)}
		case "REMOVED":
			return fmt.Errorf("deployment %s: %w", status, providers.ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deployment still %q: %w", status, providers.ErrUnavailable)
		case <-time.After(r.o.PollInterval):
		}
	}
}

// Destroy deletes the service; a service already gone counts as deleted.
func (r *Railway) Destroy(ctx context.Context, machineID string) error {
	cr, err := credsOf(providers.CredentialsFrom(ctx))
	if err != nil {
		return fmt.Errorf("destroy %s: %w: %v", machineID, providers.ErrBadCredentials, err)
	}
	err = r.gql(ctx, cr, qServiceDelete, map[string]any{"id": machineID, "environmentId": cr.env}, nil)
	if err != nil && !errors.Is(err, providers.ErrNotFound) {
		return fmt.Errorf("destroy %s: %w", machineID, err)
	}
	r.log.Info("computer destroyed", "service", machineID)
	return nil
}

type service struct{ id, name, domain string }

func (r *Railway) services(ctx context.Context, cr creds) ([]service, error) {
	var got struct {
		Project struct {
			Services struct {
				Edges []struct {
					Node struct {
						ID               string `json:"id"`
						Name             string `json:"name"`
						ServiceInstances struct {
							Edges []struct {
								Node struct {
									EnvironmentID string `json:"environmentId"`
									Domains       struct {
										ServiceDomains []struct{ Domain string } `json:"serviceDomains"`
									} `json:"domains"`
								} `json:"node"`
							} `json:"edges"`
						} `json:"serviceInstances"`
					} `json:"node"`
				} `json:"edges"`
			} `json:"services"`
		} `json:"project"`
	}
	if err := r.gql(ctx, cr, qServices, map[string]any{"id": cr.project}, &got); err != nil {
		return nil, err
	}
	var out []service
	for _, e := range got.Project.Services.Edges {
		s := service{id: e.Node.ID, name: e.Node.Name}
		for _, in := range e.Node.ServiceInstances.Edges {
			if in.Node.EnvironmentID == cr.env && len(in.Node.Domains.ServiceDomains) > 0 {
				s.domain = in.Node.Domains.ServiceDomains[0].Domain
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// List returns the project's services named as Berth's computers, with
// their labels read from VarLabels.
func (r *Railway) List(ctx context.Context) ([]providers.Machine, error) {
	cr, err := credsOf(providers.CredentialsFrom(ctx))
	if err != nil {
		return nil, fmt.Errorf("list: %w: %v", providers.ErrBadCredentials, err)
	}
	ss, err := r.services(ctx, cr)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	var out []providers.Machine
	for _, s := range ss {
		if !strings.HasPrefix(s.name, "berth-c-") {
			continue
		}
		var vars map[string]string
		var got struct {
			Variables map[string]string `json:"variables"`
		}
		if err := r.gql(ctx, cr, qVariables, map[string]any{"projectId": cr.project, "environmentId": cr.env, "serviceId": s.id}, &got); err != nil {
			return nil, fmt.Errorf("list: variables of %s: %w", s.id, err)
		}
		vars = got.Variables
		m := providers.Machine{ID: s.id}
		if json.Unmarshal([]byte(vars[VarLabels]), &m.Labels) != nil || m.Labels[providers.LabelManaged] != "true" {
			continue
		}
		if s.domain != "" {
			m.Endpoint = r.o.DomainScheme + "://" + s.domain
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Describe implements providers.Describer.
func (*Railway) Describe() providers.Description {
	return providers.Description{
		Summary: "one Railway service per computer, deployed from Berth's image, reached through its Railway domain",
		Settings: []providers.Setting{
			{Name: SettingAPIURL, Default: DefaultAPIURL, Help: "Railway's GraphQL API"},
			{Name: SettingHeadlessImage, Default: DefaultHeadlessImage, Help: "the headless image Railway pulls"},
			{Name: SettingDesktopImage, Default: DefaultDesktopImage, Help: "the desktop image Railway pulls"},
		},
		Credentials: []providers.Setting{
			{Name: CredToken, Required: true, Secret: true, Help: "a Railway account, team or project token"},
			{Name: CredProjectID, Required: true, Help: "the project computers run in"},
			{Name: CredEnvironmentID, Required: true, Help: "the project's environment"},
			{Name: CredTokenKind, Default: "account", Help: "account, team or project (project tokens go in the Project-Access-Token header)"},
		},
	}
}

var (
	_ providers.Provider          = (*Railway)(nil)
	_ providers.Lister            = (*Railway)(nil)
	_ providers.CredentialChecker = (*Railway)(nil)
	_ providers.Describer         = (*Railway)(nil)
)
