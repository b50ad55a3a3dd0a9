#!/usr/bin/env bash
# build.sh builds the companion app, berth-companion, for the systems a
# lender downloads it for:
#
#   packaging/companion/build.sh deb       DIST/berth-companion_<version>_<arch>.deb
#                                          (this machine's architecture; cgo)
#   packaging/companion/build.sh windows   DIST/berth-companion-windows-amd64.exe
#                                          (cgo with Debian's mingw-w64 toolchain)
#
# Each prints the path it wrote. macOS builds need Apple's toolchain and are
# made on a Mac (docs/install.md). The Linux tar.xz is `make app-package`.
#
# Environment:
#   VERSION        the version (default: git describe)
#   DIST           output folder (default: dist at the top of the checkout)
#   COMPANION_BIN  a linux berth-companion to package instead of building one
set -euo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
GO=${GO:-go}
DIST=${DIST:-$ROOT/dist}
VERSION=${VERSION:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)}
LDFLAGS="-s -w -X main.version=$VERSION"

die() { printf 'companion: %s\n' "$*" >&2; exit 1; }

# need names the Debian packages missing for a build, or installs them as root.
need() {
	local missing=() p
	for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
	[ ${#missing[@]} -eq 0 ] && return
	if [ "$(id -u)" != 0 ]; then
		die "this build needs: ${missing[*]} (apt-get install ${missing[*]} as root)"
	fi
	echo "companion: installing ${missing[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

mkdir -p "$DIST"
case ${1:-} in
deb)
	ARCH=$("$GO" env GOARCH)
	BIN=${COMPANION_BIN:-}
	if [ -z "$BIN" ]; then
		"$ROOT/packaging/dev/app-deps.sh" >&2
		BIN=$DIST/berth-companion-linux-$ARCH
		(cd "$ROOT" && CGO_ENABLED=1 "$GO" build -trimpath -ldflags "$LDFLAGS" -o "$BIN" ./cmd/berth-companion)
	fi
	NFPM_CONFIG=$HERE/nfpm.yaml DEB_NAME=berth-companion BERTH_BIN=$BIN VERSION=$VERSION DIST=$DIST GO=$GO \
		"$ROOT/packaging/deb/build.sh" "$ARCH"
	;;
windows)
	need gcc-mingw-w64-x86-64-posix
	out=$DIST/berth-companion-windows-amd64.exe
	# -H windowsgui: no console window; static libgcc and winpthread, so
	# the .exe needs only the DLLs every Windows has.
	(cd "$ROOT" && CGO_ENABLED=1 GOOS=windows GOARCH=amd64 CC=x86_64-w64-mingw32-gcc-posix \
		CGO_CFLAGS="-O1 -g0" CGO_LDFLAGS="-static-libgcc -static" \
		"$GO" build -trimpath -ldflags "$LDFLAGS -H windowsgui" -o "$out.tmp" ./cmd/berth-companion)
	mv "$out.tmp" "$out"
	printf '%s\n' "$out"
	;;
*)
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
	exit 2
	;;
esac
