package helm

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	k8syaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/kubernetes"
)

// HelmVersion is the helm release build.sh builds; keep the two in step.
const HelmVersion = "v3.22.0"

// chartDir is the chart, relative to this package.
const chartDir = "berth"

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBinary returns the helm CLI: $BERTH_HELM, else the cached build,
// else one built now by build.sh (about a minute, then cached).
func helmBinary(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		if p := os.Getenv("BERTH_HELM"); p != "" {
			helmPath = p
			return
		}
		cache := os.Getenv("BERTH_HELM_CACHE")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				helmErr = err
				return
			}
			cache = filepath.Join(home, ".cache", "berth-helm")
		}
		if p := filepath.Join(cache, HelmVersion, "helm"); executable(p) {
			helmPath = p
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, "./build.sh")
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			helmErr = fmt.Errorf("packaging/helm/build.sh: %v\n%s", err, errb.String())
			return
		}
		helmPath = strings.TrimSpace(out.String())
	})
	if helmErr != nil {
		t.Fatalf("helm: %v", helmErr)
	}
	if !executable(helmPath) {
		t.Fatalf("helm: %s is not an executable file (BERTH_HELM, or build it with packaging/helm/build.sh)", helmPath)
	}
	return helmPath
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// helm runs the helm CLI in an empty HOME of its own and returns its
// output, or the error with its stderr.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx := testkit.ContextTimeout(t, 2*time.Minute)
	cmd := exec.CommandContext(ctx, helmBinary(t), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+home+"/cache",
		"HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

// object is one rendered Kubernetes object.
type object map[string]any

func (o object) kind() string { return str(o, "kind") }
func (o object) name() string { return str(o, "metadata", "name") }
func (o object) ns() string   { return str(o, "metadata", "namespace") }

// get walks maps by key and lists by index (an int).
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				if o, isObj := v.(object); isObj {
					m, ok = map[string]any(o), true
				}
			}
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := get(v, path...).(string)
	return s
}

func list(v any, path ...any) []any {
	l, _ := get(v, path...).([]any)
	return l
}

// rendered is the output of helm template, parsed.
type rendered struct {
	text    string
	objects []object
}

func (r rendered) find(kind, name string) object {
	for _, o := range r.objects {
		if o.kind() == kind && o.name() == name {
			return o
		}
	}
	return nil
}

func (r rendered) must(t *testing.T, kind, name string) object {
	t.Helper()
	o := r.find(kind, name)
	if o == nil {
		var have []string
		for _, o := range r.objects {
			have = append(have, o.kind()+"/"+o.name())
		}
		t.Fatalf("no %s %s rendered; have %v", kind, name, have)
	}
	return o
}

func (r rendered) ofKind(kind string) []object {
	var out []object
	for _, o := range r.objects {
		if o.kind() == kind {
			out = append(out, o)
		}
	}
	return out
}

const (
	release   = "demo"
	releaseNS = "berth"
	fullname  = "demo-berth"
	dbURL     = "postgres://berth:db-password-not-in-manifests@db.example.com:5432/berth?sslmode=require"
)

// render runs helm template for release demo in namespace berth with the
// given --set values.
func render(t *testing.T, set ...string) rendered {
	t.Helper()
	r, err := tryRender(t, set...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tryRender(t *testing.T, set ...string) (rendered, error) {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", releaseNS}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		return rendered{}, err
	}
	r := rendered{text: out}
	dec := k8syaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		var o map[string]any
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("parse helm template's output: %v\n%s", err, out)
		}
		if len(o) > 0 {
			r.objects = append(r.objects, object(o))
		}
	}
	return r, nil
}

// TestLint runs helm lint --strict with each supported store.
func TestLint(t *testing.T) {
	for name, set := range map[string][]string{
		"url":            {"postgresql.url=" + dbURL},
		"bundled":        {"postgresql.bundled.enabled=true"},
		"existingSecret": {"secrets.existingSecret=berth-secrets"},
		"portForward":    {"postgresql.url=" + dbURL, "computers.reach=port-forward", "relay.enabled=false", "turn.enabled=false"},
		"tls":            {"postgresql.url=" + dbURL, "turn.tlsSecret=turn-tls", "relay.tlsSecret=relay-tls"},
	} {
		args := []string{"lint", "--strict", chartDir}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if out, err := helm(t, args...); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("%s: helm lint: %s", name, out)
		}
	}
}

// TestDefaults checks the objects of an install with an external
// PostgreSQL: two supervisors, the provider turned on, least RBAC in the
// computers' namespace only, secrets referenced and never inlined, the
// relay, TURN and the NetworkPolicies.
func TestDefaults(t *testing.T) {
	const token = "operator-token-not-in-manifests"
	r := render(t, "postgresql.url="+dbURL, "secrets.supervisorToken="+token)

	// No secret value appears in any manifest: the Secret carries them
	// base64-encoded, and the pods reference it.
	for _, secret := range []string{token, "db-password-not-in-manifests"} {
		if strings.Contains(r.text, secret) {
			t.Errorf("the secret %q appears in the rendered manifests", secret)
		}
	}

	dep := r.must(t, "Deployment", fullname+"-supervisor")
	if got := get(dep, "spec", "replicas"); got != float64(2) && got != int64(2) {
		t.Errorf("supervisor replicas = %v, want 2", got)
	}
	pod := get(dep, "spec", "template")
	podLabels, _ := get(pod, "metadata", "labels").(map[string]any)
	c := container(t, pod, "supervisor")
	env := envOf(c)

	// The kubernetes provider is the default and is configured by the
	// settings the provider reads.
	wantEnv := map[string]string{
		"DEFAULT_PROVIDER":                    "kubernetes",
		"PROVIDERS":                           "kubernetes,local",
		kubernetes.SettingNamespace:           releaseNS,
		kubernetes.SettingReach:               kubernetes.ReachPodIP,
		kubernetes.SettingHeadlessImage:       "berth/headless:latest",
		kubernetes.SettingEgressPort:          "3128",
		kubernetes.SettingEgressNamespace:     releaseNS,
		kubernetes.SettingSupervisorNamespace: releaseNS,
		"EGRESS_LISTEN":                       "$(POD_IP):3128",
		"TURN_LISTEN":                         "$(POD_IP):3478",
		"RELAY_URL":                           "lookup",
	}
	for k, want := range wantEnv {
		if got, ok := env[k]; !ok || got.value != want {
			t.Errorf("supervisor env %s = %q, want %q", k, got.value, want)
		}
	}
	// The selectors the provider writes into each computer's
	// NetworkPolicy select exactly the supervisor pods.
	for _, k := range []string{kubernetes.SettingSupervisorSelector, kubernetes.SettingEgressSelector} {
		sel := env[k].value
		if sel == "" || !selects(sel, podLabels) {
			t.Errorf("%s=%q does not select the supervisor pods (labels %v)", k, sel, podLabels)
		}
	}
	// Secrets come from the Secret, by reference.
	secretName := fullname
	for _, k := range []string{"SUPERVISOR_TOKEN", "COMPUTER_TOKEN_SECRET", "BERTH_STORE", "TURN_SECRET", "RELAY_TOKEN"} {
		e, ok := env[k]
		if !ok || e.secret != secretName || e.value != "" {
			t.Errorf("supervisor env %s = %+v: want a reference to Secret %s", k, e, secretName)
		}
	}
	if args := strings.Join(strs(list(c, "args")), " "); !strings.Contains(args, "--store=$(BERTH_STORE)") {
		t.Errorf("supervisor args %q: want --store=$(BERTH_STORE)", args)
	}
	checkHardened(t, pod, "supervisor")
	if init := list(pod, "spec", "initContainers"); len(init) != 1 {
		t.Errorf("supervisor init containers: %d, want 1 (the sealing key's copy)", len(init))
	}

	// The generated Secret: tokens long enough, a 32-byte sealing key.
	sec := r.must(t, "Secret", secretName)
	data := map[string]string{}
	for k, v := range get(sec, "data").(map[string]any) {
		b, err := base64.StdEncoding.DecodeString(v.(string))
		if err != nil {
			t.Fatalf("Secret data %s: %v", k, err)
		}
		data[k] = string(b)
	}
	if data["supervisor-token"] != token || data["database-url"] != dbURL {
		t.Errorf("Secret: supervisor-token %q, database-url %q: want the given values", data["supervisor-token"], data["database-url"])
	}
	for _, k := range []string{"computer-token-secret", "turn-secret", "relay-token"} {
		if len(data[k]) < 16 {
			t.Errorf("Secret %s: %d characters, want at least 16", k, len(data[k]))
		}
	}
	if key, err := base64.StdEncoding.DecodeString(data["sealing-key"]); err != nil || len(key) != 32 {
		t.Errorf("Secret sealing-key: want a base64 32-byte key, got %d bytes (%v)", len(key), err)
	}
	if str(sec, "metadata", "annotations", "helm.sh/resource-policy") != "keep" {
		t.Errorf("Secret: want helm.sh/resource-policy keep by default (secrets.keep)")
	}

	// RBAC: one Role in the computers' namespace, exactly what the
	// provider calls, and nothing cluster-wide.
	if n := len(r.ofKind("ClusterRole")) + len(r.ofKind("ClusterRoleBinding")); n != 0 {
		t.Errorf("%d cluster-wide RBAC objects rendered, want none", n)
	}
	role := r.must(t, "Role", fullname+"-computers")
	checkRules(t, role, map[string][]string{
		"/pods":                             {"create", "delete", "get", "list"},
		"networking.k8s.io/networkpolicies": {"create", "delete", "list"},
	})
	rb := r.must(t, "RoleBinding", fullname+"-computers")
	if str(rb, "roleRef", "name") != role.name() || str(rb, "subjects", 0, "name") != str(pod, "spec", "serviceAccountName") ||
		str(rb, "subjects", 0, "namespace") != releaseNS {
		t.Errorf("RoleBinding %v does not bind the Role to the supervisors' ServiceAccount %s", get(rb, "subjects"), str(pod, "spec", "serviceAccountName"))
	}
	r.must(t, "ServiceAccount", str(pod, "spec", "serviceAccountName"))

	// The computers' NetworkPolicy: in from the supervisors to computerd
	// only, out to the supervisors' egress proxies only.
	np := r.must(t, "NetworkPolicy", fullname+"-computers")
	if str(np, "spec", "podSelector", "matchLabels", providers.LabelManaged) != "true" {
		t.Errorf("computers' NetworkPolicy selects %v, want %s=true", get(np, "spec", "podSelector"), providers.LabelManaged)
	}
	if got := strs(list(np, "spec", "policyTypes")); !slices.Equal(got, []string{"Ingress", "Egress"}) {
		t.Errorf("computers' NetworkPolicy policyTypes %v", got)
	}
	for dir, port := range map[string]float64{"ingress": 7070, "egress": 3128} {
		rules := list(np, "spec", dir)
		peer := "from"
		if dir == "egress" {
			peer = "to"
		}
		if len(rules) != 1 || len(list(rules[0], "ports")) != 1 || get(rules[0], "ports", 0, "port") != port {
			t.Fatalf("computers' NetworkPolicy %s: %v, want one rule on port %v", dir, rules, port)
		}
		sel, _ := get(rules[0], peer, 0, "podSelector", "matchLabels").(map[string]any)
		if len(sel) == 0 || !subset(sel, podLabels) || str(rules[0], peer, 0, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name") != releaseNS {
			t.Errorf("computers' NetworkPolicy %s peer %v: want the supervisor pods of namespace %s", dir, get(rules[0], peer), releaseNS)
		}
	}

	// TURN: UDP and TCP on one port, on the supervisor pods.
	turn := r.must(t, "Service", fullname+"-turn")
	var protos []string
	for _, p := range list(turn, "spec", "ports") {
		if get(p, "port") == float64(3478) {
			protos = append(protos, str(p, "protocol"))
		}
	}
	if slices.Sort(protos); !slices.Equal(protos, []string{"TCP", "UDP"}) {
		t.Errorf("TURN Service ports on 3478: %v, want TCP and UDP", protos)
	}
	if !subset(get(turn, "spec", "selector").(map[string]any), podLabels) {
		t.Errorf("TURN Service does not select the supervisor pods")
	}

	// The relay, its own Deployment with a public and an internal Service.
	relay := r.must(t, "Deployment", fullname+"-relay")
	rpod := get(relay, "spec", "template")
	rc := container(t, rpod, "relay")
	if cmd := strs(list(rc, "command")); !slices.Equal(cmd, []string{"/usr/bin/berth", "relay"}) {
		t.Errorf("relay command %v", cmd)
	}
	if e := envOf(rc)["RELAY_TOKEN"]; e.secret != secretName {
		t.Errorf("relay RELAY_TOKEN %+v: want a reference to Secret %s", e, secretName)
	}
	checkHardened(t, rpod, "relay")
	r.must(t, "Service", fullname+"-relay")
	if r.find("Service", fullname+"-relay-internal") != nil {
		t.Errorf("a Service in front of the relays' internal APIs: supervisors reach each relay pod by the address it reports")
	}
	if args := strs(list(rc, "args")); !slices.Contains(args, "--advertise=http://$(POD_IP):8081") {
		t.Errorf("relay args %v: want it to advertise its pod's internal API", args)
	}
	if f := fieldRefOf(rc, "POD_IP"); f != "status.podIP" {
		t.Errorf("relay POD_IP from %q: want the pod's IP from the downward API (status.podIP)", f)
	}
	r.must(t, "NetworkPolicy", fullname+"-relay")
	r.must(t, "Service", fullname+"-supervisor")
	if r.find("StatefulSet", fullname+"-postgresql") != nil {
		t.Errorf("bundled PostgreSQL rendered though postgresql.url is set")
	}
}

// TestPortForward: reaching computers through the API server adds
// pods/portforward create, and nothing else.
func TestPortForward(t *testing.T) {
	r := render(t, "postgresql.url="+dbURL, "computers.reach=port-forward")
	checkRules(t, r.must(t, "Role", fullname+"-computers"), map[string][]string{
		"/pods":                             {"create", "delete", "get", "list"},
		"/pods/portforward":                 {"create"},
		"networking.k8s.io/networkpolicies": {"create", "delete", "list"},
	})
}

// TestComputersNamespace: computers in a namespace of their own, made by
// the release; the Role and the floor policy go there, the binding names
// the supervisors' ServiceAccount in the release's namespace.
func TestComputersNamespace(t *testing.T) {
	r := render(t, "postgresql.url="+dbURL, "computers.namespace=berth-computers", "computers.createNamespace=true",
		"computers.apiServer.host=10.0.0.1", "computers.apiServer.port=6443")
	r.must(t, "Namespace", "berth-computers")
	for _, kind := range []string{"Role", "RoleBinding", "NetworkPolicy"} {
		if o := r.must(t, kind, fullname+"-computers"); o.ns() != "berth-computers" {
			t.Errorf("%s in namespace %q, want berth-computers", kind, o.ns())
		}
	}
	env := envOf(container(t, get(r.must(t, "Deployment", fullname+"-supervisor"), "spec", "template"), "supervisor"))
	if env[kubernetes.SettingNamespace].value != "berth-computers" || env[kubernetes.SettingSupervisorNamespace].value != releaseNS {
		t.Errorf("provider namespaces: computers %q, supervisors %q", env[kubernetes.SettingNamespace].value, env[kubernetes.SettingSupervisorNamespace].value)
	}
	if env["KUBERNETES_SERVICE_HOST"].value != "10.0.0.1" || env["KUBERNETES_SERVICE_PORT"].value != "6443" {
		t.Errorf("API server override: %+v %+v", env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"])
	}
}

// TestBundledPostgres: the StatefulSet, its Service, and a database URL
// made from a generated password, all through the Secret.
func TestBundledPostgres(t *testing.T) {
	r := render(t, "postgresql.bundled.enabled=true")
	ss := r.must(t, "StatefulSet", fullname+"-postgresql")
	pc := container(t, get(ss, "spec", "template"), "postgresql")
	if str(pc, "image") != "berth/postgres:15" {
		t.Errorf("PostgreSQL image %q, want berth/postgres:15", str(pc, "image"))
	}
	if e := envOf(pc)["POSTGRES_PASSWORD"]; e.secret != fullname || e.value != "" {
		t.Errorf("POSTGRES_PASSWORD %+v: want a reference to Secret %s", e, fullname)
	}
	r.must(t, "Service", fullname+"-postgresql")
	r.must(t, "NetworkPolicy", fullname+"-postgresql")
	sec := r.must(t, "Secret", fullname)
	pw, _ := base64.StdEncoding.DecodeString(str(sec, "data", "postgres-password"))
	url, _ := base64.StdEncoding.DecodeString(str(sec, "data", "database-url"))
	want := fmt.Sprintf("postgres://berth:%s@%s-postgresql:5432/berth?sslmode=disable", pw, fullname)
	if len(pw) < 16 || string(url) != want {
		t.Errorf("database-url %q with a %d-character password, want %q", url, len(pw), want)
	}
}

// TestExistingSecret: no Secret is made and every reference names the
// operator's.
func TestExistingSecret(t *testing.T) {
	r := render(t, "secrets.existingSecret=ops-berth")
	if n := len(r.ofKind("Secret")); n != 0 {
		t.Errorf("%d Secrets rendered with secrets.existingSecret set, want 0", n)
	}
	refs := 0
	for _, o := range r.objects {
		for _, c := range append(list(o, "spec", "template", "spec", "containers"), list(o, "spec", "template", "spec", "initContainers")...) {
			for name, e := range envOf(c) {
				if e.secret != "" {
					refs++
					if e.secret != "ops-berth" {
						t.Errorf("%s env %s names Secret %s, want ops-berth", o.name(), name, e.secret)
					}
				}
			}
		}
	}
	if refs < 6 {
		t.Errorf("%d secret references, want at least 6", refs)
	}
}

// TestRefusals: values that could not run are refused by name.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{nil, "no state store"},
		{[]string{"postgresql.url=" + dbURL, "postgresql.bundled.enabled=true"}, "exclusive"},
		{[]string{"postgresql.url=mysql://x"}, "postgresql.url"},
		{[]string{"postgresql.url=" + dbURL, "secrets.supervisorToken=short"}, "secrets.supervisorToken"},
		{[]string{"postgresql.url=" + dbURL, "computers.reach=ssh"}, "computers.reach"},
		{[]string{"postgresql.url=" + dbURL, "computers.apiServer.host=10.0.0.1"}, "computers.apiServer"},
		{[]string{"postgresql.url=" + dbURL, "computers.createNamespace=true"}, "computers.createNamespace"},
	} {
		_, err := tryRender(t, tc.set...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %v: %v, want an error naming %q", tc.set, err, tc.want)
		}
	}
}

type envVar struct {
	value  string
	secret string // the Secret a secretKeyRef names
}

func envOf(c any) map[string]envVar {
	out := map[string]envVar{}
	for _, e := range list(c, "env") {
		out[str(e, "name")] = envVar{value: str(e, "value"), secret: str(e, "valueFrom", "secretKeyRef", "name")}
	}
	return out
}

// fieldRefOf returns the downward-API field an env variable of container
// c is taken from, or "".
func fieldRefOf(c any, name string) string {
	for _, e := range list(c, "env") {
		if str(e, "name") == name {
			return str(e, "valueFrom", "fieldRef", "fieldPath")
		}
	}
	return ""
}

func container(t *testing.T, pod any, name string) any {
	t.Helper()
	for _, c := range list(pod, "spec", "containers") {
		if str(c, "name") == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return nil
}

// checkHardened: non-root pod, and every container with a read-only root,
// no privilege escalation and no capabilities.
func checkHardened(t *testing.T, pod any, what string) {
	t.Helper()
	if get(pod, "spec", "securityContext", "runAsNonRoot") != true {
		t.Errorf("%s pod: runAsNonRoot not set", what)
	}
	for _, c := range append(list(pod, "spec", "containers"), list(pod, "spec", "initContainers")...) {
		sc := get(c, "securityContext")
		if get(sc, "readOnlyRootFilesystem") != true || get(sc, "allowPrivilegeEscalation") != false ||
			!slices.Equal(strs(list(sc, "capabilities", "drop")), []string{"ALL"}) {
			t.Errorf("%s container %s: securityContext %v, want a read-only root, no escalation, all capabilities dropped", what, str(c, "name"), sc)
		}
	}
}

// checkRules compares a Role's rules, as "group/resource" -> verbs.
func checkRules(t *testing.T, role object, want map[string][]string) {
	t.Helper()
	got := map[string][]string{}
	for _, rule := range list(role, "rules") {
		for _, g := range strs(list(rule, "apiGroups")) {
			for _, res := range strs(list(rule, "resources")) {
				v := strs(list(rule, "verbs"))
				got[g+"/"+res] = append(got[g+"/"+res], v...)
			}
		}
	}
	for k := range got {
		slices.Sort(got[k])
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Role %s rules %v, want exactly %v", role.name(), got, want)
	}
}

func strs(l []any) []string {
	out := make([]string, 0, len(l))
	for _, v := range l {
		s, _ := v.(string)
		out = append(out, s)
	}
	return out
}

// selects reports whether the label selector "k=v,k=v" matches labels.
func selects(sel string, labels map[string]any) bool {
	for _, kv := range strings.Split(sel, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || labels[k] != v {
			return false
		}
	}
	return true
}

func subset(sel, labels map[string]any) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}
