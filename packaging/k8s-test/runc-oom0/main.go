// Command runc-oom0 runs runc after setting the container's oomScoreAdj to
// 0. make test-k8s uses it as containerd's runtime binary: root lacks
// CAP_SYS_RESOURCE on the test machines, so the negative score the kubelet
// asks for a pod sandbox would make every pod fail to start.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

const runc = "/usr/sbin/runc"

func main() {
	args := os.Args[1:]
	for i, a := range args {
		switch a {
		case "--bundle", "-b":
			if i+1 < len(args) {
				zero(filepath.Join(args[i+1], "config.json"), true)
			}
		case "--process", "-p":
			if i+1 < len(args) {
				zero(args[i+1], false)
			}
		}
	}
	err := syscall.Exec(runc, append([]string{runc}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "runc-oom0: exec %s: %v\n", runc, err)
	os.Exit(127)
}

// zero sets oomScoreAdj to 0 in a runtime spec (under "process") or a
// process spec (at the top).
func zero(path string, spec bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var doc map[string]any
	if json.Unmarshal(b, &doc) != nil {
		return
	}
	target := doc
	if spec {
		p, ok := doc["process"].(map[string]any)
		if !ok {
			return
		}
		target = p
	}
	if v, ok := target["oomScoreAdj"].(float64); !ok || v >= 0 {
		return
	}
	target["oomScoreAdj"] = 0
	out, err := json.Marshal(doc)
	if err != nil {
		return
	}
	os.WriteFile(path, out, 0o644)
}
