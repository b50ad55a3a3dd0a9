#!/usr/bin/env bash
# Start Berth with docker compose from a clean clone, in one command
# (`make compose-up` runs this):
#
#   1. makes sure the Docker engine runs (packaging/dev/docker-up.sh);
#   2. makes sure `docker compose` (v2) works, building the plugin from source
#      when it is missing (packaging/compose/install-plugin.sh);
#   3. builds the images offline, each only when its inputs changed:
#      berth/headless and berth/desktop (computers), berth/supervisor (also
#      the relay) and berth/postgres:15;
#   4. writes packaging/compose/.env when there is none: fresh secrets and
#      this host's DOCKER_GID, mode 0600 (an existing .env is never changed);
#   5. runs `docker compose up -d --wait` and prints where the API is.
#
# Arguments go to `docker compose up` (for example --force-recreate).
set -euo pipefail

DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$DIR/../.." && pwd -P)
ENV_FILE=$DIR/.env

log() { printf 'compose-up: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

"$ROOT/packaging/dev/docker-up.sh"

if ! docker compose version >/dev/null 2>&1; then
	log "docker compose (v2) is missing: building the plugin"
	"$ROOT/packaging/compose/install-plugin.sh" >/dev/null
fi

"$ROOT/images/build.sh" desktop supervisor postgres

# secret prints 64 random hex characters.
secret() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }

if [ ! -e "$ENV_FILE" ]; then
	sock=/var/run/docker.sock
	[ -S "$sock" ] || die "no Docker socket at $sock: the supervisor runs computers through it"
	gid=$(stat -c %g "$sock")
	umask 077
	tmp=$(mktemp "$ENV_FILE.XXXXXX")
	sed -e "s/^SUPERVISOR_TOKEN=\$/SUPERVISOR_TOKEN=$(secret)/" \
		-e "s/^POSTGRES_PASSWORD=\$/POSTGRES_PASSWORD=$(secret)/" \
		-e "s/^RELAY_TOKEN=\$/RELAY_TOKEN=$(secret)/" \
		-e "s/^DOCKER_GID=\$/DOCKER_GID=$gid/" \
		"$DIR/.env.example" >"$tmp"
	mv "$tmp" "$ENV_FILE"
	log "wrote $ENV_FILE (new secrets, DOCKER_GID=$gid); keep it: the database's password is in it"
fi

docker compose -f "$DIR/compose.yaml" up -d --wait "$@"

# The address and token, from .env, to use the instance.
val() { sed -n "s/^$1=//p" "$ENV_FILE" | tail -n1; }
host=$(val BERTH_API_HOST)
port=$(val BERTH_API_PORT)
[ -n "$host" ] && [ "$host" != 0.0.0.0 ] || host=127.0.0.1
url="http://$host:${port:-8080}"
cat <<EOF

Berth is running (docker compose -f packaging/compose/compose.yaml ps).
  export BERTH_URL=$url
  export SUPERVISOR_TOKEN=\$(sed -n 's/^SUPERVISOR_TOKEN=//p' packaging/compose/.env)
  console: $url/ (sign in with SUPERVISOR_TOKEN)
Stop it with: docker compose -f packaging/compose/compose.yaml down
EOF
