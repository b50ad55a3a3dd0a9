#!/bin/sh
# make test-runsc: build (cached) gVisor's runsc, register it with the
# local Docker engine for the tests' time only, and run under it, with
# SANDBOX_RUNTIME unset so that the provider must detect it:
#   - the docker provider's conformance suite (TestDockerRunsc), which
#     checks that every computer runs under runsc and sees gVisor's kernel;
#   - the docker provider's own tests (hardening, limits, quota, pools,
#     firewall, suspend and resume), under runsc, and `berth providers`'
#     runtime line;
#   - persistence "memory" end to end: a process kept across a sleep
#     (e2e TestMemoryComputers; the engine's checkpoints need dockerd
#     --experimental, as packaging/dev/docker-up.sh starts it);
#   - BenchmarkRuntimeReady: create -> ready under runsc against runc.
# runsc is unregistered on the way out, whatever happens, and
# /etc/docker/daemon.json is left as it was (see build.sh).
set -eu
cd "$(dirname "$0")/../.."
GO=${GO:-go}

packaging/runsc/build.sh >/dev/null
trap 'packaging/runsc/build.sh unregister' EXIT
trap 'exit 130' INT TERM
packaging/runsc/build.sh register

unset SANDBOX_RUNTIME
export BERTH_REQUIRE_DOCKER=1 BERTH_REQUIRE_RUNSC=1
$GO test -count=1 -timeout 25m -run 'TestDockerRunsc$' ./conformance/providertest/
$GO test -count=1 -timeout 15m ./providers/docker/
$GO test -count=1 -timeout 5m -run 'TestProvidersRuntime$' ./cmd/berth/
$GO test -count=1 -timeout 10m -run 'TestMemoryComputers$' ./e2e/
$GO test -count=1 -timeout 15m -run '^$' -bench 'RuntimeReady$' -benchtime 5x ./providers/docker/
