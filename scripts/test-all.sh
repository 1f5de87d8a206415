#!/bin/sh
# Every test: the Go packages (the containment tests need root, or user
# namespaces and a delegated cgroup), then the TypeScript SDK and its Mastra,
# AI SDK and LangChain adapters against a real `ironclaw serve`. `make test`
# runs this script; `make test-go` and `make test-sdk` run one half:
#
#   sh scripts/test-all.sh [go] [sdk]     (no argument: both, in that order)
#
# GOTESTFLAGS adds flags to go test (e.g. GOTESTFLAGS='-run Hostile').
set -eu
cd "$(dirname "$0")/.."
PATH="$PATH:/usr/local/go/bin"
[ $# -gt 0 ] || set -- go sdk
for part in "$@"; do
	case $part in
	go)
		# shellcheck disable=SC2086 # GOTESTFLAGS is a list of flags
		CGO_ENABLED=0 go test -count=1 ${GOTESTFLAGS:-} ./...
		;;
	sdk)
		(
			cd sdk/typescript
			npm ci --no-audit --no-fund --loglevel=error
			npm test
		)
		;;
	*)
		echo "usage: sh scripts/test-all.sh [go] [sdk]" >&2
		exit 2
		;;
	esac
done
