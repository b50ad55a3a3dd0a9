#!/usr/bin/env bash
# build.sh makes the berth Debian package with nfpm: /usr/bin/berth, the
# systemd units of the supervisor, the relay and the lending agent (system
# and user), /etc/berth/*.env and the scripts that make the berth user and
# keep /var/lib/berth until a purge.
#
# Usage: packaging/deb/build.sh [ARCH]    (amd64 or arm64; default: this machine's)
#
# Writes DIST/berth_<version>_<arch>.deb and prints its path. nfpm is built
# once from the Go module proxy (NFPM_VERSION) into ~/.cache/berth-nfpm.
#
# Environment:
#   VERSION       the version (default: git describe); a Debian version is
#                 made of it: v1.2.3 -> 1.2.3, abc1234-dirty -> 0.0.0+git.abc1234.dirty
#   BERTH_BIN     a linux berth binary to package (default: packaging/dist/build.sh
#                 builds DIST/berth-linux-ARCH)
#   DIST          output folder (default: dist at the top of the checkout)
#   NFPM_VERSION  default v2.45.2
#   NFPM_CONFIG   another package's nfpm configuration with the same three
#                 fields (packaging/companion/build.sh uses it; BERTH_BIN is
#                 then that package's binary and must be given)
#   DEB_NAME      that package's name, for its file name (default berth)
set -euo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
GO=${GO:-go}
DIST=${DIST:-$ROOT/dist}
NFPM_VERSION=${NFPM_VERSION:-v2.45.2}
VERSION=${VERSION:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)}
CACHE=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/berth-nfpm/$NFPM_VERSION

die() { printf 'deb: %s\n' "$*" >&2; exit 1; }

case ${1:-} in -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;; esac
ARCH=${1:-$("$GO" env GOARCH)}
case $ARCH in amd64 | arm64) ;; *) die "unsupported architecture $ARCH (amd64 and arm64 are)" ;; esac

# debian_version maps a git describe to a Debian version (which must start
# with a digit and sort upwards).
debian_version() {
	local v=${1#v}
	v=${v//-/.}
	[[ $v =~ ^[0-9] ]] || v=0.0.0+git.$v
	printf '%s\n' "$v"
}
DEB_VERSION=$(debian_version "$VERSION")
[[ $DEB_VERSION =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || die "VERSION=$VERSION does not make a Debian version ($DEB_VERSION)"

if [ ! -x "$CACHE/nfpm" ]; then
	echo "deb: building nfpm $NFPM_VERSION from the Go module proxy (once) into $CACHE" >&2
	mkdir -p "$CACHE"
	GOBIN=$CACHE "$GO" install "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION" ||
		die "building nfpm $NFPM_VERSION failed"
fi

NFPM_CONFIG=${NFPM_CONFIG:-$HERE/nfpm.yaml}
DEB_NAME=${DEB_NAME:-berth}
BIN=${BERTH_BIN:-}
if [ -z "$BIN" ] && [ "$DEB_NAME" != berth ]; then
	die "BERTH_BIN: give the $DEB_NAME binary to package"
fi
if [ -z "$BIN" ]; then
	VERSION=$VERSION DIST=$DIST GO=$GO "$ROOT/packaging/dist/build.sh" "linux/$ARCH"
	BIN=$DIST/berth-linux-$ARCH
fi
[ -f "$BIN" ] || die "BERTH_BIN=$BIN does not exist"
BIN=$(cd "$(dirname "$BIN")" && pwd -P)/$(basename "$BIN")

mkdir -p "$DIST"
out=$DIST/${DEB_NAME}_${DEB_VERSION}_$ARCH.deb
conf=$(mktemp "$DIST/.nfpm.XXXXXX.yaml")
trap 'rm -f "$conf" "$out.tmp"' EXIT
sed -e "s|\${BERTH_DEB_ARCH}|$ARCH|g" -e "s|\${BERTH_DEB_VERSION}|$DEB_VERSION|g" \
	-e "s|\${BERTH_DEB_BIN}|$BIN|g" "$NFPM_CONFIG" >"$conf"
(cd "$(dirname "$NFPM_CONFIG")" && "$CACHE/nfpm" package --config "$conf" --packager deb --target "$out.tmp" >&2) ||
	die "nfpm failed"
mv "$out.tmp" "$out"
printf '%s\n' "$out"
