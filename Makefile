# Berth: `make run` starts an all-in-one instance, `make test` runs the suite.
SHELL := /bin/bash
GO ?= go
BIN := bin/berth
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
LISTEN ?= 127.0.0.1:8080
DATA ?= berth-data
TEST_TIMEOUT ?= 40m

.PHONY: help build dist deb image-supervisor image-postgres compose-plugin compose-up compose-down run minio helm test test-k8s test-runsc test-live test-short fuzz images docker bench bench-peers bench-density lint clean app app-package companion-deb companion-windows

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build bin/berth
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/berth

# Release binaries for every platform Berth ships to, with their sums:
# packaging/dist/build.sh says which (CGO off, the version from VERSION).
dist: ## cross-build berth for linux, macOS and Windows (amd64, arm64) into dist/, with dist/SHA256SUMS
	VERSION=$(VERSION) GO=$(GO) packaging/dist/build.sh

deb: ## build the berth Debian package (nfpm, built once and cached) into dist/
	VERSION=$(VERSION) GO=$(GO) packaging/deb/build.sh

docker: ## make sure a Docker engine runs (installs docker.io as root when missing)
	@packaging/dev/docker-up.sh

images: docker ## build the computer images offline (only what changed)
	images/build.sh all

image-supervisor: docker ## build the supervisor's container image berth/supervisor:latest offline (non-root, berth supervisor)
	images/build.sh supervisor

image-postgres: docker ## build berth/postgres:15 offline (Debian's PostgreSQL 15, non-root), the store of the compose and Helm installs
	images/build.sh postgres

# Docker's compose plugin (v2) is not packaged in Debian: it is built once
# from the Go module proxy into ~/.cache/berth-compose and installed in
# ~/.docker/cli-plugins.
compose-plugin: ## build (cached) and install the docker compose plugin
	@packaging/compose/install-plugin.sh >/dev/null

compose-up: ## start Berth with docker compose (supervisor, PostgreSQL, relay, TURN): images, plugin and packaging/compose/.env made as needed
	packaging/compose/up.sh

compose-down: ## stop the docker compose instance (its data volumes are kept)
	docker compose -f packaging/compose/compose.yaml down

run: build images ## build everything and start `berth dev` on LISTEN (127.0.0.1:8080) with its data in DATA (berth-data)
	$(BIN) dev --listen $(LISTEN) --data $(DATA)

# The object store's S3 tests run against a real MinIO server, built once
# from the Go module proxy (about two minutes) into ~/.cache/berth-minio.
minio: ## build (cached) the MinIO server the object store tests run against
	@packaging/minio-test/build.sh >/dev/null

# The Helm chart's tests lint and render it with helm, built once from the Go
# module proxy (about a minute) into ~/.cache/berth-helm.
helm: ## build (cached) the helm CLI that lints, renders and installs packaging/helm/berth
	@packaging/helm/build.sh >/dev/null

# go test starts packages' tests in the order it is given them, TEST_P at
# once: at least four, more on a machine with more cores. Most packages
# spend their time waiting on the engine, so four keep two cores busy where
# two (the default, one per core) leave them idle. e2e, the longest by far,
# goes first, so that the other packages run beside it instead of before it
# (docs/performance.md, "The test suite").
TEST_PKGS ?= ./e2e ./...
TEST_P ?= $(shell n=$$(nproc 2>/dev/null || echo 4); [ "$$n" -gt 4 ] && echo $$n || echo 4)
test: docker images image-supervisor image-postgres minio helm compose-plugin ## run the whole suite, Docker integration tests included
	BERTH_REQUIRE_DOCKER=1 BERTH_REQUIRE_POSTGRES=1 BERTH_REQUIRE_NETNS=1 BERTH_REQUIRE_MINIO=1 BERTH_REQUIRE_CGROUP=1 $(GO) test -count=1 -p $(TEST_P) -timeout $(TEST_TIMEOUT) $(TEST_PKGS)

test-k8s: docker images ## build (cached) and start a single-node Kubernetes cluster, run the kubernetes provider's conformance suite on it, install the Helm chart and use a computer through it
	packaging/k8s-test/run.sh test

# gVisor's runsc is built once from the Go module proxy (about four
# minutes) into ~/.cache/berth-runsc, and registered with the engine only
# while the tests run: packaging/runsc/test.sh.
test-runsc: docker images ## build (cached) gVisor's runsc, register it with the engine for the test's time, run the docker provider's conformance suite under it (detected, SANDBOX_RUNTIME unset) and compare create -> ready with runc
	GO=$(GO) packaging/runsc/test.sh

test-live: ## check every hosted provider whose credentials are in the environment (E2B_API_KEY, ...) against the real service
	BERTH_LIVE=1 $(GO) test -count=1 -timeout 20m -v -run 'TestLive$$' ./conformance/live/

test-short: ## run the tests that need no Docker engine
	$(GO) test -short -count=1 ./...

# Native Go fuzz targets at the trust boundaries (docs/security.md). Go runs
# one fuzz target per invocation; each runs FUZZ_EXECS inputs, or the count
# after its name (the targets that serve a whole HTTP handler per input are
# slower). Their seeds (and the inputs kept under testdata/fuzz/) also run in
# every `go test`. The budget is a count, not a duration: with Go 1.26 a
# duration can end a run that found nothing with "context deadline
# exceeded" when the workers are slow to stop (go.dev/issue/75804, fixed in
# Go 1.27). Each target takes 2 to 25 seconds on a 2-core machine, quiet
# or busy.
FUZZ_EXECS ?= 20000
FUZZ_TARGETS := \
	./egress/:FuzzParseHost \
	./egress/:FuzzHostAddress \
	./egress/:FuzzBlockedForms \
	./egress/:FuzzParseBlockedCIDRs \
	./egress/:FuzzProxyAuth \
	./egress/:FuzzProxyRequest \
	./supervisor/apiserver/:FuzzPostBodies:4000 \
	./relay/:FuzzBearerToken \
	./relay/:FuzzMuxFrames \
	./relay/relayclient/:FuzzLinkCoalescing \
	./relay/relayclient/:FuzzCheckURL \
	./computerd/server/:FuzzResolvePath \
	./computerd/server/:FuzzFileTools:8000 \
	./computerd/server/:FuzzArchiveName
fuzz: ## run each fuzz target for FUZZ_EXECS inputs (20,000; fewer for the slow ones)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$(FUZZ_EXECS); \
	  case $$rest in *:*) n=$${rest#*:};; esac; \
	  echo "fuzz $$name ($$pkg, $$n inputs)"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $${n}x $$pkg; \
	done

# make bench prints one table (e2e/benchtable): a row per figure a benchmark
# reports, with its baseline from the same run, their ratio and the target.
# Benchmarks in BENCH_PKGS run at the default benchtime; add packages there.
# The live-view benchmarks (real desktops and Chromium, seconds per
# iteration) run 3 times each; the 1 GiB CONNECT transfer 6 times (3 each
# way round), its loopback baseline swinging from run to run. The load
# average before and after goes with the table, the machine being shared.
BENCH_TABLE := $(GO) run ./e2e/benchtable
BENCH_PKGS ?= ./supervisor/store/... ./internal/objstore/ ./egress/ ./relay/... ./agent/lender/ ./app/ui/ ./supervisor/console/
BENCH_TIMEOUT ?= 30m
# The persistence benchmarks move a GiB per loop: three loops each.
BENCH_HOMES = Sleep1GiB|Wake1GiB|CheckpointExec|SleepWakeS3

bench: docker images minio bench-peers ## run the benchmarks; one table: each figure, its baseline from the same run, their ratio, the target
	@echo "load before: $$(uptime)"; \
	{ $(GO) test -run '^$$' -bench . -skip 'WarmStart|Density|LiveView|BurstStarts|SustainedStarts|IdleSupervisor' -benchtime 10x -count 1 -timeout $(BENCH_TIMEOUT) ./e2e/ ./providers/docker/; \
	   $(GO) test -run '^$$' -bench WarmStart -benchtime 50x -count 1 -timeout $(BENCH_TIMEOUT) ./e2e/; \
	   $(GO) test -run '^$$' -bench LiveView -benchtime 3x -count 1 -timeout $(BENCH_TIMEOUT) ./e2e/; \
	   $(GO) test -run '^$$' -bench 'BurstStarts|SustainedStarts|IdleSupervisor' -benchtime 1x -count 1 -timeout $(BENCH_TIMEOUT) ./e2e/; \
	   $(GO) test -run '^$$' -bench . -skip '$(BENCH_HOMES)|TwoSupervisors' -benchtime 4000x -count 1 -timeout $(BENCH_TIMEOUT) ./supervisor/apiserver/; \
	   $(GO) test -run '^$$' -bench TwoSupervisors -benchtime 1x -count 1 -timeout $(BENCH_TIMEOUT) ./supervisor/apiserver/; \
	   $(GO) test -run '^$$' -bench '$(BENCH_HOMES)' -benchtime 3x -count 1 -timeout $(BENCH_TIMEOUT) ./supervisor/apiserver/; \
	   $(GO) test -run '^$$' -bench Connect1GiB -benchtime 6x -count 1 -timeout $(BENCH_TIMEOUT) ./egress/; \
	   $(GO) test -run '^$$' -bench EgressPeers -benchtime 3x -count 1 -timeout $(BENCH_TIMEOUT) ./egress/; \
	   $(GO) test -run '^$$' -bench . -skip 'Connect1GiB|EgressPeers' -count 1 -timeout $(BENCH_TIMEOUT) $(BENCH_PKGS); } 2>&1 | $(BENCH_TABLE); \
	rc=$$?; echo "load after: $$(uptime)"; exit $$rc

bench-peers: ## install squid, tinyproxy and curl, the egress benchmarks' peers (as root), or name them
	@packaging/dev/bench-peers.sh

bench-density: docker images ## start BERTH_DENSITY_N (default 100) idle headless computers: how many fit, memory each, supervisor RSS
	@BERTH_BENCH_DENSITY=1 $(GO) test -run '^$$' -bench Density -benchtime 1x -count 1 -timeout 30m ./e2e/ 2>&1 | $(BENCH_TABLE)

app: ## build the companion app, bin/berth-companion (cgo: installs gcc and the GL/X11 headers as root, or names them)
	@packaging/dev/app-deps.sh
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/berth-companion ./cmd/berth-companion

companion-deb: ## build the companion's Debian package into dist/ (cgo; nfpm, cached)
	VERSION=$(VERSION) GO=$(GO) packaging/companion/build.sh deb

companion-windows: ## cross-build the companion for Windows into dist/ (mingw-w64, installed as root when missing)
	VERSION=$(VERSION) GO=$(GO) packaging/companion/build.sh windows

FYNE_CLI ?= fyne.io/tools/cmd/fyne@v1.7.4
app-package: ## package the companion for Linux with fyne package: bin/berth-companion-linux.tar.xz
	@mkdir -p bin && cp app/FyneApp.toml bin/.FyneApp.toml.keep
	cd cmd/berth-companion && $(GO) run $(FYNE_CLI) package --os linux --release; rc=$$?; \
	  cd ../.. && mv bin/.FyneApp.toml.keep app/FyneApp.toml && [ $$rc -eq 0 ]
	mv cmd/berth-companion/Berth.tar.xz bin/berth-companion-linux.tar.xz

# staticcheck builds from the Go module proxy at this version (cached after
# the first run); a newer Go may need a newer one.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint: ## check go.mod is tidy, vet, cross-compiling (windows, darwin), formatting and staticcheck
	@if ! out=$$($(GO) mod tidy -diff 2>&1); then echo "$$out"; echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; fi
	$(GO) vet ./...
	@# berth must keep cross-compiling for the platforms make dist ships to
	@# (linux is the build above; darwin/amd64 differs from arm64 only in code generation).
	CGO_ENABLED=0 GOOS=windows GOARCH=amd64 $(GO) build -o /dev/null ./cmd/berth
	CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 $(GO) build -o /dev/null ./cmd/berth
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) ./...

clean: ## remove build outputs
	rm -rf bin dist
