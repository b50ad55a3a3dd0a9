#!/usr/bin/env bash
# build.sh cross-compiles the release binaries of berth (CGO off, -trimpath,
# the version stamped as `make build` does) into one folder, with their
# SHA-256 sums, then checks that the binary for this machine prints the
# version it was given.
#
#   dist/berth-linux-amd64   dist/berth-linux-arm64
#   dist/berth-darwin-amd64  dist/berth-darwin-arm64
#   dist/berth-windows-amd64.exe
#   dist/SHA256SUMS          (check with: cd dist && sha256sum -c SHA256SUMS)
#
# Usage: packaging/dist/build.sh [OS/ARCH...]   (default: all five above)
#
# Environment:
#   VERSION    the version to stamp (default: git describe --tags --always --dirty)
#   DIST       output folder (default: dist at the top of the checkout)
#   GO         the go command (default: go)
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
readonly ROOT
GO=${GO:-go}
DIST=${DIST:-$ROOT/dist}
VERSION=${VERSION:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)}
readonly ALL=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64)

die() { printf 'dist: %s\n' "$*" >&2; exit 1; }
since() { awk -v s="$1" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", e - s }'; }

case ${1:-} in -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;; esac
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
for t in "${targets[@]}"; do
	[[ " ${ALL[*]} " == *" $t "* ]] || die "unknown target $t (one of: ${ALL[*]})"
done
[[ $VERSION =~ ^[A-Za-z0-9][A-Za-z0-9._+~-]*$ ]] || die "VERSION=$VERSION: letters, digits and . _ + ~ - only"

mkdir -p "$DIST"
start=$EPOCHREALTIME
files=()
for t in "${targets[@]}"; do
	os=${t%/*} arch=${t#*/}
	out=berth-$os-$arch
	[ "$os" = windows ] && out+=.exe
	t0=$EPOCHREALTIME
	(cd "$ROOT" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath \
		-ldflags "-s -w -X main.version=$VERSION" -o "$DIST/$out.tmp" ./cmd/berth) ||
		die "building $t failed"
	mv "$DIST/$out.tmp" "$DIST/$out"
	files+=("$out")
	printf '%-30s %8s  %s\n' "$out" "$(since "$t0")" "$(du -h "$DIST/$out" | cut -f1)" >&2
done

# SHA256SUMS lists every binary in the folder, those of earlier runs too.
(cd "$DIST" && sha256sum berth-* | grep -v '\.tmp$' >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)

# The binary for this machine must say the version it was stamped with.
host=$("$GO" env GOHOSTOS)-$("$GO" env GOHOSTARCH)
if [ -x "$DIST/berth-$host" ] && [[ " ${files[*]} " == *" berth-$host "* ]]; then
	got=$("$DIST/berth-$host" version)
	[[ $got == "berth $VERSION "* ]] || die "berth-$host version says '$got', not berth $VERSION"
	printf '%s\n' "$got" >&2
fi
printf 'dist: %d binaries of berth %s in %s (%s)\n' "${#files[@]}" "$VERSION" "$DIST" "$(since "$start")" >&2
