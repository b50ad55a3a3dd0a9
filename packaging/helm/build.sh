#!/bin/sh
# Build (or reuse) the helm CLI that lints, renders and installs the chart
# in packaging/helm/berth, and print its path.
#
#   packaging/helm/build.sh
#
# helm is built from the Go module proxy at a pinned version into
# $BERTH_HELM_CACHE (default ~/.cache/berth-helm)/<version>/helm: about a
# minute cold on an idle 2-core machine, instant when warm. The chart's
# tests (packaging/helm) and make test-k8s find it at that path, or at
# $BERTH_HELM.
set -eu

HELM_VERSION=v3.22.0
CACHE=${BERTH_HELM_CACHE:-$HOME/.cache/berth-helm}
DIR=$CACHE/$HELM_VERSION
BIN=$DIR/helm

log() { printf 'helm: %s\n' "$*" >&2; }

if [ -n "${BERTH_HELM:-}" ]; then
	[ -x "$BERTH_HELM" ] || { log "BERTH_HELM=$BERTH_HELM is not an executable file"; exit 1; }
	echo "$BERTH_HELM"
	exit 0
fi
if [ -x "$BIN" ]; then
	log "using cached $BIN"
	echo "$BIN"
	exit 0
fi

command -v go >/dev/null 2>&1 || { log "Go is not installed: it builds helm from the module proxy"; exit 1; }
mkdir -p "$DIR"
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log "building helm $HELM_VERSION into $BIN (about a minute cold)"
start=$(date +%s)
# Outside any module, so the repository's go.mod plays no part.
(cd "$tmp" && CGO_ENABLED=0 GOFLAGS=-trimpath GOBIN="$tmp" nice -n 10 go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
mv "$tmp/helm" "$BIN"
log "built in $(( $(date +%s) - start )) s"
echo "$BIN"
