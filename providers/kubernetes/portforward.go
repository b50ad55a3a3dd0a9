package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/berthdev/berth/computerd"
	"github.com/berthdev/berth/providers"
)

// Ways the supervisor reaches computerd in a pod (KUBERNETES_REACH).
const (
	// ReachPodIP dials the pod's IP on port 7070: the supervisor runs in
	// the cluster or routes to its pod network (the default).
	ReachPodIP = "pod-ip"
	// ReachPortForward tunnels each connection through the API server's
	// port-forward of the pod (what kubectl port-forward does), for a
	// supervisor outside the cluster. The API server's pod proxy cannot be
	// used: it consumes the Authorization header computerd's token is in.
	ReachPortForward = "port-forward"
)

// SettingReach is how the supervisor reaches computerd.
const SettingReach = "KUBERNETES_REACH"

// portForwarder dials computerd in a pod through the API server.
type portForwarder struct {
	rc        *rest.Config
	namespace string
	nextID    atomic.Int64

	once    sync.Once
	rt      http.RoundTripper
	upgrade spdy.Upgrader
	err     error
}

func (f *portForwarder) init() error {
	f.once.Do(func() { f.rt, f.upgrade, f.err = spdy.RoundTripperFor(f.rc) })
	return f.err
}

// dial opens one TCP connection to port 7070 of pod, as a data stream of
// a port-forward connection of its own.
func (f *portForwarder) dial(ctx context.Context, pod string) (net.Conn, error) {
	if err := f.init(); err != nil {
		return nil, fmt.Errorf("port-forward to %s: %w", pod, err)
	}
	base, _, err := rest.DefaultServerUrlFor(f.rc)
	if err != nil {
		return nil, fmt.Errorf("port-forward to %s: %w", pod, err)
	}
	url := *base
	url.Path = path.Join(url.Path, "/api/v1/namespaces", f.namespace, "pods", pod, "portforward")
	type result struct {
		c   httpstream.Connection
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, _, err := spdy.NewDialerForStreaming(f.upgrade, &http.Client{Transport: f.rt}, http.MethodPost, &url).Dial(portforward.PortForwardProtocolV1Name)
		ch <- result{c, err}
	}()
	var conn httpstream.Connection
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("port-forward to %s: %w: %v", pod, providers.ErrUnavailable, r.err)
		}
		conn = r.c
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
	id := strconv.FormatInt(f.nextID.Add(1), 10)
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(computerd.Port))
	h.Set(corev1.PortForwardRequestIDHeader, id)
	errStream, err := conn.CreateStream(h)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("port-forward to %s: error stream: %w", pod, err)
	}
	errStream.Close() // nothing is sent on it; the kubelet reports there
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("port-forward to %s: data stream: %w", pod, err)
	}
	return &streamConn{conn: conn, data: data, pod: pod}, nil
}

// streamConn is a port-forward data stream as a net.Conn.
type streamConn struct {
	conn httpstream.Connection
	data httpstream.Stream
	pod  string
	once sync.Once
}

func (c *streamConn) Read(p []byte) (int, error)  { return c.data.Read(p) }
func (c *streamConn) Write(p []byte) (int, error) { return c.data.Write(p) }
func (c *streamConn) Close() error {
	c.once.Do(func() {
		c.data.Close()
		c.conn.Close()
	})
	return nil
}
func (c *streamConn) LocalAddr() net.Addr                { return pfAddr("supervisor") }
func (c *streamConn) RemoteAddr() net.Addr               { return pfAddr(c.pod + ":" + strconv.Itoa(computerd.Port)) }
func (c *streamConn) SetDeadline(t time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(t time.Time) error { return nil }

type pfAddr string

func (a pfAddr) Network() string { return "portforward" }
func (a pfAddr) String() string  { return string(a) }

// PortForwarding is the provider with ReachPortForward: the same pods,
// reached through the API server. Its transports are kept per pod, so
// connections to a computer are reused between tool calls, and dropped
// when the computer is destroyed.
type PortForwarding struct {
	*Kubernetes

	mu         sync.Mutex
	transports map[string]*http.Transport
}

// Transport implements providers.Transporter.
func (p *PortForwarding) Transport(m providers.Machine, credentials map[string]string) http.RoundTripper {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.transports[m.ID]; t != nil {
		return t
	}
	pod := m.ID
	t := &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return p.pf.dial(ctx, pod) },
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
	p.transports[m.ID] = t
	return t
}

// Destroy implements providers.Provider, closing the pod's connections.
func (p *PortForwarding) Destroy(ctx context.Context, machineID string) error {
	p.mu.Lock()
	if t := p.transports[machineID]; t != nil {
		t.CloseIdleConnections()
		delete(p.transports, machineID)
	}
	p.mu.Unlock()
	return p.Kubernetes.Destroy(ctx, machineID)
}

// Close drops every kept connection.
func (p *PortForwarding) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, t := range p.transports {
		t.CloseIdleConnections()
		delete(p.transports, id)
	}
}

// NewPortForwarding returns the provider with ReachPortForward; it needs
// a cluster configuration (o.Client alone is not enough).
func NewPortForwarding(o Options) (*PortForwarding, error) {
	k, err := New(o)
	if err != nil {
		return nil, err
	}
	if k.rc == nil {
		return nil, errNoRESTConfig
	}
	k.pf = &portForwarder{rc: k.rc, namespace: k.o.Namespace}
	return &PortForwarding{Kubernetes: k, transports: map[string]*http.Transport{}}, nil
}

var errNoRESTConfig = errors.New(SettingReach + "=" + ReachPortForward + " needs a cluster to reach: set " + SettingAPIURL + " or run in the cluster")

var (
	_ providers.Provider    = (*PortForwarding)(nil)
	_ providers.Lister      = (*PortForwarding)(nil)
	_ providers.Transporter = (*PortForwarding)(nil)
)
