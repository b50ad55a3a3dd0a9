package kubernetes

// A fake cluster for the provider's tests: client-go's fake clientset
// (k8s.io/client-go/kubernetes/fake, the object tracker client-go ships
// for tests) with a fake kubelet in reactors. Each pod created gets a real
// in-process computerd listening on its own loopback address at port
// 7070, bound to the token hash and environment the pod spec carries, and
// the pod is marked Running with that address as its IP. The reactors
// also play the API server's bad days: 401 for every call while
// credentials are refused, 429 and 503 on the next create, a create whose
// reply is lost after the pod was stored, and deletes that fail.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/computerd/server"
	"github.com/berthdev/berth/conformance/hostedtest"
)

type fakeCluster struct {
	t  testing.TB
	cs *fake.Clientset

	hostedtest.Faults
	machines   map[string]*http.Server
	nextCreate []error // errors the next pod creates answer
	badImage   string  // pods with this image never pull
}

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

func newFakeCluster(t testing.TB) *fakeCluster {
	f := &fakeCluster{t: t, cs: fake.NewClientset(), machines: map[string]*http.Server{}}
	f.cs.PrependReactor("create", "pods", f.createPod)
	f.cs.PrependReactor("delete", "pods", f.deletePod)
	f.cs.PrependReactor("*", "*", f.auth)
	t.Cleanup(f.close)
	return f
}

func (f *fakeCluster) auth(k8stesting.Action) (bool, runtime.Object, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Refuse {
		return true, nil, apierrors.NewUnauthorized("Unauthorized")
	}
	return false, nil, nil
}

func (f *fakeCluster) createPod(a k8stesting.Action) (bool, runtime.Object, error) {
	pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
	f.Mu.Lock()
	if len(f.nextCreate) > 0 {
		err := f.nextCreate[0]
		f.nextCreate = f.nextCreate[1:]
		f.Mu.Unlock()
		return true, nil, err
	}
	lose := hostedtest.Take(&f.LoseReplies)
	bad := f.badImage != "" && pod.Spec.Containers[0].Image == f.badImage
	f.Mu.Unlock()

	pod.Status.Phase = corev1.PodPending
	if bad {
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "computer", Image: f.badImage,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "not found"}}}}
	} else {
		ip, err := f.startComputer(pod)
		if err != nil {
			return true, nil, apierrors.NewInternalError(err)
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP = ip
	}
	if err := f.cs.Tracker().Create(podsGVR, pod, pod.Namespace); err != nil {
		return true, nil, err
	}
	if lose {
		return true, nil, errors.New("http2: client connection lost")
	}
	return true, pod, nil
}

func (f *fakeCluster) deletePod(a k8stesting.Action) (bool, runtime.Object, error) {
	name := a.(k8stesting.DeleteAction).GetName()
	f.Mu.Lock()
	if hostedtest.Take(&f.FailDeletes) {
		f.Mu.Unlock()
		return true, nil, apierrors.NewServiceUnavailable("etcdserver: request timed out")
	}
	srv := f.machines[name]
	delete(f.machines, name)
	f.Mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	return false, nil, nil
}

// startComputer runs computerd for pod on a loopback address of its own,
// port 7070, bound to the pod's token hash and environment.
func (f *fakeCluster) startComputer(pod *corev1.Pod) (string, error) {
	env := map[string]string{}
	hash := ""
	for _, e := range pod.Spec.Containers[0].Env {
		switch e.Name {
		case computerd.EnvTokenHash:
			hash = e.Value
		case computerd.EnvComputerID, "HOME":
		default:
			env[e.Name] = e.Value
		}
	}
	bind := rand.Text()
	bindSum := sha256.Sum256([]byte(bind))
	h := server.New(server.Config{BindHash: hex.EncodeToString(bindSum[:]), Home: f.t.TempDir(), Version: "fake-kubelet"})
	var ln net.Listener
	var ip string
	for range 20 {
		n, _ := rand.Int(rand.Reader, big.NewInt(1<<22))
		v := n.Int64()
		ip = fmt.Sprintf("127.%d.%d.%d", 10+v>>16%200, (v>>8)&255, 1+(v&255)%254)
		var err error
		if ln, err = net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(computerd.Port))); err == nil {
			break
		}
	}
	if ln == nil {
		return "", errors.New("no free loopback address for the pod")
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := computerd.NewClient("http://"+ln.Addr().String(), bind)
	if _, err := c.Bind(ctx, computerd.BindRequest{TokenHash: hash, Env: env}); err != nil {
		srv.Close()
		return "", fmt.Errorf("bind computerd: %w", err)
	}
	f.Mu.Lock()
	f.machines[pod.Name] = srv
	f.Mu.Unlock()
	return ip, nil
}

// exists reports whether a pod carries label=value.
func (f *fakeCluster) exists(ctx context.Context, label, value string) (bool, error) {
	obj, err := f.cs.Tracker().List(podsGVR, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, "")
	if err != nil {
		return false, err
	}
	for _, p := range obj.(*corev1.PodList).Items {
		if p.Labels[label] == value || (label == "dev.berth.agent" && p.Annotations[label] == value) {
			return true, nil
		}
	}
	return false, nil
}

func (f *fakeCluster) close() {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	for name, srv := range f.machines {
		srv.Close()
		delete(f.machines, name)
	}
}
