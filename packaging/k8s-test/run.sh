#!/bin/sh
# make test-k8s: build a single-node Kubernetes cluster from the Go module
# proxy and Debian packages, start it on this machine, and run the
# kubernetes provider's conformance test against it, then install the Helm
# chart (packaging/helm/berth) into it and use a computer through the chart's
# supervisors.
#
#   packaging/k8s-test/run.sh build   build (or reuse) the cached binaries
#   packaging/k8s-test/run.sh up      build, then start the cluster; prints its env file
#   packaging/k8s-test/run.sh test    build, start, run the tests, stop (the default)
#   packaging/k8s-test/run.sh down    stop a cluster started by `up`
#
# What it needs, as root on Debian 12: Go, the apt packages etcd-server,
# containerd, containernetworking-plugins, iproute2 and openssl (installed
# when missing), and the image berth/test in the local Docker engine
# (images/build.sh); for the chart, PostgreSQL (initdb and postgres, run as
# nobody) and helm (packaging/helm/build.sh, cached). The binaries
# (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet v1.34.1,
# built through a wrapper module that pins every k8s.io staging module to
# v0.34.1) are cached under $BERTH_K8S_CACHE (default ~/.cache/berth-k8s):
# about 14 minutes cold on an idle 2-core machine, seconds when warm; a
# binary missing from an older cache is built alone. The cluster lives in a
# temporary folder, listens on loopback and a veth pair of its own (the API
# server and PostgreSQL on the node's address there, which pods reach), has
# RBAC on, and is torn down on exit. It has no kube-proxy: Services have no
# addresses that work, so tests reach pods at their own addresses.
set -eu

K8S_VERSION=v1.34.1
STAGING_VERSION=v0.34.1
CACHE=${BERTH_K8S_CACHE:-$HOME/.cache/berth-k8s}
BIN=$CACHE/bin-$K8S_VERSION
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
RUN=${BERTH_K8S_RUN:-/run/berth-k8s}
NODE_IF=berthk8s0
PEER_IF=berthk8s1
NODE_IP=10.250.7.1
POD_CIDR=10.250.8.0/24
SERVICE_CIDR=10.250.9.0/24
ETCD_PORT=23790
API_PORT=16443
PG_PORT=25432
SUPERVISOR_IMAGE=berth/supervisor:latest
IMAGE=${BERTH_K8S_IMAGE:-berth/test:latest}

log() { printf 'test-k8s: %s\n' "$*" >&2; }

need_packages() {
	missing=""
	command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"
	command -v containerd >/dev/null 2>&1 || missing="$missing containerd"
	[ -x /usr/lib/cni/bridge ] || missing="$missing containernetworking-plugins"
	command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
	command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
	if [ -n "$missing" ]; then
		log "installing$missing"
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >&2
	fi
}

build() {
	if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kubelet" ] && [ -x "$BIN/kube-scheduler" ] &&
		[ -x "$BIN/kube-controller-manager" ] && [ -x "$BIN/runc-oom0" ] && [ -x "$BIN/pause" ]; then
		log "using cached binaries in $BIN"
		return
	fi
	src=$CACHE/src-$K8S_VERSION
	mkdir -p "$src" "$BIN"
	log "building Kubernetes $K8S_VERSION into $BIN (about 14 minutes cold)"
	{
		echo "module berth.local/k8sbuild"
		echo
		echo "go 1.24"
		echo
		echo "require k8s.io/kubernetes $K8S_VERSION"
		echo
		for m in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go \
			cloud-provider cluster-bootstrap code-generator component-base component-helpers \
			controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation \
			endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy \
			kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission \
			sample-apiserver sample-cli-plugin sample-controller; do
			echo "replace k8s.io/$m => k8s.io/$m $STAGING_VERSION"
		done
	} >"$src/go.mod"
	cat >"$src/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
EOF
	(
		cd "$src"
		export GOFLAGS=-mod=mod CGO_ENABLED=0
		go mod tidy -e >&2 || true
		# Each binary is built only when it is missing, so a cache from
		# before a binary was added builds just that one.
		for cmd in kube-apiserver kube-scheduler kube-controller-manager kubelet; do
			[ -x "$BIN/$cmd" ] && continue
			log "go build $cmd"
			go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION" \
				-o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd" >&2
			mv "$BIN/$cmd.tmp" "$BIN/$cmd"
		done
	)
	CGO_ENABLED=0 go build -o "$BIN/runc-oom0" "$HERE/runc-oom0"
	CGO_ENABLED=0 go build -o "$BIN/pause" "$HERE/pause"
	log "built"
}

cleanup() {
	set +e
	# Containers outlive containerd in their shims: end the shims our
	# containerd started (found by its socket) and what runs under them.
	for d in /proc/[0-9]*; do
		{ tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null | grep -q -- "containerd-shim.*-address $RUN/containerd.sock" || continue
		shim=${d#/proc/}
		for child in $(cat "$d"/task/*/children 2>/dev/null); do kill -9 "$child" 2>/dev/null; done
		kill -9 "$shim" 2>/dev/null
	done
	# PostgreSQL stops at once on SIGINT (a fast shutdown).
	[ -f "$RUN/postgres.pid" ] && kill -INT "$(cat "$RUN/postgres.pid")" 2>/dev/null
	for f in "$RUN"/*.pid; do
		[ -f "$f" ] || continue
		pid=$(cat "$f")
		kill "$pid" 2>/dev/null
		for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
		kill -9 "$pid" 2>/dev/null
		rm -f "$f"
	done
	# Sandboxes the kubelet left: stop their containers through containerd's
	# shims (children of our containerd, gone with it) and unmount what
	# containerd mounted under its root.
	if [ -d "$RUN" ]; then
		grep " $RUN/" /proc/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m"; done
	fi
	while iptables -D FORWARD -i cni-berthk8s -o cni-berthk8s -m comment --comment berth-k8s -j ACCEPT 2>/dev/null; do :; done
	ip link del "$NODE_IF" 2>/dev/null
	ip link del cni-berthk8s 2>/dev/null
	rm -rf "$RUN"
}

wait_for() { # what, tries, command...
	what=$1 tries=$2
	shift 2
	i=0
	until "$@" >/dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -ge "$tries" ]; then
			log "$what did not come up; its log:"
			tail -n 40 "$RUN/$what.log" >&2 || true
			return 1
		fi
		sleep 0.5
	done
}

up() {
	need_packages
	build
	docker image inspect "$IMAGE" >/dev/null 2>&1 || { log "image $IMAGE missing: run images/build.sh"; exit 1; }
	cleanup
	mkdir -p "$RUN"/pki "$RUN"/cni "$RUN"/etcd "$RUN"/kubelet "$RUN"/containerd "$RUN"/pods
	pki=$RUN/pki

	# The node's address: a veth pair of our own (no dummy device here).
	ip link add "$NODE_IF" type veth peer name "$PEER_IF"
	ip addr add "$NODE_IP/30" dev "$NODE_IF"
	ip link set "$NODE_IF" up
	ip link set "$PEER_IF" up
	# Pod to pod over the bridge (the supervisor to a computer): with
	# bridge netfilter on, bridged packets cross the FORWARD chain, whose
	# policy Docker sets to DROP.
	iptables -I FORWARD -i cni-berthk8s -o cni-berthk8s -m comment --comment berth-k8s -j ACCEPT

	# A CA, the API server's certificate, and the service-account key.
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=berth-k8s-ca \
		-keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
		-keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1,IP:%s,IP:10.250.9.1,DNS:kubernetes,DNS:kubernetes.default\n' "$NODE_IP" >"$pki/san.ext"
	openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 2 -extfile "$pki/san.ext" -out "$pki/apiserver.crt" 2>/dev/null
	openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
	admin_token=$(openssl rand -hex 24)
	node_token=$(openssl rand -hex 24)
	printf '%s,admin,admin,system:masters\n%s,system:node:berth-node,kubelet,system:nodes\n' \
		"$admin_token" "$node_token" >"$pki/tokens.csv"

	log "starting etcd"
	setsid etcd --data-dir "$RUN/etcd" --name berth-k8s \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls http://127.0.0.1:23791 --initial-advertise-peer-urls http://127.0.0.1:23791 \
		--initial-cluster berth-k8s=http://127.0.0.1:23791 >"$RUN/etcd.log" 2>&1 &
	echo $! >"$RUN/etcd.pid"

	log "starting kube-apiserver"
	setsid "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address "$NODE_IP" --secure-port "$API_PORT" --advertise-address "$NODE_IP" \
		--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
		--client-ca-file "$pki/ca.crt" --token-auth-file "$pki/tokens.csv" \
		--authorization-mode Node,RBAC --anonymous-auth=false \
		--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
		--service-account-issuer https://kubernetes.default.svc \
		--service-cluster-ip-range "$SERVICE_CIDR" \
		--kubelet-preferred-address-types InternalIP \
		--allow-privileged=false >"$RUN/kube-apiserver.log" 2>&1 &
	echo $! >"$RUN/kube-apiserver.pid"

	cat >"$RUN/admin.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: berth
  cluster: {server: "https://$NODE_IP:$API_PORT", certificate-authority: "$pki/ca.crt"}
users:
- name: admin
  user: {token: "$admin_token"}
- name: node
  user: {token: "$node_token"}
contexts:
- name: admin
  context: {cluster: berth, user: admin}
- name: node
  context: {cluster: berth, user: node}
current-context: admin
EOF
	sed 's/current-context: admin/current-context: node/' "$RUN/admin.kubeconfig" >"$RUN/node.kubeconfig"
	wait_for kube-apiserver 240 curl -sf --cacert "$pki/ca.crt" -H "Authorization: Bearer $admin_token" \
		"https://$NODE_IP:$API_PORT/readyz"

	log "starting kube-scheduler"
	setsid "$BIN/kube-scheduler" --kubeconfig "$RUN/admin.kubeconfig" --leader-elect=false \
		--bind-address 127.0.0.1 --secure-port 0 >"$RUN/kube-scheduler.log" 2>&1 &
	echo $! >"$RUN/kube-scheduler.pid"

	# The controllers: Deployments and StatefulSets make pods, namespaces
	# and service accounts are filled in, garbage is collected.
	log "starting kube-controller-manager"
	setsid "$BIN/kube-controller-manager" --kubeconfig "$RUN/admin.kubeconfig" --leader-elect=false \
		--bind-address 127.0.0.1 --secure-port 0 \
		--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
		--use-service-account-credentials=false >"$RUN/kube-controller-manager.log" 2>&1 &
	echo $! >"$RUN/kube-controller-manager.pid"

	# containerd of our own (its own root, state and socket; Docker's
	# containerd is left alone), with the bridge CNI and a runc wrapper
	# that sets oomScoreAdj to 0 (root lacks CAP_SYS_RESOURCE here).
	cat >"$RUN/cni/10-berth.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "berthk8s", "plugins": [
 {"type": "bridge", "bridge": "cni-berthk8s", "isGateway": true, "isDefaultGateway": true, "ipMasq": false,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "dataDir": "$RUN/cni/ipam"}},
 {"type": "loopback"}]}
EOF
	cat >"$RUN/containerd.toml" <<EOF
version = 2
root = "$RUN/containerd/root"
state = "$RUN/containerd/state"
[grpc]
  address = "$RUN/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "berth.local/pause:k8s"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$RUN/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$BIN/runc-oom0"
        SystemdCgroup = false
EOF
	log "starting containerd"
	setsid containerd --config "$RUN/containerd.toml" >"$RUN/containerd.log" 2>&1 &
	echo $! >"$RUN/containerd.pid"
	wait_for containerd 60 ctr -a "$RUN/containerd.sock" version

	# Images: a locally built pause, and the computer image from Docker.
	pausectx=$RUN/pausectx
	mkdir -p "$pausectx"
	cp "$BIN/pause" "$pausectx/pause"
	printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$pausectx/Dockerfile"
	docker build -q -t berth.local/pause:k8s "$pausectx" >/dev/null
	docker save berth.local/pause:k8s | ctr -a "$RUN/containerd.sock" -n k8s.io images import - >/dev/null
	docker save "$IMAGE" | ctr -a "$RUN/containerd.sock" -n k8s.io images import - >/dev/null
	if docker image inspect "$SUPERVISOR_IMAGE" >/dev/null 2>&1; then
		docker save "$SUPERVISOR_IMAGE" | ctr -a "$RUN/containerd.sock" -n k8s.io images import - >/dev/null
	fi
	docker rmi berth.local/pause:k8s >/dev/null

	cat >"$RUN/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$RUN/containerd.sock
failSwapOn: false
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
oomScoreAdj: 0
enforceNodeAllocatable: []
cgroupsPerQOS: false
localStorageCapacityIsolation: true
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podCIDR: $POD_CIDR
maxPods: 20
serializeImagePulls: false
resolvConf: ""
featureGates:
  # With cgroupsPerQOS off, the in-place resize path of kubelet 1.34
  # dereferences a pod cgroup manager that does not exist.
  InPlacePodVerticalScaling: false
EOF
	log "starting kubelet"
	setsid "$BIN/kubelet" --config "$RUN/kubelet.yaml" --kubeconfig "$RUN/node.kubeconfig" \
		--hostname-override berth-node --node-ip "$NODE_IP" --root-dir "$RUN/kubelet" \
		--cert-dir "$RUN/pki/kubelet" >"$RUN/kubelet.log" 2>&1 &
	echo $! >"$RUN/kubelet.pid"
	wait_for kubelet 240 sh -c "kubectl --kubeconfig '$RUN/admin.kubeconfig' get node berth-node -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -q True"

	# The node is ready: lift the taint it registered with now rather than
	# wait for the node controller.
	kubectl --kubeconfig "$RUN/admin.kubeconfig" taint nodes berth-node node.kubernetes.io/not-ready- >/dev/null 2>&1 || true
	kubectl --kubeconfig "$RUN/admin.kubeconfig" create namespace berth-test >/dev/null
	# Pods are admitted once their namespace has its default service account.
	wait_for kube-controller-manager 120 kubectl --kubeconfig "$RUN/admin.kubeconfig" -n berth-test get serviceaccount default
	cat >"$RUN/env" <<EOF
BERTH_K8S_API_URL=https://$NODE_IP:$API_PORT
BERTH_K8S_TOKEN=$admin_token
BERTH_K8S_CA_FILE=$pki/ca.crt
BERTH_K8S_NAMESPACE=berth-test
BERTH_K8S_IMAGE=$IMAGE
BERTH_K8S_KUBECONFIG=$RUN/admin.kubeconfig
EOF
	log "cluster ready; settings in $RUN/env"
}

# start_postgres runs PostgreSQL (as nobody, which it needs instead of root)
# on the node's address, where pods reach it, with a password, and adds
# its URL to the env file as BERTH_K8S_PG_URL.
start_postgres() {
	pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ]; then
		log "PostgreSQL is missing: apt-get install -y postgresql"
		exit 1
	fi
	as_nobody="setpriv --reuid=nobody --regid=nogroup --clear-groups"
	pg=$RUN/postgres
	mkdir -p "$pg"
	openssl rand -hex 16 >"$pg/pw"
	chown -R nobody:nogroup "$pg"
	chmod 700 "$pg"
	log "starting PostgreSQL on $NODE_IP:$PG_PORT"
	$as_nobody "$pgbin/initdb" -D "$pg/data" -U berth --pwfile "$pg/pw" -E UTF8 \
		--auth-local=trust --auth-host=scram-sha-256 >"$RUN/initdb.log" 2>&1
	echo "host all all $POD_CIDR scram-sha-256" >>"$pg/data/pg_hba.conf"
	setsid $as_nobody "$pgbin/postgres" -D "$pg/data" -p "$PG_PORT" -c listen_addresses="$NODE_IP" \
		-c unix_socket_directories="$pg" -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
		>"$RUN/postgres.log" 2>&1 &
	echo $! >"$RUN/postgres.pid"
	wait_for postgres 120 $as_nobody "$pgbin/pg_isready" -q -h "$pg" -p "$PG_PORT"
	$as_nobody "$pgbin/createdb" -h "$pg" -p "$PG_PORT" -U berth berth
	echo "BERTH_K8S_PG_URL=postgres://berth:$(cat "$pg/pw")@$NODE_IP:$PG_PORT/berth?sslmode=disable" >>"$RUN/env"
}

case ${1:-test} in
build)
	build
	;;
up)
	up
	cat "$RUN/env"
	;;
down)
	cleanup
	;;
test)
	trap cleanup EXIT INT TERM
	start=$(date +%s)
	# For the chart: helm (cached) and the supervisor's image, which up
	# imports into the node (both rebuilt only when their inputs changed).
	BERTH_HELM=$("$REPO/packaging/helm/build.sh")
	export BERTH_HELM
	"$REPO/images/build.sh" supervisor >&2
	up
	start_postgres
	set -a
	. "$RUN/env"
	set +a
	log "running the kubernetes provider's tests against the cluster"
	cd "$REPO"
	go test -count=1 -p 1 -timeout 10m -run 'Cluster' -v ./providers/kubernetes/
	t=$(date +%s)
	log "installing the Helm chart and using a computer through its supervisors"
	go test -count=1 -timeout 8m -run 'TestClusterInstall' -v ./packaging/helm/
	log "chart install test in $(($(date +%s) - t)) s; done in $(($(date +%s) - start)) s"
	;;
*)
	echo "usage: $0 [build|up|test|down]" >&2
	exit 2
	;;
esac
