# Lizard — run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# The gVisor release runsc is built from. Bumping it rebuilds bin/runsc.
GVISOR_VERSION := v0.0.0-20260905035102-160fafc42237
LISTEN   ?= 127.0.0.1:8080
DATA_DIR ?= data
CACHE_DIR ?= /var/cache/lizard
TESTVENV := .cache/testvenv
GO_TEST_FLAGS ?= -count=1 -timeout 45m
# helm checks the Kubernetes chart (deploy/); built from the Go module proxy into .cache/bin.
HELM_VERSION := v3.22.0
# versitygw is the S3-compatible server the image store's tests run against (internal/testenv.S3Server); built
# from the Go module proxy into .cache/bin like helm.
VERSITYGW_VERSION := v1.8.0
SOAK_CYCLES ?= 1000

export CGO_ENABLED := 0

.PHONY: help deps build console runsc qemu template serve test test-go test-python test-typescript test-console test-api testvenv soak helm versitygw manifests bench bench-cluster bench-fleet clean

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

deps: ## Install the system packages Lizard needs (debootstrap, iproute2, nftables — the nft command, for reading sandbox rules and for the tests; the server writes them over netlink — python3-pip for custom templates; python3-venv for the test venv; e2fsprogs and mount for volumes; postgresql for the store's tests; gcc and binutils for the test that the kernel's native heap-share code is its C source's, TestHeapShareCode) if missing
	@missing=""; for p in debootstrap iproute2 nftables python3-pip python3-venv e2fsprogs mount postgresql gcc binutils; do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

build: bin/lizard bin/lizard-client bin/lizard-agent bin/lizard-vminit runsc ## Build bin/lizard, bin/lizard-client (the CLI sandboxes get), bin/lizard-agent, bin/lizard-vminit (--runtime qemu's guest init) and bin/runsc

bin/lizard: internal/console/dist/index.html FORCE
	go build -trimpath -o $@ ./cmd/lizard

bin/lizard-client: FORCE
	go build -trimpath -o $@ ./cmd/lizard-client

bin/lizard-vminit: FORCE
	go build -trimpath -ldflags=-s -o $@ ./cmd/lizard-vminit

# --runtime qemu (docs/qemu.md): QEMU and qemu-img from Debian, and the guest
# kernel from Debian's linux-image-cloud-amd64, unpacked (not installed on
# the host) into CACHE_DIR/qemu/kernel.
QEMU_KERNEL_DIR := $(CACHE_DIR)/qemu/kernel
qemu: ## Install QEMU (qemu-system-x86, qemu-utils) and fetch the guest kernel (linux-image-cloud-amd64) into CACHE_DIR/qemu/kernel, for --runtime qemu
	@missing=""; for p in qemu-system-x86 qemu-utils e2fsprogs; do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; fi
	@if ! ls $(QEMU_KERNEL_DIR)/boot/vmlinuz-* >/dev/null 2>&1; then set -e; \
		tmp=$$(mktemp -d); chmod 755 $$tmp; cd $$tmp; \
		pkg=$$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $$2; exit}'); \
		if [ -z "$$pkg" ]; then apt-get update -qq; pkg=$$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $$2; exit}'); fi; \
		echo "fetching the guest kernel $$pkg into $(QEMU_KERNEL_DIR)"; \
		apt-get download -qq $$pkg 2>&1 | grep -v unsandboxed || true; \
		rm -rf $(QEMU_KERNEL_DIR).tmp; mkdir -p $(QEMU_KERNEL_DIR).tmp; \
		dpkg-deb -x $$pkg*.deb $(QEMU_KERNEL_DIR).tmp; cd /; rm -rf $$tmp; \
		rm -rf $(QEMU_KERNEL_DIR); mv $(QEMU_KERNEL_DIR).tmp $(QEMU_KERNEL_DIR); fi

# The web console (docs/console.md): web/console is built with npm into
# internal/console/dist, which bin/lizard embeds. Rebuilt only when a source
# changed; dist/.gitignore stays, so a fresh clone compiles without a build.
CONSOLE_SRC := $(shell find web/console/src web/console/public -type f 2>/dev/null) \
	web/console/index.html web/console/vite.config.ts web/console/tsconfig.json web/console/package-lock.json

console: internal/console/dist/index.html ## Build the web console into internal/console/dist (embedded into bin/lizard)

internal/console/dist/index.html: $(CONSOLE_SRC) web/console/node_modules/.ok
	find internal/console/dist -mindepth 1 ! -name .gitignore -delete
	cd web/console && npm run --silent build

web/console/node_modules/.ok: web/console/package-lock.json
	cd web/console && npm ci --no-audit --no-fund --loglevel=error
	touch $@

bin/lizard-agent: FORCE
	go build -trimpath -o $@ ./cmd/lizard-agent

# runsc must be static: a cgo build fails at start (see docs/architecture.md). build/runsc/build.sh
# builds it from a copy of the pinned module in .cache/runsc-src with its seccomp filters precompiled,
# as gVisor's Bazel builds ship them (a go install ships none). bin/.runsc-version holds the version and
# a hash of build/runsc, so a change to either rebuilds it.
RUNSC_STAMP = $(GVISOR_VERSION) $(shell cat build/runsc/* | sha256sum | cut -c1-16)
runsc: ## Build the pinned static runsc, seccomp filters precompiled, into bin/runsc (skipped when up to date)
	@if [ "$$(cat bin/.runsc-version 2>/dev/null)" != "$(RUNSC_STAMP)" ] || [ ! -x bin/runsc ]; then \
		echo "building runsc $(GVISOR_VERSION) with precompiled seccomp filters (2 to 8 minutes the first time)"; \
		mkdir -p bin && build/runsc/build.sh $(GVISOR_VERSION) $(CURDIR)/bin/runsc $(CURDIR)/.cache/runsc-src && \
		echo "$(RUNSC_STAMP)" > bin/.runsc-version; \
	fi

template: deps build ## Build (or find cached) the interpreter template, with progress
	bin/lizard admin build-template --cache-dir $(CACHE_DIR) interpreter

serve: deps build ## Start the service on $(LISTEN) with data in $(DATA_DIR) (builds the template on first start)
	bin/lizard serve --listen $(LISTEN) --data-dir $(DATA_DIR) --cache-dir $(CACHE_DIR)

helm: ## Build helm $(HELM_VERSION) into .cache/bin for the chart's tests (skipped when there)
	@if [ "$$(cat .cache/bin/.helm-version 2>/dev/null)" != "$(HELM_VERSION)" ] || [ ! -x .cache/bin/helm ]; then \
		echo "building helm $(HELM_VERSION) (a few minutes the first time)"; \
		mkdir -p .cache/bin && GOBIN=$(CURDIR)/.cache/bin timeout 1800 go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION) && \
		echo "$(HELM_VERSION)" > .cache/bin/.helm-version; \
	fi

versitygw: ## Build versitygw $(VERSITYGW_VERSION), the S3 server of the image store's tests, into .cache/bin (skipped when there)
	@if [ "$$(cat .cache/bin/.versitygw-version 2>/dev/null)" != "$(VERSITYGW_VERSION)" ] || [ ! -x .cache/bin/versitygw ]; then \
		echo "building versitygw $(VERSITYGW_VERSION) (a few minutes the first time)"; \
		mkdir -p .cache/bin && GOBIN=$(CURDIR)/.cache/bin timeout 1800 go install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION) && \
		echo "$(VERSITYGW_VERSION)" > .cache/bin/.versitygw-version; \
	fi

manifests: helm ## Regenerate deploy/manifests/lizard.yaml from the Helm chart (a test checks it is up to date)
	LIZARD_UPDATE_MANIFESTS=1 go test -count=1 -run '^TestManifestsUpToDate$$' ./deploy

testvenv: $(TESTVENV)/.ok ## Python venv for tests: ipykernel for the kernel tests, the SDK with its test extras

$(TESTVENV)/.ok: sdk/python/pyproject.toml test/requirements.txt
	python3 -m venv $(TESTVENV)
	$(TESTVENV)/bin/pip install -q -r test/requirements.txt -e './sdk/python[test]'
	touch $@

# The desktop template is built once for the three suites that use it: Python builds it, keeps it
# (LIZARD_E2E_KEEP_TEMPLATES=1), TypeScript and the console find it in the template cache (the same
# project, recipe and base), and the console, the last, deletes it. A failure between leaves the build
# in CACHE_DIR, where the next run finds it.
test: deps build template testvenv helm versitygw qemu ## Run every test: Go (unit with SQLite and PostgreSQL, runtime conformance of gVisor and QEMU, end to end with soak and chaos, the Helm chart), Python SDK, TypeScript SDK, schemathesis on the API, web console in a browser
	$(MAKE) test-go
	LIZARD_E2E_KEEP_TEMPLATES=1 $(MAKE) test-python test-typescript
	$(MAKE) test-console test-api

test-go: ## Go tests (needs root, bin/, the template, the test venv and make qemu)
	LIZARD_TEST_STRICT=1 LIZARD_TEST_PYTHON=$(CURDIR)/$(TESTVENV)/bin/python LIZARD_CACHE_DIR=$(CACHE_DIR) \
		go test $(GO_TEST_FLAGS) ./...

test-python: ## Python SDK tests, unit and end to end against a real lizard serve
	cd sdk/python && LIZARD_TEST_STRICT=1 LIZARD_CACHE_DIR=$(CACHE_DIR) ../../$(TESTVENV)/bin/python -m pytest -q

# npm test compiles the tests, the end-to-end ones too (build:test), after npm run build: test:e2e:built
# runs them without test:e2e's second compile of both.
test-typescript: ## TypeScript SDK tests, unit and end to end against a real lizard serve
	cd sdk/typescript && npm ci --no-audit --no-fund && npm run build && npm test && \
		LIZARD_TEST_STRICT=1 LIZARD_CACHE_DIR=$(CACHE_DIR) npm run test:e2e:built

test-console: deps build template ## Browser tests of the web console: Playwright driving Debian's headless chromium (installed if missing) against a real lizard serve
	@command -v chromium >/dev/null || { echo "installing chromium"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	cd web/console && LIZARD_TEST_STRICT=1 LIZARD_CACHE_DIR=$(CACHE_DIR) timeout 1800 npm test

test-api: ## schemathesis (every check) against a real lizard serve with api/openapi.yaml (about 3 minutes)
	LIZARD_TEST_STRICT=1 LIZARD_CACHE_DIR=$(CACHE_DIR) $(TESTVENV)/bin/python -m pytest -q -p no:cacheprovider test/api

soak: deps build template ## The soak suite at full length: 1,000 create → run → kill cycles (SOAK_CYCLES=N), then nothing left and flat server memory; make test runs 150
	LIZARD_SOAK_CYCLES=$(SOAK_CYCLES) LIZARD_TEST_STRICT=1 LIZARD_CACHE_DIR=$(CACHE_DIR) \
		go test -count=1 -timeout 60m -v -run '^TestSoak$$' ./e2e

bench: deps build template testvenv qemu ## Benchmarks in one run: Lizard on gVisor beside raw runsc and direct Jupyter, and on QEMU (BENCH_FLAGS="--scale 5 --sustain 5s" for a quick one)
	LIZARD_CACHE_DIR=$(CACHE_DIR) $(TESTVENV)/bin/python bench/bench.py --cache-dir $(CACHE_DIR) --qemu $(BENCH_FLAGS)

bench-cluster: deps build template versitygw ## Many machines on one: api→node vs serve (runCode, create), creates/s with 1-3 nodes, pause → durable and resume on another node (image store), a drain of 10 idle sandboxes, time to node lost (BENCH_CLUSTER_FLAGS="--real-drain 30": only a drain of 30 sandboxes with pandas and a variable between two real nodes, calls meanwhile)
	LIZARD_CACHE_DIR=$(CACHE_DIR) go run ./bench/cluster --cache-dir $(CACHE_DIR) $(BENCH_CLUSTER_FLAGS)

bench-fleet: deps build ## The control plane at fleet scale: 3 lizard api on PostgreSQL, 100 simulated nodes (BENCH_FLEET_FLAGS="--nodes 500"), creates/s and create/runCode latency with 0, 10k, 100k sandbox rows, statements per create, lease renewals (--count-creates: the api processes' statements, rows and blocks and every table's rows scanned per create; --week-events: a week of events; --lose-nodes 50: nodes lost at once; --drain 2000: a node drained)
	go run ./bench/fleet $(BENCH_FLEET_FLAGS)

clean: ## Remove build outputs (not the template cache)
	rm -rf bin .cache
	find internal/console/dist -mindepth 1 ! -name .gitignore -delete

FORCE:
