#!/usr/bin/env bash
# Makes sure the companion app (fyne, cgo) can build: a C compiler and the
# GL and X11 headers. Installs the Debian packages as root when they are
# missing (as docker-up.sh does for Docker), and otherwise says exactly what
# to install.
set -euo pipefail

pkgs=(gcc libc6-dev pkg-config libgl1-mesa-dev libx11-dev libxcursor-dev libxrandr-dev
	libxinerama-dev libxi-dev libxxf86vm-dev)

if ! command -v dpkg >/dev/null 2>&1; then
	# Not Debian or Ubuntu: check for the compiler and the headers themselves.
	missing=()
	command -v "${CC:-gcc}" >/dev/null 2>&1 || missing+=("a C compiler (${CC:-gcc})")
	command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
	if command -v pkg-config >/dev/null 2>&1; then
		for m in gl x11 xcursor xrandr xinerama xi xxf86vm; do
			pkg-config --exists "$m" || missing+=("the $m headers")
		done
	fi
	if [ ${#missing[@]} -gt 0 ]; then
		echo "app-deps: the companion app needs cgo and the GL/X11 headers; missing: ${missing[*]}" >&2
		echo "          (on Fedora: dnf install gcc pkgconf libGL-devel libX11-devel libXcursor-devel libXrandr-devel libXinerama-devel libXi-devel libXxf86vm-devel;" >&2
		echo "           on macOS: xcode-select --install)" >&2
		exit 1
	fi
	exit 0
fi

need=()
for p in "${pkgs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "app-deps: installing ${need[*]} with apt-get" >&2
	export DEBIAN_FRONTEND=noninteractive
	if apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
		exit 0
	fi
	echo "app-deps: apt-get could not install the companion app's packages; install them with:" >&2
	echo "          apt-get install -y --no-install-recommends ${need[*]}" >&2
	exit 1
fi
echo "app-deps: the companion app needs cgo and the GL/X11 headers. Install them with:" >&2
echo "          sudo apt-get install -y --no-install-recommends ${need[*]}" >&2
exit 1
