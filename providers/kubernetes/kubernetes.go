// Package kubernetes is the provider that runs each computer as one pod in
// a Kubernetes namespace, hardened like a Docker computer, with a
// NetworkPolicy of its own that lets it reach only the egress proxy and be
// reached only by the supervisor. The supervisor talks to computerd at the
// pod's IP on port 7070.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
	"github.com/berthdev/berth/providers/internal/httpapi"
)

// ID is the provider id the package registers under.
const ID = "kubernetes"

// Settings the provider reads, by name.
const (
	SettingNamespace    = "KUBERNETES_NAMESPACE"
	SettingAPIURL       = "KUBERNETES_API_URL" // empty: the in-cluster config
	SettingToken        = "KUBERNETES_TOKEN"
	SettingCAFile       = "KUBERNETES_CA_FILE"
	SettingPullSecret   = "KUBERNETES_PULL_SECRET"
	SettingRuntimeClass = "KUBERNETES_RUNTIME_CLASS"
	// SettingEgressSelector selects the egress proxy's pods (a label
	// selector such as app.kubernetes.io/name=berth-egress); computers may
	// connect to them on SettingEgressPort and nowhere else. Empty: no
	// egress at all.
	SettingEgressSelector  = "KUBERNETES_EGRESS_SELECTOR"
	SettingEgressNamespace = "KUBERNETES_EGRESS_NAMESPACE"
	SettingEgressPort      = "KUBERNETES_EGRESS_PORT"
	// SettingSupervisorSelector selects the supervisor's pods, the only
	// ones allowed to reach computerd; SettingSupervisorCIDR allows an
	// address range instead, for a supervisor outside the cluster.
	SettingSupervisorSelector  = "KUBERNETES_SUPERVISOR_SELECTOR"
	SettingSupervisorNamespace = "KUBERNETES_SUPERVISOR_NAMESPACE"
	SettingSupervisorCIDR      = "KUBERNETES_SUPERVISOR_CIDR"
	SettingHeadlessImage       = "COMPUTER_IMAGE_HEADLESS"
	SettingDesktopImage        = "COMPUTER_IMAGE_DESKTOP"
	SettingMemoryMB            = "COMPUTER_MEMORY_MB"
	SettingCPUs                = "COMPUTER_CPUS"
	SettingDiskMB              = "COMPUTER_DISK_MB"
)

// Defaults of the settings.
const (
	DefaultNamespace          = "berth"
	DefaultHeadlessImage      = "berth/headless:latest"
	DefaultDesktopImage       = "berth/desktop:latest"
	DefaultMemoryMB           = 2048
	DefaultCPUs               = 1.0
	DefaultDiskMB             = 10240
	MaxDiskMB                 = 1 << 24 // 16 TiB
	DefaultEgressPort         = 3128
	DefaultSupervisorSelector = "app.kubernetes.io/name=berth-supervisor"
	// TmpSize and ShmSize are the in-memory /tmp and /dev/shm of each pod.
	TmpSize = "1Gi"
	ShmSize = "512Mi"
	// Home is where the computer's home folder is mounted.
	Home = "/home/berth"
)

// readyTimeout bounds how long Create waits for the pod to run.
const readyTimeout = 3 * time.Minute

func init() {
	providers.Register(ID, func(cfg providers.Config) (providers.Provider, error) {
		o, err := OptionsFromConfig(cfg)
		if err != nil {
			return nil, err
		}
		switch reach := cfg.Get(SettingReach, ReachPodIP); reach {
		case ReachPodIP:
			return New(o)
		case ReachPortForward:
			return NewPortForwarding(o)
		default:
			return nil, fmt.Errorf("%s=%q: want %s or %s", SettingReach, reach, ReachPodIP, ReachPortForward)
		}
	})
	providers.Describe(ID, (*Kubernetes)(nil))
}

// Options configure a Kubernetes provider.
type Options struct {
	// Client talks to the cluster. When nil, one is made from APIURL,
	// Token and CAFile, or from the in-cluster config when APIURL is empty.
	Client kubernetes.Interface
	APIURL string
	Token  string
	CAFile string

	Namespace     string
	HeadlessImage string
	DesktopImage  string
	// PullSecret names an image pull secret in Namespace; empty for none.
	PullSecret string
	// RuntimeClass is the pod's runtimeClassName (gVisor, Kata); empty for
	// the cluster's default.
	RuntimeClass string
	MemoryMB     int64
	CPUs         float64
	// DiskMB is each pod's ephemeral-storage limit, its home's included
	// (default DefaultDiskMB; NoDiskLimit, the setting's 0, for none,
	// which lets a computer fill its node's disk). Past it the kubelet
	// evicts the pod.
	DiskMB int64

	// EgressSelector, EgressNamespace and EgressPort name the egress
	// proxy's pods for the NetworkPolicy.
	EgressSelector  string
	EgressNamespace string
	EgressPort      int
	// SupervisorSelector, SupervisorNamespace and SupervisorCIDR say who
	// may reach computerd.
	SupervisorSelector  string
	SupervisorNamespace string
	SupervisorCIDR      string

	// PollInterval is how often Create looks at a new pod (default 250 ms).
	PollInterval time.Duration
	Logger       *slog.Logger
}

// OptionsFromConfig reads the provider's settings; a malformed value is an
// error naming the setting and what it accepts.
func OptionsFromConfig(cfg providers.Config) (Options, error) {
	o := Options{
		APIURL:              cfg.Get(SettingAPIURL, ""),
		Token:               cfg.Get(SettingToken, ""),
		CAFile:              cfg.Get(SettingCAFile, ""),
		Namespace:           cfg.Get(SettingNamespace, DefaultNamespace),
		HeadlessImage:       cfg.Get(SettingHeadlessImage, DefaultHeadlessImage),
		DesktopImage:        cfg.Get(SettingDesktopImage, DefaultDesktopImage),
		PullSecret:          cfg.Get(SettingPullSecret, ""),
		RuntimeClass:        cfg.Get(SettingRuntimeClass, ""),
		EgressSelector:      cfg.Get(SettingEgressSelector, ""),
		EgressNamespace:     cfg.Get(SettingEgressNamespace, ""),
		SupervisorSelector:  cfg.Get(SettingSupervisorSelector, DefaultSupervisorSelector),
		SupervisorNamespace: cfg.Get(SettingSupervisorNamespace, ""),
		SupervisorCIDR:      cfg.Get(SettingSupervisorCIDR, ""),
		Logger:              cfg.Logger,
	}
	var err error
	s := cfg.Get(SettingMemoryMB, strconv.Itoa(DefaultMemoryMB))
	if o.MemoryMB, err = strconv.ParseInt(strings.TrimSpace(s), 10, 64); err != nil || o.MemoryMB < 64 || o.MemoryMB > 1<<20 {
		return o, fmt.Errorf("%s=%q: want a whole number of MB from 64 to %d", SettingMemoryMB, s, 1<<20)
	}
	s = cfg.Get(SettingCPUs, strconv.FormatFloat(DefaultCPUs, 'g', -1, 64))
	if o.CPUs, err = strconv.ParseFloat(strings.TrimSpace(s), 64); err != nil || math.IsNaN(o.CPUs) || o.CPUs < 0.01 || o.CPUs > 1024 {
		return o, fmt.Errorf("%s=%q: want a number of CPUs from 0.01 to 1024", SettingCPUs, s)
	}
	s = cfg.Get(SettingDiskMB, strconv.Itoa(DefaultDiskMB))
	if o.DiskMB, err = strconv.ParseInt(strings.TrimSpace(s), 10, 64); err != nil || o.DiskMB < 0 || o.DiskMB > MaxDiskMB {
		return o, fmt.Errorf("%s=%q: want a whole number of MB from 0 (no limit, which lets a computer fill its node's disk) to %d", SettingDiskMB, s, MaxDiskMB)
	}
	if o.DiskMB == 0 {
		o.DiskMB = NoDiskLimit
	}
	s = cfg.Get(SettingEgressPort, strconv.Itoa(DefaultEgressPort))
	if o.EgressPort, err = strconv.Atoi(strings.TrimSpace(s)); err != nil || o.EgressPort < 1 || o.EgressPort > 65535 {
		return o, fmt.Errorf("%s=%q: want a TCP port from 1 to 65535", SettingEgressPort, s)
	}
	return o, nil
}

// NoDiskLimit in Options.DiskMB sets no ephemeral-storage limit.
const NoDiskLimit = -1

// Kubernetes is the provider.
type Kubernetes struct {
	o   Options
	c   kubernetes.Interface
	rc  *rest.Config // nil when Options.Client was given
	pf  *portForwarder
	log *slog.Logger
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// New checks o and returns a provider.
func New(o Options) (*Kubernetes, error) {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if !dnsLabel.MatchString(o.Namespace) {
		return nil, fmt.Errorf("%s=%q: want a DNS label (lower-case letters, digits, '-', at most 63)", SettingNamespace, o.Namespace)
	}
	if o.HeadlessImage == "" {
		o.HeadlessImage = DefaultHeadlessImage
	}
	if o.DesktopImage == "" {
		o.DesktopImage = DefaultDesktopImage
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = DefaultMemoryMB
	}
	if o.CPUs == 0 {
		o.CPUs = DefaultCPUs
	}
	if o.DiskMB == 0 {
		o.DiskMB = DefaultDiskMB
	}
	if o.DiskMB != NoDiskLimit && (o.DiskMB < 0 || o.DiskMB > MaxDiskMB) {
		return nil, fmt.Errorf("%s=%d: want a whole number of MB from 0 (no limit) to %d", SettingDiskMB, o.DiskMB, MaxDiskMB)
	}
	if o.EgressPort == 0 {
		o.EgressPort = DefaultEgressPort
	}
	if o.EgressNamespace == "" {
		o.EgressNamespace = o.Namespace
	}
	if o.SupervisorNamespace == "" {
		o.SupervisorNamespace = o.Namespace
	}
	for name, sel := range map[string]string{SettingEgressSelector: o.EgressSelector, SettingSupervisorSelector: o.SupervisorSelector} {
		if _, err := metav1.ParseToLabelSelector(sel); sel != "" && err != nil {
			return nil, fmt.Errorf("%s=%q: want a label selector such as app=name: %v", name, sel, err)
		}
	}
	if o.SupervisorCIDR != "" {
		if _, _, err := net.ParseCIDR(o.SupervisorCIDR); err != nil {
			return nil, fmt.Errorf("%s=%q: want a CIDR such as 10.0.0.0/8", SettingSupervisorCIDR, o.SupervisorCIDR)
		}
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 250 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	k := &Kubernetes{o: o, c: o.Client, log: o.Logger.With("component", "kubernetes")}
	if k.c == nil {
		rc, err := restConfig(o)
		if err != nil {
			return nil, err
		}
		k.rc = rc
		if k.c, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
	}
	return k, nil
}

func restConfig(o Options) (*rest.Config, error) {
	if o.APIURL == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("%s is unset and the supervisor is not running in a cluster: set %s, %s and %s", SettingAPIURL, SettingAPIURL, SettingToken, SettingCAFile)
		}
		return rc, nil
	}
	u, err := url.Parse(o.APIURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("%s=%q: want https://HOST[:PORT]", SettingAPIURL, o.APIURL)
	}
	rc := &rest.Config{Host: o.APIURL, BearerToken: o.Token, Timeout: 30 * time.Second}
	rc.TLSClientConfig.CAFile = o.CAFile
	return rc, nil
}

// Name returns the pod (and NetworkPolicy) name of a computer.
func Name(computerID string) string {
	n := "berth-c-" + strings.ToLower(strings.ReplaceAll(computerID, "_", "-"))
	if len(n) > 63 {
		n = n[:63]
	}
	return strings.TrimRight(n, "-.")
}

// Pod returns the pod of a computer: hardened as a Docker computer is.
func (k *Kubernetes) Pod(spec providers.Spec) *corev1.Pod {
	image := k.o.HeadlessImage
	if spec.Image == providers.ImageDesktop {
		image = k.o.DesktopImage
	}
	uid, gid := int64(1000), int64(1000)
	yes, no := true, false
	mem := resource.MustParse(strconv.FormatInt(k.o.MemoryMB, 10) + "Mi")
	cpu := *resource.NewMilliQuantity(int64(math.Ceil(k.o.CPUs*1000)), resource.DecimalSI)
	tmp, shm := resource.MustParse(TmpSize), resource.MustParse(ShmSize)
	deadline := int64(math.Ceil(spec.Lease.Seconds()))
	if deadline < 1 {
		deadline = 900
	}
	grace := int64(5)

	env := []corev1.EnvVar{
		{Name: computerd.EnvTokenHash, Value: spec.TokenHash},
		{Name: computerd.EnvComputerID, Value: spec.ComputerID},
		{Name: "HOME", Value: Home},
	}
	keys := make([]string, 0, len(spec.Env))
	for key := range spec.Env {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		env = append(env, corev1.EnvVar{Name: key, Value: spec.Env[key]})
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        Name(spec.ComputerID),
			Namespace:   k.o.Namespace,
			Labels:      podLabels(spec),
			Annotations: map[string]string{providers.LabelAgent: spec.AgentID},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			HostNetwork:                   false,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser:      &uid,
				RunAsGroup:     &gid,
				FSGroup:        &gid,
				RunAsNonRoot:   &yes,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "computer",
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Env:             env,
				Ports:           []corev1.ContainerPort{{Name: "computerd", ContainerPort: computerd.Port, Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: mem, corev1.ResourceCPU: cpu},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: mem, corev1.ResourceCPU: cpu},
				},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser:                &uid,
					RunAsGroup:               &gid,
					RunAsNonRoot:             &yes,
					Privileged:               &no,
					ReadOnlyRootFilesystem:   &yes,
					AllowPrivilegeEscalation: &no,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "shm", MountPath: "/dev/shm"},
					{Name: "home", MountPath: Home},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &tmp}}},
				{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &shm}}},
				{Name: "home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	if k.o.DiskMB != NoDiskLimit {
		// What the pod may write to its node's disk: its home (a disk
		// emptyDir), its container's writable layer (read-only here) and
		// its logs. The limit is also the request, so that the scheduler
		// puts the pod on a node with that much room.
		disk := resource.MustParse(strconv.FormatInt(k.o.DiskMB, 10) + "Mi")
		c := &pod.Spec.Containers[0]
		c.Resources.Limits[corev1.ResourceEphemeralStorage] = disk
		c.Resources.Requests[corev1.ResourceEphemeralStorage] = disk
		for i := range pod.Spec.Volumes {
			if v := &pod.Spec.Volumes[i]; v.Name == "home" {
				v.EmptyDir.SizeLimit = &disk
			}
		}
	}
	if k.o.RuntimeClass != "" {
		rc := k.o.RuntimeClass
		pod.Spec.RuntimeClassName = &rc
	}
	if k.o.PullSecret != "" {
		pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: k.o.PullSecret}}
	}
	return pod
}

// NetworkPolicy returns the computer's policy: ingress only from the
// supervisor to computerd's port, egress only to the egress proxy's port.
func (k *Kubernetes) NetworkPolicy(spec providers.Spec) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	cdPort := intstr.FromInt32(computerd.Port)
	egPort := intstr.FromInt32(int32(k.o.EgressPort))
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: Name(spec.ComputerID), Namespace: k.o.Namespace, Labels: podLabels(spec)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{providers.LabelComputer: spec.ComputerID}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
			Egress:      []networkingv1.NetworkPolicyEgressRule{},
		},
	}
	var from []networkingv1.NetworkPolicyPeer
	if k.o.SupervisorSelector != "" {
		sel, _ := metav1.ParseToLabelSelector(k.o.SupervisorSelector)
		from = append(from, networkingv1.NetworkPolicyPeer{PodSelector: sel, NamespaceSelector: namespaceSelector(k.o.SupervisorNamespace)})
	}
	if k.o.SupervisorCIDR != "" {
		from = append(from, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: k.o.SupervisorCIDR}})
	}
	if len(from) > 0 {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{
			From: from, Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &cdPort}},
		})
	}
	if k.o.EgressSelector != "" {
		sel, _ := metav1.ParseToLabelSelector(k.o.EgressSelector)
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{
			To:    []networkingv1.NetworkPolicyPeer{{PodSelector: sel, NamespaceSelector: namespaceSelector(k.o.EgressNamespace)}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &egPort}},
		})
	}
	return np
}

func namespaceSelector(ns string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
}

var labelValue = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$`)

// podLabels are Berth's labels, each kept only when Kubernetes accepts its
// value (the agent id is always in an annotation too).
func podLabels(spec providers.Spec) map[string]string {
	out := map[string]string{}
	for k, v := range spec.Labels() {
		if labelValue.MatchString(v) {
			out[k] = v
		}
	}
	return out
}

// Create makes the computer's NetworkPolicy, then its pod, and waits until
// the pod runs and has an address. An image that cannot be pulled is
// providers.ErrBadImage; a pod that cannot be scheduled for lack of room is
// providers.ErrCapacity.
func (k *Kubernetes) Create(ctx context.Context, spec providers.Spec) (providers.Machine, error) {
	name := Name(spec.ComputerID)
	if _, err := k.c.NetworkingV1().NetworkPolicies(k.o.Namespace).Create(ctx, k.NetworkPolicy(spec), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return providers.Machine{}, fmt.Errorf("create computer %s: network policy: %w", spec.ComputerID, mapErr(err))
	}
	if _, err := k.c.CoreV1().Pods(k.o.Namespace).Create(ctx, k.Pod(spec), metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return providers.Machine{}, k.undo(ctx, name, fmt.Errorf("create computer %s: pod: %w", spec.ComputerID, mapErr(err)))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		pod, err := k.c.CoreV1().Pods(k.o.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return providers.Machine{}, fmt.Errorf("create computer %s: pod %s: %w", spec.ComputerID, name, mapErr(err))
		}
		if m, ok, err := machineOf(pod); err != nil {
			return providers.Machine{}, k.undo(ctx, name, fmt.Errorf("create computer %s: pod %s: %w", spec.ComputerID, name, err))
		} else if ok {
			k.log.Info("computer created", "computer", spec.ComputerID, "pod", name, "ip", pod.Status.PodIP)
			return m, nil
		}
		select {
		case <-ctx.Done():
			return providers.Machine{}, fmt.Errorf("create computer %s: pod %s did not run in %s: %w", spec.ComputerID, name, readyTimeout, providers.ErrUnavailable)
		case <-time.After(k.o.PollInterval):
		}
	}
}

// undo removes what a create made when it fails for sure (a missing
// image, no room, refused credentials, an object the API server turned
// down), since the supervisor takes such a
// failure to mean nothing was left behind. If the removal fails too, the
// error is reported as an outage instead, so that the supervisor searches
// for the machine by its label.
func (k *Kubernetes) undo(ctx context.Context, name string, err error) error {
	if !errors.Is(err, providers.ErrBadImage) && !errors.Is(err, providers.ErrCapacity) &&
		!errors.Is(err, providers.ErrBadCredentials) && !errors.Is(err, providers.ErrRefused) {
		return err
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if derr := k.Destroy(dctx, name); derr != nil {
		return fmt.Errorf("%w (%v); removing what it made failed too: %v", providers.ErrUnavailable, err, derr)
	}
	return err
}

// machineOf reads a pod: ok once it runs with an address; an error when
// it cannot run.
func machineOf(pod *corev1.Pod) (providers.Machine, bool, error) {
	m := providers.Machine{ID: pod.Name, Labels: pod.Labels}
	if v := pod.Annotations[providers.LabelAgent]; v != "" {
		m.Labels = copyLabels(pod.Labels)
		m.Labels[providers.LabelAgent] = v
	}
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return m, false, fmt.Errorf("pod ended (%s: %s): %w", pod.Status.Reason, pod.Status.Message, providers.ErrUnavailable)
	case corev1.PodRunning:
		if pod.Status.PodIP != "" {
			m.Endpoint = "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(computerd.Port))
			return m, true, nil
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
				return m, false, fmt.Errorf("image %s: %s: %w", cs.Image, w.Reason, providers.ErrBadImage)
			case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return m, false, fmt.Errorf("container: %s: %s: %w", w.Reason, w.Message, providers.ErrUnavailable)
			}
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable &&
			strings.Contains(c.Message, "Insufficient") {
			return m, false, fmt.Errorf("pod cannot be scheduled: %s: %w", c.Message, providers.ErrCapacity)
		}
	}
	return m, false, nil
}

func copyLabels(in map[string]string) map[string]string {
	out := make(map[string]string, len(in)+1)
	for k, v := range in {
		out[k] = v
	}
	return out
}

// Destroy deletes the computer's pod and its NetworkPolicy; what is
// already gone counts as deleted.
func (k *Kubernetes) Destroy(ctx context.Context, machineID string) error {
	grace := int64(0)
	if err := k.c.CoreV1().Pods(k.o.Namespace).Delete(ctx, machineID, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("destroy %s: pod: %w", machineID, mapErr(err))
	}
	if err := k.c.NetworkingV1().NetworkPolicies(k.o.Namespace).Delete(ctx, machineID, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("destroy %s: network policy: %w", machineID, mapErr(err))
	}
	k.log.Info("computer destroyed", "pod", machineID)
	return nil
}

// List returns the namespace's pods that carry Berth's managed label, and
// a machine for each Berth NetworkPolicy whose pod is gone (a create that
// died between the two), so that reconciliation removes it.
func (k *Kubernetes) List(ctx context.Context) ([]providers.Machine, error) {
	sel := labels.Set{providers.LabelManaged: "true"}.String()
	pods, err := k.c.CoreV1().Pods(k.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", mapErr(err))
	}
	seen := map[string]bool{}
	var out []providers.Machine
	for i := range pods.Items {
		m, _, _ := machineOf(&pods.Items[i])
		seen[m.ID] = true
		out = append(out, m)
	}
	nps, err := k.c.NetworkingV1().NetworkPolicies(k.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list network policies: %w", mapErr(err))
	}
	for _, np := range nps.Items {
		if !seen[np.Name] {
			out = append(out, providers.Machine{ID: np.Name, Labels: np.Labels})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// mapErr maps the API server's answers to the providers' errors. Its
// messages never carry the token.
func mapErr(err error) error {
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return nil
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w: the API server refused the token (401)", providers.ErrBadCredentials)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
		return fmt.Errorf("%w: %v", providers.ErrCapacity, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w: %v", providers.ErrBadCredentials, err)
	case apierrors.IsTooManyRequests(err):
		return fmt.Errorf("%w: %v", providers.ErrCapacity, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %v", providers.ErrNotFound, err)
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		// The API server turned the object down (a setting it will not
		// take, such as a malformed resource value): nothing was made.
		return httpapi.StatusError(http.StatusUnprocessableEntity, err.Error())
	case errors.As(err, &status):
		return fmt.Errorf("%w: %v", providers.ErrUnavailable, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return fmt.Errorf("%w: %v", providers.ErrUnavailable, err)
}

// Describe implements providers.Describer.
func (*Kubernetes) Describe() providers.Description {
	return providers.Description{
		Summary: "one hardened pod per computer in a Kubernetes namespace, with a NetworkPolicy of its own",
		Settings: []providers.Setting{
			{Name: SettingAPIURL, Help: "the API server's URL; unset: the in-cluster configuration"},
			{Name: SettingToken, Secret: true, Help: "a bearer token allowed to manage pods and network policies in the namespace"},
			{Name: SettingCAFile, Help: "the CA bundle that signs the API server's certificate"},
			{Name: SettingNamespace, Default: DefaultNamespace, Help: "where the computers' pods run"},
			{Name: SettingPullSecret, Help: "an image pull secret in the namespace"},
			{Name: SettingRuntimeClass, Help: "the pods' runtimeClassName (gVisor, Kata)"},
			{Name: SettingHeadlessImage, Default: DefaultHeadlessImage, Help: "the headless image as the cluster pulls it"},
			{Name: SettingDesktopImage, Default: DefaultDesktopImage, Help: "the desktop image as the cluster pulls it"},
			{Name: SettingMemoryMB, Default: strconv.Itoa(DefaultMemoryMB), Help: "each pod's memory request and limit, MB"},
			{Name: SettingCPUs, Default: "1", Help: "each pod's CPU request and limit"},
			{Name: SettingDiskMB, Default: strconv.Itoa(DefaultDiskMB), Help: "each pod's ephemeral-storage request and limit (its home included), MB; 0 for none, which lets a computer fill its node's disk"},
			{Name: SettingEgressSelector, Help: "label selector of the egress proxy's pods; unset: computers have no egress"},
			{Name: SettingEgressNamespace, Help: "the egress proxy's namespace (default: the computers')"},
			{Name: SettingEgressPort, Default: strconv.Itoa(DefaultEgressPort), Help: "the egress proxy's port"},
			{Name: SettingSupervisorSelector, Default: DefaultSupervisorSelector, Help: "label selector of the supervisor's pods, the only ones that reach computerd"},
			{Name: SettingSupervisorNamespace, Help: "the supervisor's namespace (default: the computers')"},
			{Name: SettingSupervisorCIDR, Help: "an address range allowed to reach computerd, for a supervisor outside the cluster"},
			{Name: SettingReach, Default: ReachPodIP, Help: "how the supervisor reaches computerd: pod-ip, or port-forward through the API server for a supervisor outside the cluster"},
		},
	}
}

var (
	_ providers.Provider  = (*Kubernetes)(nil)
	_ providers.Lister    = (*Kubernetes)(nil)
	_ providers.Describer = (*Kubernetes)(nil)
)
