// Package helm tests the Helm chart in packaging/helm/berth: helm lint and
// helm template with several value sets (the rendered objects are parsed
// and checked: replicas, least RBAC, secrets by reference, NetworkPolicies,
// hardening), and, under make test-k8s, an install into a real single-node
// cluster where a computer is started through the chart's supervisors and
// runs a command. The helm CLI comes from build.sh (built from the Go
// module proxy and cached).
package helm
