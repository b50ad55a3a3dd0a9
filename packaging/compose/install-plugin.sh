#!/bin/sh
# Install Docker's compose plugin (`docker compose`), built from source.
#
#   packaging/compose/install-plugin.sh
#
# Debian ships only the old Python docker-compose 1.x, so Compose v2 is
# built from the Go module proxy at a pinned version into a cache,
# $BERTH_COMPOSE_CACHE (default ~/.cache/berth-compose)/<version>/docker-compose
# (a long cold build: 36 minutes on a 2-core machine busy with other
# builds; instant when cached), then
# copied to the Docker CLI's plugin folder of this user,
# ${DOCKER_CONFIG:-~/.docker}/cli-plugins/docker-compose. A missing or
# damaged cache is rebuilt; a plugin already there at the pinned version is
# kept. It prints `docker compose version` when done.
#
# Environment:
#   BERTH_COMPOSE_CACHE  the cache folder (default ~/.cache/berth-compose)
#   BERTH_COMPOSE_DEST   the plugin file to install (default as above)
set -eu

# v2.40.3 is the newest release at the time of pinning. It talks to engines
# down to API 1.41 (Docker 20.10, Debian 12's docker.io): it checks the
# engine's API version before using anything newer.
COMPOSE_VERSION=v2.40.3
CACHE=${BERTH_COMPOSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/berth-compose}
BIN=$CACHE/$COMPOSE_VERSION/docker-compose
DEST=${BERTH_COMPOSE_DEST:-${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins/docker-compose}

log() { printf 'compose-plugin: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# version FILE prints what the plugin FILE says its version is ("" if it
# does not run).
version() { "$1" version --short 2>/dev/null | sed 's/^v//' || true; }

want=${COMPOSE_VERSION#v}

if [ "$(version "$BIN")" != "$want" ]; then
	command -v go >/dev/null 2>&1 || die "Go is not installed: it builds the compose plugin from the module proxy (or install Docker's docker-compose-plugin package)"
	mkdir -p "$CACHE/$COMPOSE_VERSION"
	tmp=$(mktemp -d "$CACHE/$COMPOSE_VERSION/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	log "building compose $COMPOSE_VERSION into $BIN (many minutes cold; cached afterwards)"
	start=$(date +%s)
	# Compose's go.mod has exclude directives, so `go install ...@version`
	# refuses it: build inside a copy of the module's source instead, with
	# the flags of its own Makefile (GOFLAGS emptied: a -mod or -modfile
	# from the caller's environment must not apply to it).
	src=$(cd "$tmp" && GOFLAGS= go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -n "$src" ] && [ -d "$src" ] || die "could not download github.com/docker/compose/v2@$COMPOSE_VERSION from the Go module proxy"
	cp -R "$src" "$tmp/src"
	chmod -R u+w "$tmp/src"
	(cd "$tmp/src" && GOFLAGS= CGO_ENABLED=0 nice -n 10 go build -trimpath -o "$tmp/cmd" \
		-ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" ./cmd) ||
		die "building github.com/docker/compose/v2@$COMPOSE_VERSION ./cmd failed"
	[ "$(version "$tmp/cmd")" = "$want" ] || die "the plugin built does not report version $want"
	mv "$tmp/cmd" "$BIN"
	log "built in $(($(date +%s) - start)) s"
fi

if [ "$(version "$DEST")" != "$want" ] || ! cmp -s "$BIN" "$DEST"; then
	mkdir -p "$(dirname "$DEST")"
	cp "$BIN" "$DEST.tmp.$$"
	chmod 0755 "$DEST.tmp.$$"
	mv "$DEST.tmp.$$" "$DEST"
	log "installed $DEST"
fi

if command -v docker >/dev/null 2>&1; then
	docker compose version
else
	log "installed, but there is no docker client to run it: install docker.io"
fi
