package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// The benchmarks report our figure, a baseline measured in the same run on
// the same engine and image, and the median of the paired ratios:
//
//	make bench    (or: go test ./e2e -run '^$' -bench . -benchtime 20x)

func median[T time.Duration | float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func dockerClient(b testing.TB) *client.Client {
	b.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli
}

// bareStart is the baseline of a cold start: docker create + start of the
// same image, no hardening, the default network.
func bareStart(b *testing.B, ctx context.Context, cli *client.Client, image string) time.Duration {
	b.Helper()
	name := fmt.Sprintf("berth-bench-bare-%d", time.Now().UnixNano())
	defer cli.ContainerRemove(context.WithoutCancel(ctx), name, client.ContainerRemoveOptions{Force: true})
	start := time.Now()
	if _, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Image: image}); err != nil {
		b.Fatal(err)
	}
	if _, err := cli.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkColdStart times a REST start until the first exec is answered,
// against a bare docker create + start of the same image.
func BenchmarkColdStart(b *testing.B) {
	requireDocker(b, "berth/test:latest")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	s := startSupervisor(b, "berth/test:latest")
	connect(s, "bench")
	cli := dockerClient(b)
	timeOurs := func() time.Duration {
		start := time.Now()
		s.must("POST", "/v1/agents/bench/computer/start", nil, 200, nil)
		if x := s.exec("bench", "echo hi"); x.Stdout != "hi\n" {
			b.Fatalf("first exec: %+v", x)
		}
		d := time.Since(start)
		s.must("POST", "/v1/agents/bench/computer/stop", nil, 200, nil)
		return d
	}
	pairedRuns(b, "start-to-exec-ms", timeOurs, "bare-create+start-ms", func() time.Duration {
		return bareStart(b, ctx, cli, "berth/test:latest")
	})
}

// pairedRuns times ours and base alternately, the first of each pair
// swapping every loop, and reports both medians and the median ratio.
func pairedRuns(b *testing.B, oursUnit string, ours func() time.Duration, baseUnit string, base func() time.Duration) {
	var o, r []time.Duration
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			o = append(o, ours())
			r = append(r, base())
		} else {
			r = append(r, base())
			o = append(o, ours())
		}
	}
	ratios := make([]float64, len(o))
	for i := range o {
		ratios[i] = float64(o[i]) / float64(r[i])
	}
	b.ReportMetric(ms(median(o)), oursUnit)
	b.ReportMetric(ms(median(r)), baseUnit)
	b.ReportMetric(median(ratios), "ratio")
}

// BenchmarkExec times an `echo hi` through the REST API against the same
// command through the Docker API's exec (what `docker exec` does).
func BenchmarkExec(b *testing.B) {
	requireDocker(b, "berth/test:latest")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := startSupervisor(b, "berth/test:latest")
	connect(s, "bench")
	var sess session
	s.must("POST", "/v1/agents/bench/computer/start", nil, 200, &sess)
	defer s.call("POST", "/v1/agents/bench/computer/stop", nil, nil)
	name := "berth-c-" + strings.TrimPrefix(sess.ID, "s_")
	cli := dockerClient(b)
	dockerExec := func() time.Duration {
		start := time.Now()
		ex, err := cli.ExecCreate(ctx, name, client.ExecCreateOptions{Cmd: []string{"echo", "hi"}, AttachStdout: true, AttachStderr: true})
		if err != nil {
			b.Fatal(err)
		}
		att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 64)
		for {
			if _, err := att.Reader.Read(buf); err != nil {
				break
			}
		}
		att.Close()
		if ins, err := cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{}); err != nil || ins.ExitCode != 0 {
			b.Fatalf("docker exec: %v %+v", err, ins)
		}
		return time.Since(start)
	}
	restExec := func() time.Duration {
		start := time.Now()
		if x := s.exec("bench", "echo hi"); x.Stdout != "hi\n" {
			b.Fatalf("exec: %+v", x)
		}
		return time.Since(start)
	}
	restExec() // warm the connection
	pairedRuns(b, "rest-exec-ms", restExec, "docker-exec-ms", dockerExec)

	// computerd's idle memory, read from the host's view of its process.
	ins, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(time.Second)
	if kb := vmRSS(ins.Container.State.Pid); kb > 0 {
		b.ReportMetric(float64(kb)/1024, "computerd-rss-MB")
	}
}

func vmRSS(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}
