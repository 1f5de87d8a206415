#!/bin/sh
# Runs every fuzz target in the module for FUZZTIME each (`make fuzz`).
# go test -fuzz takes one target of one package at a time, so the targets
# are found here: every `func FuzzXxx(` in a _test.go file under internal/,
# cmd/ and bench/.
#
#   FUZZTIME=10s   how long each target runs (go test -fuzztime)
#   FUZZ=regexp    only the targets whose name matches (grep -E)
#
# A failure leaves the input that broke it in the package's
# testdata/fuzz/FuzzXxx/ (commit it with the fix: it becomes a seed that
# every plain `go test` runs) and makes the script exit 1 after the rest ran.
set -eu
cd "$(dirname "$0")/.."
PATH="$PATH:/usr/local/go/bin"
FUZZTIME=${FUZZTIME:-10s}
FUZZ=${FUZZ:-.}
export CGO_ENABLED=0
status=0
found=0
for file in $(grep -rl --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*(' internal cmd bench | sort); do
	dir=./$(dirname "$file")
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
		printf '%s\n' "$target" | grep -Eq -- "$FUZZ" || continue
		found=$((found + 1))
		echo "== $target $dir ($FUZZTIME)"
		go test -run '^$' -fuzz "^$target\$" -fuzztime "$FUZZTIME" "$dir" || {
			echo "FAILED: $target in $dir" >&2
			status=1
		}
	done
done
[ "$found" -gt 0 ] || { echo "no fuzz target matches FUZZ=$FUZZ" >&2; exit 1; }
echo "== $found fuzz targets, $([ $status = 0 ] && echo "none failed" || echo "some FAILED")"
exit $status
