# The project's habits as commands; CI (.ci/run) runs the same ones.
# `make help` lists them. Everything builds with CGO_ENABLED=0 (the sandbox
# init refuses a cgo binary), except the race detector, which needs cgo.
#
# Each recipe is a script or one command, so a machine without make can run
# it by hand: `sh scripts/test-all.sh` is `make test`.

GO ?= go
export CGO_ENABLED := 0

# staticcheck, pinned: `make lint` installs this version from the Go module
# proxy into bin/tools/ (git-ignored) the first time. Bump it here; the
# version is part of the path, so a bump installs the new one.
STATICCHECK_VERSION := v0.8.2
STATICCHECK := bin/tools/staticcheck-$(STATICCHECK_VERSION)/staticcheck

# How long `make fuzz` runs each fuzz target (go test -fuzztime).
FUZZTIME ?= 10s

# The packages the race detector runs over in CI.
RACE_PKGS := ./internal/sandbox/native/... ./internal/session/ ./internal/audit/ \
	./internal/store/ ./internal/api/ ./internal/daemon/ ./internal/client/ \
	./internal/gateway/... ./internal/netlimit/ ./internal/egress/ ./internal/modelproxy/ \
	./internal/e2b/... ./internal/inproc/ ./internal/secrets/

.PHONY: build help test test-go test-sdk lint fmt vet staticcheck typecheck race bench demo fuzz tools

# The steward (internal/sandbox/inside/steward/csrc) is C: static, so it
# runs in a sandbox that holds no libraries.
CC ?= cc
STEWARD_CFLAGS := -O2 -static -s -Wall -Wextra -Werror -D_FORTIFY_SOURCE=2 -fstack-protector-strong

## build: bin/ironclaw (the CLI), bin/ironclaw-full (the whole CLI, daemon included: ironclaw serve runs it), bin/ironclaw-sandbox (the small in-sandbox init) and bin/ironclaw-steward (an idle sandbox's pid 1, in C), side by side (the default)
build:
	$(GO) build -o bin/ ./cmd/ironclaw ./cmd/ironclaw-full ./cmd/ironclaw-sandbox
	$(CC) $(STEWARD_CFLAGS) -o bin/ironclaw-steward internal/sandbox/inside/steward/csrc/steward.c internal/sandbox/inside/steward/csrc/setup.c

## help: this list
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST)

## test: every test: the Go packages, then the TypeScript SDK against a real daemon (scripts/test-all.sh)
test:
	sh scripts/test-all.sh

## test-go: only the Go packages (GOTESTFLAGS adds go test flags, e.g. GOTESTFLAGS='-run Hostile')
test-go:
	sh scripts/test-all.sh go

## test-sdk: only the TypeScript SDK and its adapters
test-sdk:
	sh scripts/test-all.sh sdk

## lint: gofmt, go vet, staticcheck (pinned) and the SDK's type check
lint: fmt vet staticcheck typecheck

## fmt: fail if gofmt would change a file
fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:" >&2; echo "$$out" >&2; exit 1; fi

## vet: go vet ./...
vet:
	$(GO) vet ./...

## staticcheck: staticcheck ./... at STATICCHECK_VERSION (default checks)
staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

## typecheck: tsc --noEmit over the SDK (installs its node_modules when they are missing or stale)
typecheck:
	sh scripts/sdk-typecheck.sh

## race: the race detector over the daemon's concurrent packages (sandboxes' init from a cgo-free bin/ironclaw)
race: build
	IRONCLAW_TEST_INIT_EXE="$(CURDIR)/bin/ironclaw" CGO_ENABLED=1 $(GO) test -race -count=1 $(RACE_PKGS)

## bench: the side-by-side benchmarks (bench/run.sh; N=, PEERS=, BENCH=... as bench/README.md says)
bench:
	sh bench/run.sh

## demo: the one-command Mastra demo (examples/integrations/mastra/run.sh)
demo:
	sh examples/integrations/mastra/run.sh

## fuzz: every fuzz target for FUZZTIME (default 10s) each (scripts/fuzz.sh; FUZZ= picks targets by regexp)
fuzz:
	FUZZTIME=$(FUZZTIME) sh scripts/fuzz.sh

## tools: install the pinned staticcheck into bin/tools/
tools: $(STATICCHECK)

$(STATICCHECK):
	GOBIN="$(CURDIR)/$(dir $(STATICCHECK))" $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# The E2B envd protos (api/e2b) -> Go and Connect code (internal/e2b/envdpb).
# Needs protoc (Debian protobuf-compiler); the plugins come from the module proxy.
.PHONY: e2b-proto
e2b-proto:
	GOBIN=$(CURDIR)/bin/tools go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	GOBIN=$(CURDIR)/bin/tools go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
	PATH=$(CURDIR)/bin/tools:$$PATH protoc -I api/e2b --go_out=. --go_opt=module=github.com/ironclaw/ironclaw \
		--connect-go_out=. --connect-go_opt=module=github.com/ironclaw/ironclaw \
		process/process.proto filesystem/filesystem.proto
