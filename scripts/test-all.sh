#!/bin/sh
# Every test: the Go packages (the containment tests need root, or user
# namespaces and a delegated cgroup), then the TypeScript SDK and its Mastra,
# AI SDK and LangChain adapters against a real `ironclaw serve`.
set -eu
cd "$(dirname "$0")/.."
PATH="$PATH:/usr/local/go/bin"
CGO_ENABLED=0 go test -count=1 ./...
cd sdk/typescript
npm ci --no-audit --no-fund --loglevel=error
npm test
