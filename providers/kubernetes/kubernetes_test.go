package kubernetes

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/conformance/providertest"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/internal/token"
	"github.com/berthdev/berth/providers"
)

func TestMain(m *testing.M) {
	// client-go keeps the HTTP/2 connections of the transports it caches
	// per configuration for the life of the process (TestCluster only).
	testkit.VerifyTestMain(m, goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"))
}

func testSpec() providers.Spec {
	return providers.Spec{
		ComputerID: "abc123", SessionID: "s_abc123", AttemptID: "a_x1", Deployment: "d_dep",
		AgentID: "agent-1", Image: providers.ImageHeadless, TokenHash: strings.Repeat("0f", 32),
		Env: map[string]string{"HTTPS_PROXY": "http://c:p@egress:3128"}, Lease: 300 * time.Second,
	}
}

func newTest(t *testing.T, o Options) (*Kubernetes, *fakeCluster) {
	t.Helper()
	f := newFakeCluster(t)
	o.Client = f.cs
	o.PollInterval = 5 * time.Millisecond
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	k, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return k, f
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// TestPodHardening checks every field that makes a pod as closed as a
// Docker computer.
func TestPodHardening(t *testing.T) {
	k, _ := newTest(t, Options{Namespace: "comp", MemoryMB: 1024, CPUs: 1.5, RuntimeClass: "gvisor", PullSecret: "regcred", HeadlessImage: "reg.example/berth/headless:1"})
	pod := k.Pod(testSpec())
	if pod.Name != "berth-c-abc123" || pod.Namespace != "comp" {
		t.Errorf("name %s/%s", pod.Namespace, pod.Name)
	}
	for key, want := range map[string]string{providers.LabelManaged: "true", providers.LabelComputer: "abc123", providers.LabelSession: "s_abc123",
		providers.LabelAttempt: "a_x1", providers.LabelDeployment: "d_dep", providers.LabelAgent: "agent-1"} {
		if pod.Labels[key] != want {
			t.Errorf("label %s = %q, want %q", key, pod.Labels[key], want)
		}
	}
	ps := pod.Spec
	if ps.ActiveDeadlineSeconds == nil || *ps.ActiveDeadlineSeconds != 300 {
		t.Errorf("activeDeadlineSeconds %v, want 300 (the lease)", ps.ActiveDeadlineSeconds)
	}
	if ps.RuntimeClassName == nil || *ps.RuntimeClassName != "gvisor" {
		t.Errorf("runtimeClassName %v", ps.RuntimeClassName)
	}
	if len(ps.ImagePullSecrets) != 1 || ps.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("imagePullSecrets %v", ps.ImagePullSecrets)
	}
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken must be false: a computer gets no cluster credentials")
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC || ps.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("host namespaces or restart policy: %+v", ps)
	}
	psc := ps.SecurityContext
	if psc == nil || *psc.RunAsUser != 1000 || *psc.RunAsGroup != 1000 || !*psc.RunAsNonRoot || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", psc)
	}
	if len(ps.Containers) != 1 {
		t.Fatalf("%d containers", len(ps.Containers))
	}
	c := ps.Containers[0]
	if c.Image != "reg.example/berth/headless:1" {
		t.Errorf("image %s", c.Image)
	}
	sc := c.SecurityContext
	if sc == nil || *sc.RunAsUser != 1000 || *sc.RunAsGroup != 1000 || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem ||
		*sc.AllowPrivilegeEscalation || *sc.Privileged || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
		len(sc.Capabilities.Add) != 0 || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context %+v", sc)
	}
	for _, list := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
		if m := list[corev1.ResourceMemory]; m.Value() != 1024<<20 {
			t.Errorf("memory %s, want 1024Mi", m.String())
		}
		if cpu := list[corev1.ResourceCPU]; cpu.MilliValue() != 1500 {
			t.Errorf("cpu %s, want 1500m", cpu.String())
		}
		if disk := list[corev1.ResourceEphemeralStorage]; disk.Value() != DefaultDiskMB<<20 {
			t.Errorf("ephemeral-storage %s, want %dMi", disk.String(), DefaultDiskMB)
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	for path, size := range map[string]string{"/tmp": "1Gi", "/dev/shm": "512Mi"} {
		v := vols[mounts[path]]
		if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.String() != size {
			t.Errorf("%s: volume %+v, want a memory emptyDir of %s", path, v, size)
		}
	}
	if v := vols[mounts[Home]]; v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumDefault ||
		v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Value() != DefaultDiskMB<<20 {
		t.Errorf("home: volume %+v, want a disk emptyDir of %dMi", v, DefaultDiskMB)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["BERTH_TOKEN_SHA256"] != strings.Repeat("0f", 32) || env["HTTPS_PROXY"] != "http://c:p@egress:3128" || env["HOME"] != Home {
		t.Errorf("env %v", env)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 7070 {
		t.Errorf("ports %v", c.Ports)
	}
}

// TestPodDiskLimit: COMPUTER_DISK_MB sets the pod's ephemeral-storage;
// 0 sets none.
func TestPodDiskLimit(t *testing.T) {
	for _, tc := range []struct {
		setting string
		want    int64 // bytes; 0 for no limit
	}{{"", DefaultDiskMB << 20}, {"512", 512 << 20}, {"0", 0}} {
		o, err := OptionsFromConfig(providers.Config{Getenv: func(k string) string {
			if k == SettingDiskMB {
				return tc.setting
			}
			return ""
		}})
		if err != nil {
			t.Fatalf("%s=%q: %v", SettingDiskMB, tc.setting, err)
		}
		o.Namespace = "comp"
		k, f := newTest(t, o)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		m, err := k.Create(ctx, testSpec())
		cancel()
		if err != nil {
			t.Fatalf("%s=%q: Create: %v", SettingDiskMB, tc.setting, err)
		}
		pod, err := f.cs.CoreV1().Pods("comp").Get(t.Context(), m.ID, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := pod.Spec.Containers[0]
		var home corev1.Volume
		for _, v := range pod.Spec.Volumes {
			if v.Name == "home" {
				home = v
			}
		}
		for what, q := range map[string]*resource.Quantity{
			"limit":   ptrTo(c.Resources.Limits[corev1.ResourceEphemeralStorage]),
			"request": ptrTo(c.Resources.Requests[corev1.ResourceEphemeralStorage]),
			"home":    home.EmptyDir.SizeLimit,
		} {
			got := int64(0)
			if q != nil {
				got = q.Value()
			}
			if got != tc.want {
				t.Errorf("%s=%q: %s %d, want %d", SettingDiskMB, tc.setting, what, got, tc.want)
			}
		}
		if err := k.Destroy(t.Context(), m.ID); err != nil {
			t.Error(err)
		}
	}
}

func ptrTo(q resource.Quantity) *resource.Quantity {
	if q.IsZero() {
		return nil
	}
	return &q
}

// TestPodLabelsKeepKubernetesRules keeps an agent id Kubernetes refuses as
// a label value in the annotation only.
func TestPodLabelsKeepKubernetesRules(t *testing.T) {
	k, _ := newTest(t, Options{})
	s := testSpec()
	s.AgentID = "ends-with-dash-"
	pod := k.Pod(s)
	if _, ok := pod.Labels[providers.LabelAgent]; ok {
		t.Errorf("invalid label value kept: %v", pod.Labels)
	}
	if pod.Annotations[providers.LabelAgent] != s.AgentID {
		t.Errorf("annotations %v", pod.Annotations)
	}
	if got := Name("C_Upper_ID"); got != "berth-c-c-upper-id" {
		t.Errorf("Name = %s", got)
	}
}

// TestNetworkPolicy checks that a computer may reach only the egress
// proxy and be reached only by the supervisor.
func TestNetworkPolicy(t *testing.T) {
	k, _ := newTest(t, Options{Namespace: "comp", EgressSelector: "app=berth-egress", EgressNamespace: "berth-system", EgressPort: 3128,
		SupervisorSelector: "app=berth-supervisor", SupervisorNamespace: "berth-system", SupervisorCIDR: "10.9.0.0/16"})
	np := k.NetworkPolicy(testSpec())
	if np.Name != "berth-c-abc123" || np.Spec.PodSelector.MatchLabels[providers.LabelComputer] != "abc123" || len(np.Spec.PodSelector.MatchLabels) != 1 {
		t.Errorf("selector %+v", np.Spec.PodSelector)
	}
	if len(np.Spec.PolicyTypes) != 2 {
		t.Errorf("policy types %v, want Ingress and Egress", np.Spec.PolicyTypes)
	}
	if len(np.Spec.Egress) != 1 || len(np.Spec.Egress[0].To) != 1 || len(np.Spec.Egress[0].Ports) != 1 {
		t.Fatalf("egress %+v, want one rule to the proxy", np.Spec.Egress)
	}
	to := np.Spec.Egress[0].To[0]
	if to.PodSelector.MatchLabels["app"] != "berth-egress" || to.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "berth-system" || to.IPBlock != nil {
		t.Errorf("egress peer %+v", to)
	}
	if p := np.Spec.Egress[0].Ports[0]; p.Port.IntValue() != 3128 || *p.Protocol != corev1.ProtocolTCP {
		t.Errorf("egress port %+v", p)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 2 || np.Spec.Ingress[0].Ports[0].Port.IntValue() != 7070 {
		t.Fatalf("ingress %+v", np.Spec.Ingress)
	}
	if f := np.Spec.Ingress[0].From; f[0].PodSelector.MatchLabels["app"] != "berth-supervisor" || f[1].IPBlock.CIDR != "10.9.0.0/16" {
		t.Errorf("ingress peers %+v", f)
	}

	// With no egress proxy configured the computer gets no egress at all.
	k2, _ := newTest(t, Options{})
	np2 := k2.NetworkPolicy(testSpec())
	if np2.Spec.Egress == nil || len(np2.Spec.Egress) != 0 || len(np2.Spec.PolicyTypes) != 2 {
		t.Errorf("no proxy: egress %+v types %v, want an empty list (deny all)", np2.Spec.Egress, np2.Spec.PolicyTypes)
	}
}

// TestCreateMakesPolicyFirst checks that the pod never exists without its
// policy, and Destroy removes both.
func TestCreateMakesPolicyFirst(t *testing.T) {
	k, f := newTest(t, Options{Namespace: "comp"})
	ctx := t.Context()
	var order []string
	f.cs.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		order = append(order, a.GetResource().Resource)
		return false, nil, nil
	})
	m, err := k.Create(ctx, testSpec())
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != "networkpolicies" || order[1] != "pods" {
		t.Errorf("create order %v, want the policy before the pod", order)
	}
	if m.ID != "berth-c-abc123" || m.Labels[providers.LabelAttempt] != "a_x1" || m.Labels[providers.LabelAgent] != "agent-1" {
		t.Errorf("machine %+v", m)
	}
	if _, err := f.cs.NetworkingV1().NetworkPolicies("comp").Get(ctx, m.ID, metav1.GetOptions{}); err != nil {
		t.Errorf("policy: %v", err)
	}
	ms, err := k.List(ctx)
	if err != nil || len(ms) != 1 || ms[0].ID != m.ID {
		t.Errorf("List = %v, %v", ms, err)
	}
	if err := k.Destroy(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cs.NetworkingV1().NetworkPolicies("comp").Get(ctx, m.ID, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("policy after destroy: %v", err)
	}
	if err := k.Destroy(ctx, m.ID); err != nil {
		t.Errorf("destroy of a gone machine: %v", err)
	}
	// A policy left without its pod is listed, so reconciliation removes it.
	if _, err := f.cs.NetworkingV1().NetworkPolicies("comp").Create(ctx, k.NetworkPolicy(testSpec()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ms, _ := k.List(ctx); len(ms) != 1 || ms[0].Labels[providers.LabelAttempt] != "a_x1" {
		t.Errorf("orphan policy not listed: %v", ms)
	}
}

// TestErrors maps the API server's answers.
func TestErrors(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"401", apierrors.NewUnauthorized("Unauthorized"), providers.ErrBadCredentials},
		{"403", apierrors.NewForbidden(gr, "x", errors.New("RBAC: not allowed")), providers.ErrBadCredentials},
		{"quota", apierrors.NewForbidden(gr, "x", errors.New("exceeded quota: compute, requested: memory=2Gi")), providers.ErrCapacity},
		{"429", apierrors.NewTooManyRequests("slow down", 1), providers.ErrCapacity},
		{"503", apierrors.NewServiceUnavailable("etcd"), providers.ErrUnavailable},
		{"500", apierrors.NewInternalError(errors.New("boom")), providers.ErrUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k, f := newTest(t, Options{})
			f.nextCreate = []error{c.err}
			_, err := k.Create(t.Context(), testSpec())
			if !errors.Is(err, c.want) {
				t.Errorf("Create = %v, want %v", err, c.want)
			}
		})
	}
	k, f := newTest(t, Options{})
	f.badImage = DefaultHeadlessImage
	if _, err := k.Create(t.Context(), testSpec()); !errors.Is(err, providers.ErrBadImage) {
		t.Errorf("Create with an image that cannot be pulled = %v, want ErrBadImage", err)
	}
	// A definite failure leaves nothing behind: the supervisor relies on it.
	if ms, err := k.List(t.Context()); err != nil || len(ms) != 0 {
		t.Errorf("after a missing image: %v %v, want no pod and no policy left", ms, err)
	}
	f.badImage = ""
	f.nextCreate = []error{apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", errors.New("exceeded quota: compute"))}
	if _, err := k.Create(t.Context(), testSpec()); !errors.Is(err, providers.ErrCapacity) {
		t.Errorf("quota: %v", err)
	}
	if ms, err := k.List(t.Context()); err != nil || len(ms) != 0 {
		t.Errorf("after a refused pod: %v %v, want its policy removed", ms, err)
	}
	// A pod the API server turns down is a definite 422 with its reason,
	// and its policy is removed too.
	f.nextCreate = []error{apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "x", field.ErrorList{field.Invalid(field.NewPath("spec", "runtimeClassName"), "Bad_Name", "a lowercase RFC 1123 subdomain")})}
	_, err := k.Create(t.Context(), testSpec())
	var re *providers.RefusedError
	if !errors.As(err, &re) || re.Status != 422 || !strings.Contains(re.Message, "runtimeClassName") {
		t.Errorf("invalid pod: %v, want a 422 refusal naming the field", err)
	}
	if ms, err := k.List(t.Context()); err != nil || len(ms) != 0 {
		t.Errorf("after an invalid pod: %v %v, want its policy removed", ms, err)
	}
	f.Refuse = true
	if _, err := k.List(t.Context()); !errors.Is(err, providers.ErrBadCredentials) {
		t.Errorf("List with a refused token = %v", err)
	}
}

// TestReachSetting checks KUBERNETES_REACH and that the port-forward
// reach needs a cluster configuration.
func TestReachSetting(t *testing.T) {
	f, _ := providers.Lookup(ID)
	if _, err := f(providers.Config{Getenv: func(k string) string {
		return map[string]string{SettingReach: "tunnel", SettingAPIURL: "https://127.0.0.1:1"}[k]
	}}); err == nil || !strings.Contains(err.Error(), SettingReach) {
		t.Errorf("a bad reach: %v, want an error naming %s", err, SettingReach)
	}
	if _, err := NewPortForwarding(Options{Client: newFakeCluster(t).cs}); !errors.Is(err, errNoRESTConfig) {
		t.Errorf("port-forward without a cluster configuration: %v", err)
	}
	pf, err := NewPortForwarding(Options{APIURL: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := pf.Transport(providers.Machine{ID: "p"}, nil), pf.Transport(providers.Machine{ID: "p"}, nil); a != b {
		t.Errorf("a pod's transport is not kept between calls")
	}
	pf.Close()
}

// TestSettings checks the settings' errors name the setting.
func TestSettings(t *testing.T) {
	get := func(m map[string]string) providers.Config {
		return providers.Config{Getenv: func(k string) string { return m[k] }}
	}
	for name, v := range map[string]string{SettingMemoryMB: "lots", SettingCPUs: "-1", SettingEgressPort: "70000", SettingDiskMB: "-5"} {
		if _, err := OptionsFromConfig(get(map[string]string{name: v})); err == nil || !contains(err.Error(), name) {
			t.Errorf("%s=%s: %v, want an error naming it", name, v, err)
		}
	}
	if _, err := New(Options{Client: newFakeCluster(t).cs, Namespace: "Bad_NS"}); err == nil || !contains(err.Error(), SettingNamespace) {
		t.Errorf("bad namespace: %v", err)
	}
	if _, err := New(Options{APIURL: "ftp://x"}); err == nil || !contains(err.Error(), SettingAPIURL) {
		t.Errorf("bad API URL: %v", err)
	}
	o, err := OptionsFromConfig(get(nil))
	if err != nil || o.MemoryMB != 2048 || o.CPUs != 1 || o.Namespace != "berth" {
		t.Errorf("defaults %+v %v", o, err)
	}
	if d := (*Kubernetes)(nil).Describe(); len(d.Settings) == 0 || d.Summary == "" {
		t.Errorf("Describe %+v", d)
	}
}

func contains(s, sub string) bool { return sub != "" && strings.Contains(s, sub) }

// TestConformance runs the providers' conformance suite against the fake
// cluster.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		ID: ID,
		New: func(t providertest.T, log *slog.Logger) providertest.Target {
			f := newFakeCluster(t.(*testing.T))
			k, err := New(Options{Client: f.cs, Namespace: "berth", PollInterval: 5 * time.Millisecond, Logger: log})
			if err != nil {
				t.Fatalf("%v", err)
			}
			return providertest.Target{Provider: k, Faults: f, Exists: f.exists}
		},
	})
}

// TestCluster runs the suite against a real cluster: make test-k8s starts
// one and sets BERTH_K8S_API_URL, BERTH_K8S_TOKEN, BERTH_K8S_CA_FILE,
// BERTH_K8S_NAMESPACE and BERTH_K8S_IMAGE.
func TestCluster(t *testing.T) {
	url := os.Getenv("BERTH_K8S_API_URL")
	if url == "" {
		t.Skip("no cluster: run `make test-k8s`, which builds and starts one")
	}
	o := Options{APIURL: url, Token: os.Getenv("BERTH_K8S_TOKEN"), CAFile: os.Getenv("BERTH_K8S_CA_FILE"),
		Namespace: os.Getenv("BERTH_K8S_NAMESPACE"), HeadlessImage: os.Getenv("BERTH_K8S_IMAGE"), MemoryMB: 256, CPUs: 0.5, DiskMB: 512}
	check, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	exists := func(ctx context.Context, label, value string) (bool, error) {
		pods, err := check.c.CoreV1().Pods(o.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && (p.Labels[label] == value || p.Annotations[label] == value) {
				return true, nil
			}
		}
		return false, nil
	}
	t.Run("Hardening", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		s := testSpec()
		s.ComputerID = "hardening" + time.Now().Format("150405")
		m, err := check.Create(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		defer check.Destroy(context.WithoutCancel(ctx), m.ID)
		pod, err := check.c.CoreV1().Pods(o.Namespace).Get(ctx, m.ID, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sc := pod.Spec.Containers[0].SecurityContext
		if !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || sc.Capabilities.Drop[0] != "ALL" || *sc.RunAsUser != 1000 {
			t.Errorf("the cluster stored a different security context: %+v", sc)
		}
		// The API server kept the disk limit, and the kubelet admitted the
		// pod (it runs) with it.
		if q := pod.Spec.Containers[0].Resources.Limits[corev1.ResourceEphemeralStorage]; q.Value() != 512<<20 {
			t.Errorf("the cluster stored an ephemeral-storage limit of %s, want 512Mi", q.String())
		}
		if pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds != 300 {
			t.Errorf("activeDeadlineSeconds %v", pod.Spec.ActiveDeadlineSeconds)
		}
		var np *networkingv1.NetworkPolicy
		if np, err = check.c.NetworkingV1().NetworkPolicies(o.Namespace).Get(ctx, m.ID, metav1.GetOptions{}); err != nil || len(np.Spec.PolicyTypes) != 2 {
			t.Errorf("network policy %v %v", np, err)
		}
		t.Logf("pod %s running at %s", m.ID, m.Endpoint)
	})
	t.Run("PortForward", func(t *testing.T) {
		// computerd reached through the API server, as from outside the
		// cluster: a command's output and the user it runs as.
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		pf, err := NewPortForwarding(o)
		if err != nil {
			t.Fatal(err)
		}
		defer pf.Close()
		tok := "port-forward-test-token"
		s := testSpec()
		s.ComputerID = "portfwd" + time.Now().Format("150405")
		s.TokenHash = token.Hash(tok)
		m, err := pf.Create(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		defer pf.Destroy(context.WithoutCancel(ctx), m.ID)
		c := computerd.NewClient("http://"+m.ID, tok, computerd.WithHTTPClient(&http.Client{Transport: pf.Transport(m, nil)}))
		var res computerd.ExecResult
		testkit.PollContext(ctx, time.Minute, func() bool {
			res, err = c.Exec(ctx, computerd.ExecRequest{Command: "id -u; cat /proc/self/status | grep CapEff", TimeoutMs: 10000})
			return err == nil
		})
		if err != nil {
			t.Fatalf("exec through port-forward: %v", err)
		}
		if !strings.HasPrefix(res.Stdout, "1000\n") || !strings.Contains(res.Stdout, "CapEff:\t0000000000000000") {
			t.Errorf("exec through port-forward: %+v, want uid 1000 and no effective capabilities", res)
		}
	})
	// harness builds each scenario's provider with build, on o with the
	// scenario's logger.
	harness := func(build func(pt providertest.T, o Options) (providers.Provider, error)) providertest.Harness {
		return providertest.Harness{
			ID:           ID,
			ReadyTimeout: 2 * time.Minute,
			New: func(pt providertest.T, log *slog.Logger) providertest.Target {
				o := o
				o.Logger = log
				p, err := build(pt, o)
				if err != nil {
					pt.Fatalf("%v", err)
				}
				return providertest.Target{Provider: p, Exists: exists}
			},
		}
	}
	providertest.Run(t, harness(func(_ providertest.T, o Options) (providers.Provider, error) { return New(o) }))
	t.Run("PortForwardConformance", func(t *testing.T) {
		providertest.Run(t, harness(func(pt providertest.T, o Options) (providers.Provider, error) {
			pf, err := NewPortForwarding(o)
			if err == nil {
				pt.Cleanup(pf.Close)
			}
			return pf, err
		}))
	})
}
