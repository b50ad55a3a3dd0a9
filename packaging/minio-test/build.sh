#!/bin/sh
# Build (or reuse) the MinIO server the object store tests run against, and
# print its path.
#
#   packaging/minio-test/build.sh
#
# MinIO is built from the Go module proxy at a pinned pseudo-version (MinIO
# publishes no semantic versions there), so the cache key is stable:
# $BERTH_MINIO_CACHE (default ~/.cache/berth-minio)/<version>/minio. About
# two minutes cold on an idle 2-core machine, instant when warm. The tests
# (internal/miniotest) find the binary at that path, or at $BERTH_MINIO.
set -eu

MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
CACHE=${BERTH_MINIO_CACHE:-$HOME/.cache/berth-minio}
DIR=$CACHE/$MINIO_VERSION
BIN=$DIR/minio

log() { printf 'minio-test: %s\n' "$*" >&2; }

if [ -x "$BIN" ]; then
	log "using cached $BIN"
	echo "$BIN"
	exit 0
fi

command -v go >/dev/null 2>&1 || { log "Go is not installed: it builds MinIO from the module proxy"; exit 1; }
mkdir -p "$DIR"
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log "building MinIO $MINIO_VERSION into $BIN (about two minutes cold)"
start=$(date +%s)
# Outside any module, so the repository's go.mod plays no part.
(cd "$tmp" && CGO_ENABLED=0 GOFLAGS=-trimpath GOBIN="$tmp" nice -n 10 go install "github.com/minio/minio@$MINIO_VERSION")
mv "$tmp/minio" "$BIN"
log "built in $(( $(date +%s) - start )) s"
echo "$BIN"
