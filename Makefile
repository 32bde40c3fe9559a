# warden: run `make help` for the targets.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
export GOFLAGS := -mod=mod

BIN        := bin/warden
TOOLS      := $(CURDIR)/bin/tools
RUNC       := $(TOOLS)/runc
RUNC_VERSION := v1.5.2
# gVisor's runsc for engine = "gvisor": a static build of one pinned commit of
# its Go module (its releases are not tagged as module versions), found by
# warden beside bin/warden in bin/tools.
RUNSC      := $(TOOLS)/runsc
RUNSC_VERSION := v0.0.0-20260905035102-160fafc42237
# Kubernetes' CRI validation suite (make k8s): critest and crictl at one pinned
# release, and Debian's dynamic busybox for the test images (the package
# conflicts with busybox-static, so it is unpacked into bin/tools, not installed).
CRI_TOOLS_VERSION := v1.37.0
CRITEST    := $(TOOLS)/critest-$(CRI_TOOLS_VERSION)
CRICTL     := $(TOOLS)/crictl-$(CRI_TOOLS_VERSION)
# critest -parallel runs its nodes through the ginkgo CLI found on PATH, at
# the version critest $(CRI_TOOLS_VERSION) is built with.
GINKGO_VERSION := v2.32.1
GINKGO     := $(TOOLS)/ginkgo-$(GINKGO_VERSION)/ginkgo
K8S_BUSYBOX := $(TOOLS)/busybox-dynamic/bin/busybox
PREFIX     ?= /usr/local
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT     ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
TAGS       := seccomp netgo osusergo urfave_cli_no_docs
LDFLAGS    := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -extldflags "-static"
UNIT_PKGS  := ./cmd/... ./policies/... ./spec/... ./seccomp/... ./runtime/...
CHAOS_ROUNDS ?= 50
APT_PKGS   := libseccomp-dev runc bubblewrap busybox-static hyperfine curl jq python3 make gcc iproute2 containerd docker.io python3-requests python3-pip git docker-registry containernetworking-plugins nftables procps util-linux mypy nodejs chromium libpython3.11-testsuite

.PHONY: build deps test integration python-client-test ts-client-build ts-client-test chaos k8s conformance bench lint install clean help demo ci

build: $(BIN) ## build bin/warden (static, cgo, seccomp)

$(BIN): go.mod go.sum $(shell find cmd policies spec seccomp runtime \( -name '*.go' -o -name '*.c' -o -name '*.h' \) -not -name '*_test.go') $(wildcard policies/*.toml) $(wildcard runtime/dashboard/web/*)
	@test -f /usr/include/seccomp.h || $(MAKE) --no-print-directory deps
	CGO_ENABLED=1 go build -trimpath -tags "$(TAGS)" -ldflags '$(LDFLAGS)' -o $@ ./cmd/warden

deps: ## install what building and testing need (apt packages, runc $(RUNC_VERSION), runsc); root
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@# Debian packages npm apart from nodejs; a nodejs of nodesource's holds it.
	@command -v npm >/dev/null || { echo "installing: npm"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null; }
	@test -x $(RUNC) || { echo "installing runc $(RUNC_VERSION) into $(TOOLS)"; \
		CGO_ENABLED=1 GOBIN=$(TOOLS) go install -tags seccomp github.com/opencontainers/runc@$(RUNC_VERSION); }
	@test -x $(RUNSC) || { echo "installing runsc (gVisor) $(RUNSC_VERSION) into $(TOOLS) (about 2 minutes)"; \
		CGO_ENABLED=0 GOBIN=$(TOOLS) go install gvisor.dev/gvisor/runsc@$(RUNSC_VERSION); }

test: ## unit tests (no root needed)
	go test -count=1 $(UNIT_PKGS)

integration: build $(CRICTL) $(K8S_BUSYBOX) ## end-to-end tests with real containers (root)
	@test "$$(id -u)" = 0 || { echo "make integration: needs root (real containers); run it with sudo" >&2; exit 1; }
	@test -x $(RUNC) -a -x $(RUNSC) || $(MAKE) --no-print-directory deps
	WARDEN_BINARY=$(CURDIR)/$(BIN) WARDEN_RUNC=$(RUNC) WARDEN_RUNSC=$(RUNSC) WARDEN_CRICTL=$(CRICTL) WARDEN_K8S_BUSYBOX=$(K8S_BUSYBOX) go test -count=1 -timeout 30m -tags "$(TAGS)" -skip '^(TestCritest|TestConformance)$$' -v ./integration/ 2>&1 | tee /tmp/warden-integration.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test\.go)' ; test $${PIPESTATUS[0]} = 0

python-client-test: build ## the Python client's type check and tests (clients/python) against a real daemon (root)
	@test "$$(id -u)" = 0 || { echo "make python-client-test: needs root (real sandboxes); run it with sudo" >&2; exit 1; }
	@command -v python3 >/dev/null && command -v mypy >/dev/null || { echo "make python-client-test: needs python3 and mypy; run \`make deps\`" >&2; exit 1; }
	MYPYPATH=clients/python/tests mypy --strict --python-version 3.9 --cache-dir /tmp/warden-mypy-cache clients/python/warden clients/python/examples/tool_loop.py clients/python/tests/*.py
	WARDEN_BINARY=$(CURDIR)/$(BIN) python3 -m unittest discover -v clients/python/tests 2>&1 | tee /tmp/warden-python-client.log; \
	rc=$${PIPESTATUS[0]}; test $$rc = 0 || exit $$rc; \
	grep -Eq '^Ran [1-9][0-9]* tests? in' /tmp/warden-python-client.log || { echo "make python-client-test: no test ran" >&2; exit 1; }

ts-client-build: ## install the TypeScript client's pinned dev dependencies (npm ci; offline once cached) and compile it (clients/typescript/dist)
	@command -v node >/dev/null && command -v npm >/dev/null || { echo "make ts-client-build: needs node and npm; run \`make deps\`" >&2; exit 1; }
	cd clients/typescript && npm ci --prefer-offline --no-audit --no-fund --no-update-notifier --loglevel=error && npx --no-install tsc -p .

ts-client-test: build ts-client-build ## the TypeScript client's tests (clients/typescript, node --test) against a real daemon (root)
	@test "$$(id -u)" = 0 || { echo "make ts-client-test: needs root (real sandboxes); run it with sudo" >&2; exit 1; }
	cd clients/typescript && WARDEN_BINARY=$(CURDIR)/$(BIN) node --test dist/test/*.test.js 2>&1 | tee /tmp/warden-ts-client.log; \
	rc=$${PIPESTATUS[0]}; test $$rc = 0 || exit $$rc; \
	grep -Eq '^# pass [1-9]' /tmp/warden-ts-client.log || { echo "make ts-client-test: no test ran" >&2; exit 1; }

k8s: build $(CRITEST) $(CRICTL) $(GINKGO) $(K8S_BUSYBOX) ## critest $(CRI_TOOLS_VERSION) for runc, warden, warden under the baseline policy and warden on gVisor (root; UPDATE=1 rewrites docs/kubernetes.md's table)
	@test "$$(id -u)" = 0 || { echo "make k8s: needs root (a private containerd runs real pods); run it with sudo" >&2; exit 1; }
	@test -x $(RUNC) -a -x $(RUNSC) || $(MAKE) --no-print-directory deps
	WARDEN_BINARY=$(CURDIR)/$(BIN) WARDEN_RUNC=$(RUNC) WARDEN_RUNSC=$(RUNSC) WARDEN_CRITEST=$(CRITEST) WARDEN_CRICTL=$(CRICTL) WARDEN_GINKGO=$(GINKGO) WARDEN_K8S_BUSYBOX=$(K8S_BUSYBOX) \
		go test -count=1 -timeout 30m -tags "$(TAGS)" -run '^TestCritest$$' -v ./integration/ $(if $(UPDATE),-update) 2>&1 | tee /tmp/warden-k8s.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test\.go)' ; test $${PIPESTATUS[0]} = 0

conformance: build ## runtime-tools validation: warden beside runc, warden --engine gvisor beside runsc (root; ~13 min; UPDATE=1 rewrites docs/conformance.md's table)
	@test "$$(id -u)" = 0 || { echo "make conformance: needs root (real containers); run it with sudo" >&2; exit 1; }
	@test -x $(RUNC) -a -x $(RUNSC) || $(MAKE) --no-print-directory deps
	WARDEN_BINARY=$(CURDIR)/$(BIN) WARDEN_RUNC=$(RUNC) WARDEN_RUNSC=$(RUNSC) \
		go test -count=1 -timeout 90m -tags "$(TAGS)" -run '^TestConformance$$' -v ./integration/ $(if $(UPDATE),-update) 2>&1 | tee /tmp/warden-conformance.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test\.go)' ; test $${PIPESTATUS[0]} = 0

# critest is a compiled Go test ("go install" refuses it): built from a
# writable copy of the module.
$(CRITEST):
	@mkdir -p $(TOOLS)
	src=$$(go mod download -json sigs.k8s.io/cri-tools@$(CRI_TOOLS_VERSION) | sed -n 's/.*"Dir": "\(.*\)".*/\1/p') && \
	work=$$(mktemp -d) && trap 'rm -rf "$$work"' EXIT && cp -r "$$src"/. "$$work" && chmod -R u+w "$$work" && \
	cd "$$work" && CGO_ENABLED=0 go test -c -o $@ ./cmd/critest

$(CRICTL):
	@mkdir -p $(TOOLS)
	work=$$(mktemp -d) && trap 'rm -rf "$$work"' EXIT && CGO_ENABLED=0 GOBIN="$$work" go install sigs.k8s.io/cri-tools/cmd/crictl@$(CRI_TOOLS_VERSION) && mv "$$work/crictl" $@

$(GINKGO):
	@mkdir -p $(dir $@)
	CGO_ENABLED=0 GOBIN=$(dir $@) go install github.com/onsi/ginkgo/v2/ginkgo@$(GINKGO_VERSION)

$(K8S_BUSYBOX):
	@mkdir -p $(TOOLS)
	work=$$(mktemp -d) && trap 'rm -rf "$$work"' EXIT && chmod 755 "$$work" && { chown _apt "$$work" 2>/dev/null || true; } && cd "$$work" && apt-get download -q busybox && \
	rm -rf $(TOOLS)/busybox-dynamic && dpkg-deb -x busybox_*.deb $(TOOLS)/busybox-dynamic
	@ldd $@ | grep -q libc.so || { echo "$@ is not Debian's dynamic busybox" >&2; exit 1; }

chaos: build ## kill -9 the daemon (and clients, agents) at random moments, then check nothing is left (root; CHAOS_ROUNDS=N, WARDEN_CHAOS_SEED=N replays a run)
	@test "$$(id -u)" = 0 || { echo "make chaos: needs root (real containers); run it with sudo" >&2; exit 1; }
	@test -x $(RUNC) -a -x $(RUNSC) || $(MAKE) --no-print-directory deps
	@echo "chaos: $(CHAOS_ROUNDS) rounds, log in /tmp/warden-chaos.log"
	@WARDEN_CHAOS_ROUNDS=$(CHAOS_ROUNDS) WARDEN_BINARY=$(CURDIR)/$(BIN) WARDEN_RUNC=$(RUNC) WARDEN_RUNSC=$(RUNSC) \
		go test -count=1 -timeout 5m -tags "$(TAGS)" -run '^TestChaos$$' -v ./integration/ >/tmp/warden-chaos.log 2>&1; \
	rc=$$?; \
	if [ $$rc = 0 ] && grep -q '^--- PASS: TestChaos ' /tmp/warden-chaos.log; then \
		grep -E 'chaos_test.go:[0-9]+: (seed|[0-9]+ rounds in)' /tmp/warden-chaos.log; \
	else \
		cat /tmp/warden-chaos.log; echo; echo "make chaos: the failed rounds' own lines (above: the whole log):"; \
		bash scripts/chaos-failures.sh /tmp/warden-chaos.log; \
		echo "make chaos: failed, or TestChaos did not run; WARDEN_CHAOS_SEED=<the seed logged above> replays its kills" >&2; exit 1; \
	fi

bench: build ts-client-build ## benchmarks, as ratios against baselines measured in the same run (root)
	WARDEN_BINARY=$(CURDIR)/$(BIN) WARDEN_RUNC=$(RUNC) WARDEN_RUNSC=$(RUNSC) go test -count=1 -tags "$(TAGS)" -run '^$$' -bench . -benchtime 1x ./integration/

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l cmd policies spec seccomp runtime integration); test -z "$$out" || { echo "gofmt needed: $$out"; exit 1; }
	CGO_ENABLED=1 go vet -tags "$(TAGS)" ./...
	@test -x $(TOOLS)/staticcheck || GOBIN=$(TOOLS) go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$(TOOLS)/staticcheck -tags "$(TAGS)" ./...

ci: deps build lint test integration python-client-test ts-client-test chaos k8s conformance ## everything CI runs, on a fresh machine (root)

demo: build ## bundle the web-fetch example policy and run a command in it under runc (root)
	@test -x $(RUNC) -a -x $(RUNSC) || $(MAKE) --no-print-directory deps
	RUNC=$(RUNC) WARDEN=$(CURDIR)/$(BIN) bash scripts/demo.sh

install: build ## install warden into $(PREFIX)/bin
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/warden

clean: ## remove build output
	rm -rf bin clients/typescript/dist clients/typescript/node_modules

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14
