#!/usr/bin/env bash
# Makes sure a Docker engine answers: starts an installed but stopped dockerd
# (machines without systemd), installs docker.io with apt when it is missing
# and we are root, and otherwise says exactly what to install.
set -euo pipefail

if docker info >/dev/null 2>&1; then
	exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "docker-up: installing docker.io with apt-get" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq docker.io >/dev/null
	else
		echo "docker-up: no Docker engine. Install it with: sudo apt-get install -y docker.io" >&2
		echo "           (or Docker Desktop on macOS and Windows), then run this again." >&2
		exit 1
	fi
fi

if ! command -v docker >/dev/null 2>&1; then
	echo "docker-up: the docker client is missing: sudo apt-get install -y docker.io" >&2
	exit 1
fi

if [ "$(id -u)" != 0 ]; then
	echo "docker-up: dockerd is installed but not running. Start it with: sudo systemctl start docker" >&2
	echo "           (without systemd: sudo sh -c 'setsid dockerd >/var/log/dockerd.log 2>&1 &')" >&2
	exit 1
fi

if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	systemctl start docker
else
	# --experimental turns on the engine's checkpoints, which computers
	# under gVisor (runsc) need for persistence "memory" (docs/persistence.md).
	log=${DOCKERD_LOG:-/var/log/dockerd.log}
	echo "docker-up: starting dockerd --experimental (log: $log)" >&2
	setsid dockerd --experimental >"$log" 2>&1 < /dev/null &
fi

for _ in $(seq 1 60); do
	if docker info >/dev/null 2>&1; then
		exit 0
	fi
	sleep 1
done
echo "docker-up: dockerd did not answer within 60 s; see ${DOCKERD_LOG:-/var/log/dockerd.log}" >&2
exit 1
