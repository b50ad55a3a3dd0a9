package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/berthdev/berth/supervisor/daemon"
)

// publicIP stands for an internet host: the test resolver answers it for
// upstream.test, and the test dialer carries connections to it to a server
// on loopback, so nothing leaves this machine.
var publicIP = netip.MustParseAddr("93.184.215.14")

type testResolver struct{}

func (testResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if strings.TrimSuffix(host, ".") == "upstream.test" {
		return []netip.Addr{publicIP}, nil
	}
	if strings.TrimSuffix(host, ".") == "internal.test" {
		return []netip.Addr{publicIP, netip.MustParseAddr("10.9.8.7")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

type testDialer struct{ upstream string }

func (d testDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if host, _, _ := net.SplitHostPort(addr); host != publicIP.String() {
		return nil, fmt.Errorf("test dialer: refusing %s", addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", d.upstream)
}

// TestEgress checks, from inside a real Docker computer, that its only way
// out is the egress proxy: with its own credentials it reaches a public
// host, private and metadata addresses are refused, wrong credentials are
// refused, and a service on the host is out of reach.
func TestEgress(t *testing.T) {
	requireDocker(t, "berth/test:latest")
	light(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" {
			t.Errorf("the proxy forwarded its credentials upstream")
		}
		io.WriteString(w, "hello from upstream")
	}))
	defer upstream.Close()
	// A service on the host, on every interface, that computers must not reach.
	hostSvc, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostSvc.Close()
	go http.Serve(hostSvc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "host service") }))

	s := startSupervisorEgress(t, "berth/test:latest", daemon.EgressOptions{
		Listen: ":0", Resolver: testResolver{}, Dialer: testDialer{upstream: upstream.Listener.Addr().String()},
	})
	connect(s, "eg")
	s.must("POST", "/v1/agents/eg/computer/start", nil, 200, nil)
	t.Cleanup(func() { s.call("POST", "/v1/agents/eg/computer/stop", nil, nil) })

	x := s.exec("eg", "computerd fetch http://upstream.test/")
	if x.ExitCode != 0 || !strings.Contains(x.Stdout, "hello from upstream") {
		t.Fatalf("through the proxy: %+v", x)
	}
	x = s.exec("eg", "echo $HTTP_PROXY | grep -c \"^http://.*:.*@\"; echo \"[$NO_PROXY]\"")
	if !strings.HasPrefix(x.Stdout, "1\n[]") {
		t.Fatalf("proxy settings: %q", x.Stdout)
	}
	for _, target := range []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/",
		"http://2130706433/",
		"http://0x7f000001/",
		"http://[::ffff:10.0.0.1]/",
		"http://[64:ff9b::a9fe:a9fe]/",
		"http://internal.test/",
	} {
		x := s.exec("eg", "computerd fetch "+target)
		if x.ExitCode != 1 || !strings.Contains(x.Stdout, "403") || !strings.Contains(x.Stdout, "blocked-address") {
			t.Errorf("%s: want a 403 blocked-address refusal, got %+v", target, x)
		}
		if strings.Contains(x.Stdout, "10.9.8.7") {
			t.Errorf("%s: the refusal names the internal address: %q", target, x.Stdout)
		}
	}
	x = s.exec("eg", `HTTP_PROXY=$(echo $HTTP_PROXY | sed 's#//[^@]*@#//intruder:guess@#') computerd fetch http://upstream.test/`)
	if x.ExitCode != 1 || !strings.Contains(x.Stdout, "407") {
		t.Errorf("wrong credentials: %+v", x)
	}
	gw, _, _ := net.SplitHostPort(s.d.EgressAddr())
	// Through the proxy: the host's docker0 address, the computer's own
	// gateway, the supervisor's port and the host service are refused too.
	_, supPort, _ := net.SplitHostPort(strings.TrimPrefix(s.url, "http://"))
	for _, target := range []string{
		fmt.Sprintf("http://%s:%d/", gw, hostSvc.Addr().(*net.TCPAddr).Port),
		"http://" + net.JoinHostPort(gw, supPort) + "/healthz",
		fmt.Sprintf("http://%s/", gatewayOf(t, s, "eg")),
	} {
		x := s.exec("eg", "computerd fetch -timeout 5s "+target)
		if x.ExitCode != 1 || !strings.Contains(x.Stdout, "blocked-address") {
			t.Errorf("%s through the proxy: want blocked-address, got %+v", target, x)
		}
	}
	// No name service inside.
	x = s.exec("eg", "nslookup upstream.test 2>&1; echo rc=$?")
	if strings.Contains(x.Stdout, "rc=0") {
		t.Errorf("a name lookup worked inside the computer: %q", x.Stdout)
	}
	port := hostSvc.Addr().(*net.TCPAddr).Port
	x = s.exec("eg", fmt.Sprintf("computerd fetch -direct -timeout 3s http://%s:%d/", gw, port))
	if x.ExitCode == 0 || strings.Contains(x.Stdout, "host service") {
		t.Errorf("a computer reached a service on the host: %+v", x)
	}
	x = s.exec("eg", fmt.Sprintf("computerd fetch -timeout 3s http://%s:%d/", gw, port))
	if x.ExitCode == 0 || strings.Contains(x.Stdout, "host service") {
		t.Errorf("the proxy took a computer to the host: %+v", x)
	}

	req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `berth_egress_connections_total{verdict="blocked-address"}`) {
		t.Errorf("metrics lack the refusals:\n%s", body)
	}
}

// gatewayOf reads the computer's default gateway from its routing table.
func gatewayOf(t *testing.T, s *super, agent string) string {
	t.Helper()
	x := s.exec(agent, `awk '$2 == "00000000" {print $3}' /proc/net/route`)
	hex := strings.TrimSpace(x.Stdout)
	var b [4]byte
	if _, err := fmt.Sscanf(hex, "%02X%02X%02X%02X", &b[3], &b[2], &b[1], &b[0]); err != nil {
		t.Fatalf("gateway %q: %v", hex, err)
	}
	return netip.AddrFrom4(b).String()
}
