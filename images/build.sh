#!/usr/bin/env bash
# build.sh builds Berth's computer images from local files and Debian
# packages only; no image registry is used.
#
#   berth/test:latest           FROM scratch: busybox and computerd (seconds)
#   berth/debian-base:bookworm  debootstrap minbase, trimmed, imported
#   berth/headless:latest       the base plus shell tools, git, Python,
#                               Node.js, Chromium, agent-browser, computerd
#   berth/desktop:latest        headless plus Xvfb, openbox, at-spi2, xdotool,
#                               mousepad, xterm and ffmpeg (live view)
#   berth/supervisor:latest     the base plus berth, running berth supervisor
#                               as a non-root user (not part of all)
#   berth/postgres:15           the base plus Debian's PostgreSQL 15, running
#                               as the postgres user, the cluster made on the
#                               first start (not part of all)
#
# Usage: images/build.sh [test|headless|desktop|supervisor|postgres|all]
#        (default: all; several targets may be named)
#
# Every image is labelled dev.berth.inputs=<sha256 of what it is built from:
# its build context (Dockerfile, files, computerd) and base image id, or for
# the base its suite, architecture, mirrors and script>. When the tag already
# names an image with the same label, its build is skipped.
#
# Environment:
#   COMPUTERD_BIN                use this computerd binary instead of building
#                                ./cmd/computerd
#   BERTH_BIN                    use this berth binary for berth/supervisor
#                                instead of building ./cmd/berth
#   VERSION                      the version stamped into that berth (default:
#                                git describe, as make build does)
#   BERTH_DEBIAN_MIRROR          Debian mirror for the base (default: the one
#                                in this machine's apt sources)
#   BERTH_DEBIAN_SECURITY        Debian security mirror, or "none" (default:
#                                the one in this machine's apt sources)
#   BERTH_AGENT_BROWSER_VERSION  agent-browser npm version (default: the one
#                                pinned, with its integrity, in
#                                images/headless/agent-browser.pin)
#   BERTH_BUSYBOX                static busybox for berth/test (default: the
#                                busybox-static package's /bin/busybox)
#   BERTH_IMAGES_CACHE           work folder (default ~/.cache/berth/images)
#   BERTH_IMAGES_FORCE=1         rebuild even when the inputs are unchanged,
#                                without Docker's layer cache
#   BERTH_IMAGES_VERBOSE=1       show the full docker build output
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
readonly ROOT
readonly IMAGES=$ROOT/images
readonly SUITE=bookworm
readonly LABEL=dev.berth.inputs
readonly TEST_TAG=berth/test:latest
readonly BASE_TAG=berth/debian-base:$SUITE
readonly HEADLESS_TAG=berth/headless:latest
readonly DESKTOP_TAG=berth/desktop:latest
readonly SUPERVISOR_TAG=berth/supervisor:latest
readonly POSTGRES_TAG=berth/postgres:15

CACHE=${BERTH_IMAGES_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/berth/images}
FORCE=${BERTH_IMAGES_FORCE:-0}
VERBOSE=${BERTH_IMAGES_VERBOSE:-0}
SUMMARY=()
CLEANUP=()

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'build.sh: %s\n' "$*" >&2; exit 1; }

usage() {
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
	exit "${1:-2}"
}

cleanup() {
	local d m
	for d in "${CLEANUP[@]}"; do
		[ -d "$d" ] || continue
		# A failed debootstrap can leave proc or sys mounted inside its target.
		awk -v d="$d/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts 2>/dev/null |
			sort -r | while read -r m; do umount -l "$m" || true; done
		rm -rf --one-file-system "$d"
	done
}
trap cleanup EXIT

# since START prints the seconds elapsed since START (an $EPOCHREALTIME).
since() { awk -v s="$1" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", e - s }'; }

sha256() { sha256sum | cut -d' ' -f1; }

# tmpdir VAR NAME makes a work folder, removed at exit, and sets VAR to it.
tmpdir() {
	local d
	mkdir -p "$CACHE/tmp"
	d=$(mktemp -d "$CACHE/tmp/$2.XXXXXX")
	CLEANUP+=("$d")
	printf -v "$1" '%s' "$d"
}

# install_pkg PKG installs a Debian package on this machine, when allowed.
install_pkg() {
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		die "$1 is needed: install the Debian package $1"
	fi
	log "installing $1 on this machine"
	apt-get install -y --no-install-recommends "$1" >/dev/null 2>&1 ||
		{ apt-get update >/dev/null && apt-get install -y --no-install-recommends "$1" >/dev/null; } ||
		die "could not install $1"
}

# arch prints the Debian (and Go) name of this machine's architecture.
arch() {
	local a
	if command -v dpkg >/dev/null; then
		a=$(dpkg --print-architecture)
	else
		case $(uname -m) in
		x86_64 | amd64) a=amd64 ;;
		aarch64 | arm64) a=arm64 ;;
		*) a=$(uname -m) ;;
		esac
	fi
	case $a in
	amd64 | arm64) printf '%s\n' "$a" ;;
	*) die "unsupported architecture $a (amd64 and arm64 are)" ;;
	esac
}

check_docker() {
	command -v docker >/dev/null || die "docker is not installed (apt-get install docker.io)"
	local server
	server=$(docker version --format '{{.Server.Arch}}' 2>/dev/null) ||
		die "the Docker engine does not answer; start it with: setsid dockerd >/tmp/dockerd.log 2>&1 &"
	[ "$server" = "$ARCH" ] ||
		die "the Docker engine runs $server but this machine is $ARCH: images are built for the machine's own architecture"
}

# elf_check FILE WHAT fails unless FILE is a static ELF for this architecture
# (when readelf is there to tell).
elf_check() {
	command -v readelf >/dev/null || return 0
	local machine want
	machine=$(readelf -hW "$1" 2>/dev/null | awk -F: '/Machine:/ { sub(/^[ \t]+/, "", $2); print $2 }')
	[ -n "$machine" ] || die "$2 ($1) is not an ELF binary"
	case $ARCH in amd64) want='X86-64' ;; arm64) want='AArch64' ;; esac
	case $machine in *"$want"*) ;; *) die "$2 ($1) is built for '$machine', not $ARCH" ;; esac
	if readelf -lW "$1" | grep -q 'program interpreter'; then
		die "$2 ($1) is dynamically linked; it must be static"
	fi
}

# put SRC DST copies a file into a build context with a fixed mode, so that
# the context (and its hash) does not depend on the checkout's umask.
put() {
	local mode=0644
	[ -x "$1" ] && mode=0755
	install -D -m "$mode" "$1" "$2"
}

# put_tree SRC DST copies a folder into a build context, modes fixed the
# same way (folders and executables 0755, other files 0644).
put_tree() {
	mkdir -p "$2"
	cp -R "$1/." "$2/"
	chmod -R u=rwX,go=rX "$2"
}

# context_hash DIR prints a hash of a build context: every path, type, mode
# and file content.
context_hash() {
	(
		cd "$1"
		find . -printf '%y %m %p\n' | sort
		find . -type f -print0 | sort -z | xargs -0 -r sha256sum
	) | sha256
}

image_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

image_size() {
	docker image inspect --format '{{.Size}}' "$1" | awk '{ printf "%.0f MB", $1 / 1e6 }'
}

# up_to_date TAG HASH is true when TAG is an image built from inputs HASH.
# (Only the tag is asked: labels are inherited, so an intermediate image of
# a later build carries its base's label too.)
up_to_date() {
	[ "$FORCE" = 1 ] && return 1
	[ "$(docker image inspect --format "{{index .Config.Labels \"$LABEL\"}}" "$1" 2>/dev/null)" = "$2" ]
}

# retire OLD_ID TAG removes the image TAG pointed at before a rebuild, when
# nothing else uses it any more.
retire() {
	[ -n "$1" ] && [ "$1" != "$(image_id "$2")" ] || return 0
	docker rmi "$1" >/dev/null 2>&1 || true
}

record() {
	SUMMARY+=("$(printf '%-28s %-8s %8s  %8s  %s' "$1" "$2" "$3" "$(image_size "$1")" "$(image_id "$1" | cut -c8-19)")")
}

# docker_build NAME TAG CONTEXT HASH [docker build args...]
docker_build() {
	local name=$1 tag=$2 ctx=$3 hash=$4
	shift 4
	local args=(--force-rm --tag "$tag" --label "$LABEL=$hash" --label "dev.berth.image=$name" "$@")
	[ "$FORCE" = 1 ] && args+=(--no-cache)
	local v
	for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
		[ -n "${!v:-}" ] && args+=(--build-arg "$v")
	done
	mkdir -p "$CACHE/logs"
	local logf=$CACHE/logs/$name.log
	if [ "$VERBOSE" = 1 ]; then
		docker build "${args[@]}" "$ctx" 2>&1 | tee "$logf"
	else
		docker build "${args[@]}" "$ctx" >"$logf" 2>&1 ||
			{ tail -n 40 "$logf" >&2; die "building $tag failed; full output in $logf"; }
		awk '/^Step [0-9]+\/[0-9]+ : / { print "    " substr($0, 1, 100) }' "$logf" >&2
	fi
}

# computerd prints the path of the computerd binary for the images, built
# for this architecture unless COMPUTERD_BIN names one.
computerd() {
	local bin
	if [ -n "${COMPUTERD_BIN:-}" ]; then
		[ -f "$COMPUTERD_BIN" ] || die "COMPUTERD_BIN=$COMPUTERD_BIN does not exist"
		bin=$(cd "$(dirname "$COMPUTERD_BIN")" && pwd -P)/$(basename "$COMPUTERD_BIN")
	else
		[ -d "$ROOT/cmd/computerd" ] ||
			die "no ./cmd/computerd package yet; set COMPUTERD_BIN to a static linux/$ARCH binary"
		command -v go >/dev/null || die "go is needed to build computerd (or set COMPUTERD_BIN)"
		bin=$CACHE/$ARCH/computerd
		local t=$EPOCHREALTIME
		(cd "$ROOT" && CGO_ENABLED=0 GOOS=linux GOARCH=$ARCH \
			go build -trimpath -ldflags='-s -w' -o "$bin" ./cmd/computerd) ||
			die "building computerd failed"
		log "computerd built for linux/$ARCH in $(since "$t")"
	fi
	elf_check "$bin" computerd
	printf '%s\n' "$bin"
}

# berth_bin prints the path of the berth binary for berth/supervisor, built
# for this architecture (static, the version stamped) unless BERTH_BIN names one.
berth_bin() {
	local bin
	if [ -n "${BERTH_BIN:-}" ]; then
		[ -f "$BERTH_BIN" ] || die "BERTH_BIN=$BERTH_BIN does not exist"
		bin=$(cd "$(dirname "$BERTH_BIN")" && pwd -P)/$(basename "$BERTH_BIN")
	else
		command -v go >/dev/null || die "go is needed to build berth (or set BERTH_BIN)"
		local version=${VERSION:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)}
		bin=$CACHE/$ARCH/berth
		local t=$EPOCHREALTIME
		(cd "$ROOT" && CGO_ENABLED=0 GOOS=linux GOARCH=$ARCH \
			go build -trimpath -ldflags="-s -w -X main.version=$version" -o "$bin" ./cmd/berth) ||
			die "building berth failed"
		log "berth $version built for linux/$ARCH in $(since "$t")"
	fi
	elf_check "$bin" berth
	printf '%s\n' "$bin"
}

# busybox prints the path of a static busybox on this machine.
busybox() {
	local b
	for b in ${BERTH_BUSYBOX:-} /bin/busybox /usr/bin/busybox; do
		if [ -x "$b" ] && ! { command -v readelf >/dev/null && readelf -lW "$b" | grep -q 'program interpreter'; }; then
			printf '%s\n' "$b"
			return
		fi
	done
	install_pkg busybox-static
	printf '/bin/busybox\n'
}

# build NAME runs build_NAME once per run of this script, however many
# targets need it.
declare -A BUILT=()
build() {
	[ -z "${BUILT[$1]:-}" ] || return 0
	BUILT[$1]=1
	"build_$1"
}

build_test() {
	local ctx hash old t
	tmpdir ctx test
	put "$IMAGES/test/Dockerfile" "$ctx/Dockerfile"
	put_tree "$IMAGES/test/rootfs" "$ctx/rootfs"
	local bb
	bb=$(busybox)
	elf_check "$bb" busybox
	install -m 0755 "$bb" "$ctx/busybox"
	install -m 0755 "$COMPUTERD" "$ctx/computerd"
	hash=$(printf 'image=test\ncontext=%s\n' "$(context_hash "$ctx")" | sha256)

	if up_to_date "$TEST_TAG" "$hash"; then
		log "$TEST_TAG is up to date (inputs ${hash:0:12}), skipped"
		record "$TEST_TAG" skipped -
		return
	fi
	log "building $TEST_TAG (inputs ${hash:0:12})"
	old=$(image_id "$TEST_TAG")
	t=$EPOCHREALTIME
	docker_build test "$TEST_TAG" "$ctx" "$hash"
	local took
	took=$(since "$t")
	retire "$old" "$TEST_TAG"
	log "built $TEST_TAG in $took ($(image_size "$TEST_TAG"))"
	record "$TEST_TAG" built "$took"
}

# apt_sources prints "URI SUITE" for every enabled deb source of this machine,
# from both the one-line and the deb822 formats.
apt_sources() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk '$1 == "deb" {
			i = 2
			if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
			if (i + 1 <= NF) print $i, $(i + 1)
		}' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk '
		function flush(   n, m, i, j, u, s) {
			if (types ~ /(^|[ \t])deb([ \t]|$)/ && enabled != "no") {
				n = split(uris, u, /[ \t]+/); m = split(suites, s, /[ \t]+/)
				for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) if (u[i] != "" && s[j] != "") print u[i], s[j]
			}
			types = uris = suites = ""; enabled = "yes"
		}
		BEGIN { enabled = "yes" }
		/^[ \t]*#/ { next }
		/^[ \t]*$/ { flush(); next }
		/^[A-Za-z-]+:/ {
			key = tolower($0); sub(/:.*/, "", key)
			val = $0; sub(/^[^:]*:[ \t]*/, "", val)
			if (key == "types") types = val
			else if (key == "uris") uris = val
			else if (key == "suites") suites = val
			else if (key == "enabled") enabled = tolower(val)
		}
		END { flush() }' "$f"
	done
}

# debian_mirrors sets MIRROR and SECURITY for the base image.
debian_mirrors() {
	local sources
	sources=$(apt_sources | sed 's#/*  *# #')
	MIRROR=${BERTH_DEBIAN_MIRROR:-}
	if [ -z "$MIRROR" ]; then
		MIRROR=$(awk -v s="$SUITE" '$2 == s { print $1; exit }' <<<"$sources")
	fi
	if [ -z "$MIRROR" ]; then
		MIRROR=$(awk '$1 ~ /\/debian$/ && $2 !~ /-security$/ { print $1; exit }' <<<"$sources")
	fi
	MIRROR=${MIRROR:-http://deb.debian.org/debian}
	SECURITY=${BERTH_DEBIAN_SECURITY:-}
	if [ -z "$SECURITY" ]; then
		SECURITY=$(awk -v s="$SUITE-security" '$2 == s { print $1; exit }' <<<"$sources")
	fi
	[ "$SECURITY" = none ] && SECURITY=
	MIRROR=${MIRROR%/}
	SECURITY=${SECURITY%/}
}

build_base() {
	debian_mirrors
	local script=$IMAGES/scripts/debian-rootfs.sh hash
	hash=$({
		printf 'image=debian-base\nsuite=%s\narch=%s\nmirror=%s\nsecurity=%s\n' "$SUITE" "$ARCH" "$MIRROR" "$SECURITY"
		sha256sum <"$script"
	} | sha256)

	if up_to_date "$BASE_TAG" "$hash"; then
		log "$BASE_TAG is up to date (inputs ${hash:0:12}), skipped"
		record "$BASE_TAG" skipped -
		return
	fi
	[ "$(id -u)" = 0 ] || die "building $BASE_TAG needs root (debootstrap)"
	command -v debootstrap >/dev/null || install_pkg debootstrap

	log "building $BASE_TAG (inputs ${hash:0:12}): debootstrap $SUITE for $ARCH from $MIRROR${SECURITY:+, security from $SECURITY}"
	local rootfs old t t0 took
	tmpdir rootfs rootfs
	t0=$EPOCHREALTIME
	t=$t0
	bash "$script" "$rootfs" "$SUITE" "$MIRROR" "$SECURITY" >"$CACHE/logs/debootstrap.log" 2>&1 ||
		{ tail -n 40 "$CACHE/logs/debootstrap.log" >&2; die "debootstrap failed; full output in $CACHE/logs/debootstrap.log"; }
	log "debootstrap and trim took $(since "$t") ($(du -sm --one-file-system "$rootfs" | cut -f1) MB)"

	old=$(image_id "$BASE_TAG")
	t=$EPOCHREALTIME
	tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -C "$rootfs" -c . |
		docker import \
			--change "LABEL $LABEL=$hash" \
			--change 'LABEL dev.berth.image=debian-base' \
			--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
			--change 'CMD ["bash"]' \
			- "$BASE_TAG" >/dev/null
	log "import took $(since "$t")"
	took=$(since "$t0")
	retire "$old" "$BASE_TAG"
	log "built $BASE_TAG in $took ($(image_size "$BASE_TAG"))"
	record "$BASE_TAG" built "$took"
}

# sri_sha512 FILE prints FILE's npm integrity string (sha512-<base64>).
sri_sha512() {
	printf 'sha512-%s\n' "$(printf '%b' "$(sha512sum "$1" | cut -d' ' -f1 | sed 's/../\\x&/g')" | base64 -w0)"
}

# agent_browser DEST puts the agent-browser npm package into DEST with only
# this architecture's native CLI. The package is fetched on this machine
# (with its npm, or curl from the public registry), checked against
# images/headless/agent-browser.pin and kept, unpacked, in the cache.
agent_browser() {
	local pin=$IMAGES/headless/agent-browser.pin version integrity platform
	version=$(sed -n 's/^version=//p' "$pin")
	integrity=$(sed -n 's/^integrity=//p' "$pin")
	if [ -z "$version" ] || [ -z "$integrity" ]; then
		die "$pin needs version= and integrity= lines"
	fi
	if [ -n "${BERTH_AGENT_BROWSER_VERSION:-}" ] && [ "$BERTH_AGENT_BROWSER_VERSION" != "$version" ]; then
		version=$BERTH_AGENT_BROWSER_VERSION
		integrity=
	fi
	case $ARCH in amd64) platform=linux-x64 ;; arm64) platform=linux-arm64 ;; esac

	local pkg
	pkg=$CACHE/npm/agent-browser-$version-$platform-$(printf '%s' "$integrity" | sha256 | cut -c1-12)
	if [ ! -d "$pkg" ]; then
		local tmp t=$EPOCHREALTIME
		tmpdir tmp agent-browser
		if command -v npm >/dev/null; then
			(cd "$tmp" && npm pack --silent "agent-browser@$version" >/dev/null) ||
				die "npm pack agent-browser@$version failed"
		elif command -v curl >/dev/null; then
			curl -fsSL -o "$tmp/agent-browser-$version.tgz" \
				"https://registry.npmjs.org/agent-browser/-/agent-browser-$version.tgz" ||
				die "downloading agent-browser@$version failed"
		else
			die "npm or curl is needed to fetch the agent-browser package"
		fi
		local tgz=$tmp/agent-browser-$version.tgz
		if [ -n "$integrity" ]; then
			local got
			got=$(sri_sha512 "$tgz")
			[ "$got" = "$integrity" ] || die "agent-browser@$version is $got, but $pin says $integrity"
		else
			log "agent-browser@$version is not the pinned version: its integrity is not checked against $pin"
		fi
		tar -xzf "$tgz" -C "$tmp" package
		find "$tmp/package/bin" -maxdepth 1 -type f -name 'agent-browser-*' ! -name "agent-browser-$platform" -delete
		[ -f "$tmp/package/bin/agent-browser-$platform" ] ||
			die "agent-browser@$version has no native CLI for $platform"
		chmod 0755 "$tmp/package/bin/agent-browser-$platform"
		mkdir -p "$CACHE/npm"
		mv "$tmp/package" "$pkg"
		log "fetched agent-browser@$version ($platform) in $(since "$t")"
	fi
	put_tree "$pkg" "$1"
}

# build_context builds TAG (image NAME) from the build context CTX on the
# image FROM, unless TAG was built from the same inputs already: the name,
# FROM's image id and the context's hash.
build_context() {
	local name=$1 tag=$2 ctx=$3 from=$4 hash old t took
	hash=$(printf 'image=%s\nbase=%s\ncontext=%s\n' "$name" "$(image_id "$from")" "$(context_hash "$ctx")" | sha256)
	if up_to_date "$tag" "$hash"; then
		log "$tag is up to date (inputs ${hash:0:12}), skipped"
		record "$tag" skipped -
		return
	fi
	log "building $tag (inputs ${hash:0:12}) from $from"
	old=$(image_id "$tag")
	t=$EPOCHREALTIME
	docker_build "$name" "$tag" "$ctx" "$hash" --build-arg "BASE_IMAGE=$from"
	took=$(since "$t")
	retire "$old" "$tag"
	log "built $tag in $took ($(image_size "$tag"))"
	record "$tag" built "$took"
}

build_headless() {
	build base

	local ctx
	tmpdir ctx headless
	put "$IMAGES/headless/Dockerfile" "$ctx/Dockerfile"
	put_tree "$IMAGES/headless/rootfs" "$ctx/rootfs"
	agent_browser "$ctx/agent-browser"
	install -m 0755 "$COMPUTERD" "$ctx/computerd"

	build_context headless "$HEADLESS_TAG" "$ctx" "$BASE_TAG"
}

build_desktop() {
	build headless

	local ctx
	tmpdir ctx desktop
	put "$IMAGES/desktop/Dockerfile" "$ctx/Dockerfile"
	put_tree "$IMAGES/desktop/rootfs" "$ctx/rootfs"

	build_context desktop "$DESKTOP_TAG" "$ctx" "$HEADLESS_TAG"
}

build_supervisor() {
	build base

	local ctx bin
	bin=$(berth_bin)
	tmpdir ctx supervisor
	put "$IMAGES/supervisor/Dockerfile" "$ctx/Dockerfile"
	install -m 0755 "$bin" "$ctx/berth"

	build_context supervisor "$SUPERVISOR_TAG" "$ctx" "$BASE_TAG"
}

build_postgres() {
	build base

	local ctx
	tmpdir ctx postgres
	put "$IMAGES/postgres/Dockerfile" "$ctx/Dockerfile"
	put "$IMAGES/postgres/berth-postgres" "$ctx/berth-postgres"

	build_context postgres "$POSTGRES_TAG" "$ctx" "$BASE_TAG"
}

main() {
	[ "$#" -gt 0 ] || set -- all
	local what need_computerd=0
	for what in "$@"; do
		case $what in
		test | headless | desktop | all) need_computerd=1 ;;
		supervisor | postgres) ;;
		-h | --help | help) usage 0 ;;
		*) usage ;;
		esac
	done

	ARCH=$(arch)
	check_docker
	mkdir -p "$CACHE/logs"
	# One build at a time per cache: two would write the same binaries and
	# move the same tags.
	if command -v flock >/dev/null; then
		exec 9>"$CACHE/.lock"
		if ! flock -n 9; then
			log "waiting for another images/build.sh to finish"
			flock 9
		fi
	fi
	local t=$EPOCHREALTIME
	# berth/supervisor holds berth and berth/postgres PostgreSQL, not computerd.
	[ "$need_computerd" = 0 ] || COMPUTERD=$(computerd)

	for what in "$@"; do
		case $what in
		all) build test && build desktop ;;
		*) build "$what" ;;
		esac
	done

	printf '\n%-28s %-8s %8s  %8s  %s\n' image result time size id
	printf '%s\n' "${SUMMARY[@]}"
	printf 'total %s (linux/%s)\n' "$(since "$t")" "$ARCH"
}

main "$@"
