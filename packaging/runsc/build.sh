#!/bin/sh
# Build (or reuse) gVisor's runsc, the OCI runtime that runs computers in a
# user-space kernel, and print its path. With an argument it registers it
# with the local Docker engine, or takes it away again:
#
#   packaging/runsc/build.sh              # build, print the path
#   packaging/runsc/build.sh register     # build, add "runsc" to the engine
#   packaging/runsc/build.sh unregister   # put the engine back as it was
#                                         # (also after a run that was killed)
#
# runsc is built from the Go module proxy at a pinned version into
# $BERTH_RUNSC_CACHE (default ~/.cache/berth-runsc)/<version>/runsc: about
# four minutes cold on an idle 2-core machine, instant when warm. make
# test-runsc finds it at that path, or at $BERTH_RUNSC.
#
# register adds a "runsc" entry to "runtimes" in /etc/docker/daemon.json
# (merged with what the file holds, which is saved first), sends dockerd
# SIGHUP to reload it, and waits until `docker info` lists runsc.
# unregister reloads the engine without runsc, waits until it is gone, then
# puts the saved file back byte for byte (or removes the file when there
# was none). `docker info` lists the same runtimes as before; dockerd is
# never restarted.
# While runsc is registered, every docker provider on the engine with
# SANDBOX_RUNTIME unset detects and uses it.
set -eu

# gVisor publishes no module versions: its Go branch is pinned by its
# pseudo-version.
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
CACHE=${BERTH_RUNSC_CACHE:-$HOME/.cache/berth-runsc}
DIR=$CACHE/$RUNSC_VERSION
BIN=$DIR/runsc
DAEMON_JSON=${BERTH_DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
# The original daemon.json is saved here while runsc is registered; a
# marker file says there was none.
SAVED=$CACHE/daemon.json.saved
ABSENT=$CACHE/daemon.json.absent
# The runtimes the engine listed before, which the reloads name again.
KEPT=$CACHE/runtimes.json

log() { printf 'runsc: %s\n' "$*" >&2; }

build() {
	if [ -n "${BERTH_RUNSC:-}" ]; then
		[ -x "$BERTH_RUNSC" ] || { log "BERTH_RUNSC=$BERTH_RUNSC is not an executable file"; exit 1; }
		echo "$BERTH_RUNSC"
		return
	fi
	if [ -x "$BIN" ]; then
		log "using cached $BIN"
		echo "$BIN"
		return
	fi
	command -v go >/dev/null 2>&1 || { log "Go is not installed: it builds runsc from the module proxy"; exit 1; }
	mkdir -p "$DIR"
	tmp=$(mktemp -d "$DIR/.build.XXXXXX")
	# Outside any module, so the repository's go.mod plays no part. runsc
	# is static (no cgo), as the engine runs it outside any environment.
	log "building runsc $RUNSC_VERSION into $BIN (about four minutes cold)"
	start=$(date +%s)
	if ! (cd "$tmp" && CGO_ENABLED=0 GOFLAGS=-trimpath GOBIN="$tmp" nice -n 10 go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"); then
		rm -rf "$tmp"
		log "build failed"
		exit 1
	fi
	mv "$tmp/runsc" "$BIN"
	rm -rf "$tmp"
	log "built in $(( $(date +%s) - start )) s"
	echo "$BIN"
}

# listed prints "yes" when the engine lists the runsc runtime.
listed() {
	docker info --format '{{range $name, $_ := .Runtimes}}{{$name}} {{end}}' 2>/dev/null |
		tr ' ' '\n' | grep -qx runsc && echo yes || echo no
}

# reload makes dockerd read daemon.json again and waits (60 s at most)
# until `docker info` says runsc is listed (want=yes) or not (want=no).
reload() {
	want=$1
	pid=$(pidof dockerd || true)
	case $pid in
	'' | *' '*) log "want exactly one dockerd process to reload, found '${pid}'"; exit 1 ;;
	esac
	kill -HUP "$pid"
	i=0
	while [ "$(listed)" != "$want" ]; do
		i=$((i + 1))
		if [ $i -gt 120 ]; then
			log "the engine did not reload $DAEMON_JSON within 60 s (runsc listed: $(listed), want $want); see dockerd's log"
			exit 1
		fi
		sleep 0.5
	done
}

# merge writes daemon.json: the saved original (or nothing) with, under
# "runtimes", the runtimes the engine listed before registering (a reload
# that sets "runtimes" drops the ones dockerd adds itself at start, so they
# are named again) plus runsc at path $2 when given.
merge() {
	python3 - "$DAEMON_JSON" "$SAVED" "$KEPT" "${1:-}" <<'PY'
import json, os, sys
path, saved, kept, runsc = sys.argv[1:5]
conf = {}
if os.path.exists(saved):
    with open(saved) as f:
        text = f.read()
    if text.strip():
        conf = json.loads(text)
runtimes = conf.setdefault("runtimes", {})
with open(kept) as f:
    for name, rt in json.load(f).items():
        # runc is the engine's own and may not be named.
        if name != "runc" and name not in runtimes:
            runtimes[name] = {k: v for k, v in rt.items() if k in ("path", "runtimeArgs")}
if runsc:
    runtimes["runsc"] = {"path": runsc}
tmp = path + ".berth-runsc"
with open(tmp, "w") as f:
    json.dump(conf, f, indent=2)
    f.write("\n")
os.replace(tmp, path)
PY
}

register() {
	bin=$(build)
	command -v python3 >/dev/null 2>&1 || { log "python3 is needed to merge $DAEMON_JSON"; exit 1; }
	if [ -e "$SAVED" ] || [ -e "$ABSENT" ]; then
		log "runsc is registered already (saved state in $CACHE); run unregister first"
		exit 1
	fi
	if [ "$(listed)" = yes ]; then
		log "the engine lists runsc already; leaving it as it is"
		return
	fi
	mkdir -p "$CACHE" "$(dirname "$DAEMON_JSON")"
	docker info --format '{{json .Runtimes}}' >"$KEPT"
	if [ -e "$DAEMON_JSON" ]; then
		cp -p "$DAEMON_JSON" "$SAVED"
	else
		: >"$ABSENT"
	fi
	merge "$bin"
	reload yes
	log "registered $bin with the engine as runtime runsc"
}

unregister() {
	if [ ! -e "$SAVED" ] && [ ! -e "$ABSENT" ]; then
		log "runsc was not registered by this script; nothing to undo"
		return
	fi
	# The engine forgets runsc only on a reload that names runtimes, so
	# reload once with the runtimes it had before, then put the original
	# file back (the engine keeps what it loaded). With no engine running
	# (a run that was killed, cleaned up before the engine starts), the
	# file alone is put back.
	if [ -n "$(pidof dockerd || true)" ]; then
		merge ""
		reload no
	else
		log "no dockerd runs: only putting $DAEMON_JSON back"
	fi
	if [ -e "$SAVED" ]; then
		cp -p "$SAVED" "$DAEMON_JSON"
	else
		rm -f "$DAEMON_JSON"
	fi
	rm -f "$SAVED" "$ABSENT" "$KEPT"
	log "unregistered runsc; $DAEMON_JSON is as it was"
}

case ${1:-build} in
build) build ;;
register) register ;;
unregister) unregister ;;
*) log "unknown mode ${1}: want build, register or unregister"; exit 2 ;;
esac
