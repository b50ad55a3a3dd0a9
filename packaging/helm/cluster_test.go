package helm

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/berthdev/berth/api"
	"github.com/berthdev/berth/internal/testkit"
	"github.com/berthdev/berth/providers"
)

const (
	clusterRelease = "berth-ci"
	clusterNS      = "berth-helm"
	computersNS    = "berth-helm-computers"
)

// TestClusterInstall installs the chart into the single-node cluster of
// make test-k8s (packaging/k8s-test/run.sh, which sets BERTH_K8S_* and
// imports berth/supervisor into the node), waits for its two supervisors
// and its two relays, then through the supervisors' REST API starts a
// computer with the kubernetes provider (connected through one supervisor,
// started and run through the other) and runs a command in its pod; two
// lenders on this machine link to the two relay pods and run a computer
// each, started through one supervisor and used through the other; then it
// uninstalls the release: nothing of it may be left. Two supervisors, two
// relays and a cluster serve one set of users.
func TestClusterInstall(t *testing.T) {
	apiURL := os.Getenv("BERTH_K8S_API_URL")
	if apiURL == "" {
		t.Skip("no cluster: run `make test-k8s`, which builds and starts one and installs the chart")
	}
	kubeconfig, pgURL, image := os.Getenv("BERTH_K8S_KUBECONFIG"), os.Getenv("BERTH_K8S_PG_URL"), os.Getenv("BERTH_K8S_IMAGE")
	if kubeconfig == "" || pgURL == "" || image == "" {
		t.Fatal("BERTH_K8S_KUBECONFIG, BERTH_K8S_PG_URL and BERTH_K8S_IMAGE must be set with BERTH_K8S_API_URL (run.sh sets them)")
	}
	u, err := url.Parse(apiURL)
	if err != nil {
		t.Fatalf("BERTH_K8S_API_URL: %v", err)
	}
	apiHost, apiPort, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatalf("BERTH_K8S_API_URL %q: want https://HOST:PORT", apiURL)
	}
	rc := &rest.Config{Host: apiURL, BearerToken: os.Getenv("BERTH_K8S_TOKEN"), Timeout: 30 * time.Second}
	rc.TLSClientConfig.CAFile = os.Getenv("BERTH_K8S_CA_FILE")
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.ContextTimeout(t, 5*time.Minute)
	begin := time.Now()
	step := func(what string) { t.Logf("%6.1f s  %s", time.Since(begin).Seconds(), what) }

	// Whatever happens, leave the cluster as it was, and on a failure say
	// what the pods were doing.
	t.Cleanup(func() {
		if t.Failed() {
			dumpPods(t, kc, clusterNS, computersNS)
		}
		helm(t, "uninstall", clusterRelease, "--namespace", clusterNS, "--kubeconfig", kubeconfig, "--ignore-not-found")
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		kc.CoreV1().Namespaces().Delete(cctx, clusterNS, metav1.DeleteOptions{})
		kc.CoreV1().Namespaces().Delete(cctx, computersNS, metav1.DeleteOptions{})
	})

	// The relays reach the supervisors at this address, on the node
	// (supervisorsFront, in place of the Service this cluster cannot route).
	front, err := net.Listen("tcp", net.JoinHostPort(apiHost, "0"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := helm(t, "install", clusterRelease, chartDir, "--kubeconfig", kubeconfig,
		"--namespace", clusterNS, "--create-namespace",
		"--set", "postgresql.url="+pgURL,
		"--set", "computers.namespace="+computersNS, "--set", "computers.createNamespace=true",
		// No kube-proxy in this cluster: the supervisors reach the API
		// server at the node's address instead of its Service.
		"--set", "computers.apiServer.host="+apiHost, "--set", "computers.apiServer.port="+apiPort,
		"--set", "computers.headlessImage="+image,
		"--set", "computers.memoryMB=256", "--set", "computers.cpus=0.5", "--set", "computers.diskMB=512",
		"--set", "secrets.keep=false",
		"--set", "turn.service.type=ClusterIP", "--set", "relay.service.type=ClusterIP",
		"--set", "relay.replicas=2", "--set", "relay.supervisorURL=http://"+front.Addr().String(),
		"--set", "supervisor.resources.requests.cpu=10m", "--set", "relay.resources.requests.cpu=10m")
	if err != nil {
		t.Fatal(err)
	}
	step("helm install")
	if !strings.Contains(out, "STATUS: deployed") {
		t.Fatalf("helm install: %s", out)
	}

	// Two supervisors and the relay, Ready.
	sup := "app.kubernetes.io/instance=" + clusterRelease + ",app.kubernetes.io/component=supervisor"
	var supervisors []corev1.Pod
	testkit.EventuallyContext(t, ctx, "two supervisor pods Ready", func() bool {
		supervisors = readyPods(ctx, kc, clusterNS, sup)
		return len(supervisors) == 2
	})
	step("2 supervisors Ready")
	supervisorsFront(ctx, t, front, supervisors)
	var relays []corev1.Pod
	testkit.EventuallyContext(t, ctx, "two relay pods Ready", func() bool {
		relays = readyPods(ctx, kc, clusterNS, "app.kubernetes.io/instance="+clusterRelease+",app.kubernetes.io/component=relay")
		return len(relays) == 2
	})
	step("2 relays Ready")

	// The operator token, as NOTES.txt tells an operator to read it.
	sec, err := kc.CoreV1().Secrets(clusterNS).Get(ctx, clusterRelease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := string(sec.Data["supervisor-token"])
	a, err := api.New("http://"+net.JoinHostPort(supervisors[0].Status.PodIP, "8080"), token)
	if err != nil {
		t.Fatal(err)
	}
	b, err := api.New("http://"+net.JoinHostPort(supervisors[1].Status.PodIP, "8080"), token)
	if err != nil {
		t.Fatal(err)
	}

	// Connected through one supervisor, started and used through the
	// other: both serve one set of users from the shared store.
	agent := "helm-" + strings.ToLower(rand.Text()[:8])
	if _, err := a.CreateAgent(ctx, api.CreateAgentRequest{ID: agent, Name: "helm install test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Connect(ctx, api.ConnectRequest{Agent: agent, Provider: "kubernetes", LeaseSeconds: 300, DailySeconds: 600}); err != nil {
		t.Fatal(err)
	}
	s, err := b.Start(ctx, agent)
	if err != nil {
		t.Fatalf("start through the second supervisor: %v", err)
	}
	step("computer started: " + s.State)
	if s.State != "running" || s.Provider != "kubernetes" {
		t.Fatalf("session %+v: want running on kubernetes", s)
	}
	pods, err := kc.CoreV1().Pods(computersNS).List(ctx, metav1.ListOptions{LabelSelector: providers.LabelAgent + "=" + agent})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
		t.Fatalf("the computer's pod in %s: %v %v", computersNS, podNames(pods), err)
	}
	pod := pods.Items[0]
	if _, err := kc.NetworkingV1().NetworkPolicies(computersNS).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the computer's own NetworkPolicy: %v", err)
	}
	for _, c := range []*api.Client{b, a} {
		res, err := c.Exec(ctx, agent, api.ExecRequest{Command: "echo hello from $(hostname)", TimeoutSeconds: 30})
		if err != nil {
			t.Fatalf("exec through %s: %v", c.BaseURL(), err)
		}
		if want := "hello from " + pod.Name + "\n"; res.ExitCode != 0 || res.Stdout != want {
			t.Fatalf("exec through %s: exit %d, stdout %q, stderr %q: want %q", c.BaseURL(), res.ExitCode, res.Stdout, res.Stderr, want)
		}
	}
	step("exec in pod " + pod.Name + " through both supervisors")
	if _, err := a.Stop(ctx, agent); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyContext(t, ctx, "the computer's pod deleted", func() bool {
		_, err := kc.CoreV1().Pods(computersNS).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	step("computer stopped, pod gone")

	// Two lenders on this machine, each linked to one relay pod: the
	// supervisors find each through the relay that reports it.
	lendThroughRelays(ctx, t, a, b, token, relays)
	step("a computer on each of two lenders, through the two relays")

	if _, err := helm(t, "uninstall", clusterRelease, "--namespace", clusterNS, "--kubeconfig", kubeconfig, "--wait", "--timeout", "2m"); err != nil {
		t.Fatal(err)
	}
	// Nothing left: no pods, Secrets (but the namespace's own service
	// account token, none here), Services or policies of the release, and
	// the computers' namespace gone.
	testkit.EventuallyContext(t, ctx, "nothing of the release left", func() bool {
		left := leftovers(ctx, kc)
		if len(left) > 0 {
			t.Logf("left: %v", left)
		}
		return len(left) == 0
	})
	step("uninstalled, nothing left")
}

// readyPods lists the pods of selector that run and are Ready.
func readyPods(ctx context.Context, kc kubernetes.Interface, ns, selector string) []corev1.Pod {
	pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				out = append(out, p)
			}
		}
	}
	return out
}

// leftovers names what is still in the cluster of the release.
func leftovers(ctx context.Context, kc kubernetes.Interface) []string {
	var left []string
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + clusterRelease}
	if pods, err := kc.CoreV1().Pods(clusterNS).List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) > 0 {
		left = append(left, fmt.Sprintf("pods in %s: %v %v", clusterNS, podNames(pods), err))
	}
	if l, err := kc.CoreV1().Secrets(clusterNS).List(ctx, sel); err != nil || len(l.Items) > 0 {
		left = append(left, fmt.Sprintf("secrets: %d %v", len(l.Items), err))
	}
	if l, err := kc.CoreV1().Services(clusterNS).List(ctx, sel); err != nil || len(l.Items) > 0 {
		left = append(left, fmt.Sprintf("services: %d %v", len(l.Items), err))
	}
	if l, err := kc.CoreV1().ServiceAccounts(clusterNS).List(ctx, sel); err != nil || len(l.Items) > 0 {
		left = append(left, fmt.Sprintf("service accounts: %d %v", len(l.Items), err))
	}
	if l, err := kc.NetworkingV1().NetworkPolicies(clusterNS).List(ctx, sel); err != nil || len(l.Items) > 0 {
		left = append(left, fmt.Sprintf("network policies: %d %v", len(l.Items), err))
	}
	if l, err := kc.AppsV1().ReplicaSets(clusterNS).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) > 0 {
		left = append(left, fmt.Sprintf("replica sets: %d %v", len(l.Items), err))
	}
	if _, err := kc.CoreV1().Namespaces().Get(ctx, computersNS, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		left = append(left, fmt.Sprintf("namespace %s (%v)", computersNS, err))
	}
	return left
}

func podNames(pods *corev1.PodList) []string {
	if pods == nil {
		return nil
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, p.Name+"="+string(p.Status.Phase))
	}
	return out
}

// dumpPods logs each pod's state and the last lines of its logs.
func dumpPods(t *testing.T, kc kubernetes.Interface, namespaces ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ns := range namespaces {
		pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("pods of %s: %v", ns, err)
			continue
		}
		for _, p := range pods.Items {
			t.Logf("pod %s/%s: %s %s conditions %v containers %v", ns, p.Name, p.Status.Phase, p.Status.Message, p.Status.Conditions, p.Status.ContainerStatuses)
			for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
				tail := int64(30)
				b, err := kc.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: &tail}).DoRaw(ctx)
				t.Logf("logs of %s/%s: %s %v", p.Name, c.Name, b, err)
			}
		}
		if evs, err := kc.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, e := range evs.Items {
				t.Logf("event %s %s: %s %s", ns, e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
}
