#!/bin/sh
# bench/run.sh — compare ironclaw with bwrap, runc, runsc and docker on the
# same work, and run ironclaw's in-daemon Go benchmarks. From the repo root:
#
#   sh bench/run.sh
#
# Environment (all optional):
#   N=200                  measured runs per peer and operation (after 3 warm-ups)
#   PEERS="ironclaw ironclaw-runc ironclaw-runsc ironclaw-docker bwrap runc runsc docker"
#                          which peers to try
#   OUT=bench/results.md   markdown report
#   BENCH=.                go test -bench regexp; BENCH=none skips the Go benchmarks
#   BENCHTIME=2s           go test -benchtime
#   BENCHFLAGS=            more go test flags, e.g. "-hold=100"
#   BENCHTIMEOUT=20m       go test -timeout, so a hung benchmark cannot stall the run
#   BENCHPKGS="./internal/api/ ./internal/audit/ ./internal/modelproxy/"
#                          the other packages whose benchmarks run (HTTP API, audit log, model proxy)
#   START_DOCKERD=0        1: start dockerd if `docker info` fails (and stop it after)
#
# A peer that is not installed is skipped with a "skipped:" line; a peer
# whose runs fail is reported as FAILED and makes the script exit 1 after
# the report is written.
set -eu
umask 022

N=${N:-200}
PEERS=${PEERS:-"ironclaw ironclaw-runc ironclaw-runsc ironclaw-docker bwrap runc runsc docker"}
OUT=${OUT:-bench/results.md}
BENCH=${BENCH:-.}
BENCHTIME=${BENCHTIME:-2s}
BENCHFLAGS=${BENCHFLAGS:-}
BENCHTIMEOUT=${BENCHTIMEOUT:-20m}
BENCHPKGS=${BENCHPKGS:-"./internal/api/ ./internal/audit/ ./internal/modelproxy/"}
START_DOCKERD=${START_DOCKERD:-0}
export CGO_ENABLED=0
# The native benchmarks hand pid 1 to the steward when the runtime does
# (the tests do it at once: see sandboxtest.NativeOptions).
export IRONCLAW_TEST_STEWARD_AFTER=${IRONCLAW_TEST_STEWARD_AFTER:-250ms}

case $OUT in /*) ;; *) OUT=$PWD/$OUT ;; esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

started=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ironclaw-bench.XXXXXX")
chmod 755 "$WORK" # the sandboxes run as an unprivileged uid and must reach $WORK/bin
: >"$WORK/results.jsonl"
: >"$WORK/notes"
: >"$WORK/info"
: >"$WORK/gobench.txt"
CMP=$WORK/compare
status=0
RUNC_ID=""
DOCKER_CTR=""
DOCKER_IMG=""
DOCKERD_PID=""

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	[ -n "$RUNC_ID" ] && runc delete -f "$RUNC_ID" >/dev/null 2>&1
	[ -n "$DOCKER_CTR" ] && docker rm -f "$DOCKER_CTR" >/dev/null 2>&1
	[ -n "$DOCKER_IMG" ] && docker rmi "$DOCKER_IMG" >/dev/null 2>&1
	if [ -n "$DOCKERD_PID" ]; then
		kill "$DOCKERD_PID" 2>/dev/null && wait "$DOCKERD_PID" 2>/dev/null
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '== %s\n' "$*"; }
note() { printf '%s\n' "$*" | tee -a "$WORK/notes"; }
info() { printf '%s\n' "$*" >>"$WORK/info"; }
want() { case " $PEERS " in *" $1 "*) return 0 ;; esac; return 1; }

# measure PEER OP [compare flags] -- CMD...: one result line, or a loud FAILED.
measure() {
	peer=$1 op=$2
	shift 2
	say "$peer $op (n=$N)"
	if "$CMP" -n "$N" -name "$peer" -op "$op" "$@" >>"$WORK/results.jsonl"; then
		tail -n 1 "$WORK/results.jsonl"
	else
		note "FAILED: $peer $op (its error is in the run's output above)"
		status=1
	fi
}

# ---------------------------------------------------------------- build
say "building bin/ironclaw, bin/ironclaw-full and bin/ironclaw-sandbox, the comparison tool and the static workloads"
go build -o bin/ ./cmd/ironclaw ./cmd/ironclaw-full ./cmd/ironclaw-sandbox
mkdir -p "$WORK/bin"
go build -o "$CMP" ./bench/compare
# Static, stripped: each peer execs the same small binary needing nothing else.
go build -trimpath -ldflags='-s -w' -o "$WORK/bin/true" ./bench/workload/true
go build -trimpath -ldflags='-s -w' -o "$WORK/bin/sleep" ./bench/workload/sleep
# The whole command line alone, without the small init beside it: its
# sandboxes re-execute the whole binary as their init, as before
# ironclaw-sandbox.
mkdir -p "$WORK/self"
cp bin/ironclaw-full "$WORK/self/ironclaw-full"
# The Go benchmarks' sandboxes get the small init too (the test binary
# would otherwise be their init).
IRONCLAW_TEST_INIT_EXE=$ROOT/bin/ironclaw-sandbox
export IRONCLAW_TEST_INIT_EXE

info "N: $N runs per row (after 3 warm-ups)"
info "go: $(go version)"
info "ironclaw: $(bin/ironclaw version 2>/dev/null || echo '?') at $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"

# ---------------------------------------------------------------- dockerd
# Started before anything is measured, so that every Docker row has it:
# the Go benchmarks' docker backend, ironclaw-docker and the docker peer
# (started only for the last, the first two were skipped). It runs, idle,
# beside the other rows too; the EXIT trap stops it.
if [ "$START_DOCKERD" = 1 ] && { want docker || want ironclaw-docker; } &&
	command -v dockerd >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then
	say "starting dockerd (START_DOCKERD=1)"
	dockerd >"$WORK/dockerd.log" 2>&1 &
	DOCKERD_PID=$!
	i=0
	until docker info >/dev/null 2>&1 || [ $i -ge 120 ]; do
		sleep 1
		i=$((i + 1))
	done
	docker info >/dev/null 2>&1 || note "dockerd did not answer within 120s (log: $(tail -n 3 "$WORK/dockerd.log" | tr '\n' ' '))"
fi

# ---------------------------------------------------------------- in-daemon
if [ "$BENCH" = none ]; then
	note "skipped: Go benchmarks (BENCH=none)"
else
	say "go test -bench '$BENCH' -benchtime $BENCHTIME ./internal/sandbox/native/ ./internal/sandbox/backend/ $BENCHFLAGS"
	info "go benchmarks: -bench '$BENCH' -benchtime $BENCHTIME $BENCHFLAGS"
	# tee for live progress; the exit status travels through a file since
	# POSIX sh has no pipefail.
	# shellcheck disable=SC2086 # BENCHFLAGS is a list of flags
	{
		rc=0
		go test -run '^$' -bench "$BENCH" -benchtime "$BENCHTIME" -count 1 -timeout "$BENCHTIMEOUT" \
			./internal/sandbox/native/ $BENCHFLAGS 2>&1 || rc=$?
		# The same create, exec and idle figures for every backend this
		# host runs, side by side (a missing backend is a SKIP line).
		go test -run '^$' -bench "$BENCH" -benchtime "$BENCHTIME" -count 1 -timeout "$BENCHTIMEOUT" \
			./internal/sandbox/backend/ 2>&1 || rc=$?
		# What an SDK user feels over HTTP, the audit log and the model
		# proxy, each with its same-run peer or floor.
		go test -run '^$' -bench "$BENCH" -benchtime "$BENCHTIME" -count 1 -timeout "$BENCHTIMEOUT" \
			$BENCHPKGS 2>&1 || rc=$?
		echo $rc >"$WORK/gobench.rc"
	} | tee "$WORK/gobench.txt"
	if [ "$(cat "$WORK/gobench.rc")" != 0 ]; then
		note "FAILED: go test -bench exited $(cat "$WORK/gobench.rc"); its output is under the Go benchmarks section"
		status=1
	fi
fi

# ---------------------------------------------------------------- floor
# What no sandbox costs: fork+exec+wait of the same binary. Every peer's
# number includes this.
measure "no sandbox" run -- "$WORK/bin/true"

# ---------------------------------------------------------------- ironclaw
if want ironclaw; then
	# The CLI's own start (a Go process, cobra, flag parsing), which the
	# whole-process ironclaw number includes and the in-daemon ones do not.
	measure ironclaw cli-start -- bin/ironclaw version
	# The whole command line, daemon included (what ironclaw was before it
	# handed serve and the other heavy commands to ironclaw-full).
	measure ironclaw-full cli-start -- bin/ironclaw-full version
	measure ironclaw run -- bin/ironclaw run --mount "$WORK/bin:/bench:ro" -- /bench/true
	# The same without bin/ironclaw-sandbox beside it: what the small init saves.
	measure "ironclaw (self init)" run -- "$WORK/self/ironclaw-full" run --mount "$WORK/bin:/bench:ro" -- /bench/true
	note "ironclaw exec: in-daemon: see BenchmarkExecRoundTrip; over HTTP through ironclaw serve: BenchmarkHTTPExecRoundTrip in internal/api"
fi

# ---------------------------------------------------------------- ironclaw on other backends
# The same `ironclaw run`, with the sandbox made by an OCI runtime or Docker
# (the same seal, see internal/sandbox/oci and internal/sandbox/docker).
for r in runc runsc docker; do
	want "ironclaw-$r" || continue
	if ! bin/ironclaw run --runtime "$r" -- true >"$WORK/ironclaw-$r.log" 2>&1; then
		note "skipped: ironclaw-$r: $(tail -n 1 "$WORK/ironclaw-$r.log")"
		continue
	fi
	measure "ironclaw-$r" run -- bin/ironclaw run --runtime "$r" --mount "$WORK/bin:/bench:ro" -- /bench/true
done

# ---------------------------------------------------------------- bwrap
if want bwrap; then
	if command -v bwrap >/dev/null 2>&1; then
		info "bwrap: $(bwrap --version 2>&1 | head -n 1)"
		# Close to ironclaw's default: every namespace incl. net, the uid
		# 65532, no capabilities, read-only host toolchain, proc, dev,
		# tmpfs /tmp, read-only root. bwrap sets no cgroup limits and no
		# seccomp filter of its own.
		set -- bwrap --unshare-all --unshare-user --die-with-parent --new-session \
			--uid 65532 --gid 65532 --cap-drop ALL --hostname sandbox --clearenv \
			--ro-bind /usr /usr
		for d in /bin /sbin /lib /lib32 /lib64 /libx32; do
			if [ -L "$d" ]; then
				set -- "$@" --symlink "$(readlink "$d")" "$d"
			elif [ -d "$d" ]; then
				set -- "$@" --ro-bind "$d" "$d"
			fi
		done
		set -- "$@" --proc /proc --dev /dev --tmpfs /tmp --ro-bind "$WORK/bin" /bench --remount-ro / /bench/true
		measure bwrap run -- "$@"
		note "bwrap exec: n/a (bwrap cannot exec into a running sandbox)"
	else
		note "skipped: bwrap not installed (apt-get install bubblewrap)"
	fi
fi

# ---------------------------------------------------------------- runc
if want runc; then
	if command -v runc >/dev/null 2>&1; then
		info "runc: $(runc --version 2>&1 | head -n 1)"
		"$CMP" runc-bundle -rootfs-from "$WORK/bin" "$WORK/runc-true" /true
		"$CMP" runc-bundle -rootfs-from "$WORK/bin" "$WORK/runc-sleep" /sleep
		# `runc run` deletes the container when it exits unless --keep;
		# a runc without --keep gets an explicit untimed delete.
		if runc run --help 2>&1 | grep -q -- '--keep'; then
			measure runc run -- runc run --bundle "$WORK/runc-true" '{{id}}'
		else
			measure runc run -teardown 'runc delete -f {{id}}' -- runc run --bundle "$WORK/runc-true" '{{id}}'
		fi
		RUNC_ID=icb-sleep-$$
		# Detached, with stdio away from any pipe of ours.
		if runc run -d --bundle "$WORK/runc-sleep" "$RUNC_ID" </dev/null >"$WORK/runc-sleep.log" 2>&1; then
			measure runc exec -- runc exec "$RUNC_ID" /true
		else
			note "FAILED: runc exec: could not start the long-lived container: $(cat "$WORK/runc-sleep.log")"
			status=1
		fi
		runc delete -f "$RUNC_ID" >/dev/null 2>&1 || true
		RUNC_ID=""
		left=$(runc list -q 2>/dev/null | grep -c '^icb-' || true)
		[ "$left" = 0 ] || note "warning: $left runc containers named icb-* left behind"
	else
		note "skipped: runc not installed (apt-get install runc)"
	fi
fi

# ---------------------------------------------------------------- runsc
if want runsc; then
	if command -v runsc >/dev/null 2>&1; then
		info "runsc: $(runsc --version 2>&1 | head -n 1)"
		[ -d "$WORK/runc-true" ] || "$CMP" runc-bundle -rootfs-from "$WORK/bin" "$WORK/runc-true" /true
		# ptrace: the platform this runsc build has that works without KVM
		# (ironclaw-runsc uses the same).
		measure runsc run -- runsc --rootless=false --network=none --platform=ptrace run --bundle "$WORK/runc-true" '{{id}}'
	else
		note "skipped: runsc not installed (apt-get install runsc)"
	fi
fi

# ---------------------------------------------------------------- docker
if want docker; then
	if ! command -v docker >/dev/null 2>&1; then
		note "skipped: docker not installed (apt-get install docker.io)"
	else
		if docker info >/dev/null 2>&1; then
			info "docker: server $(docker version --format '{{.Server.Version}}' 2>/dev/null), runtime $(docker info --format '{{.DefaultRuntime}}' 2>/dev/null), cgroup driver $(docker info --format '{{.CgroupDriver}}' 2>/dev/null)"
			# No registry here: the image is a tarball of just our two binaries.
			DOCKER_IMG=ironclaw-bench-workload:$$
			tar -C "$WORK/bin" -cf - true sleep | docker import - "$DOCKER_IMG" >/dev/null
			# The flags give docker ironclaw's default limits and user.
			set -- --network none --read-only --memory 512m --pids-limit 256 --cpus 1 \
				--user 65532:65532 --cap-drop ALL --security-opt no-new-privileges
			measure docker run -- docker run --rm "$@" "$DOCKER_IMG" /true
			DOCKER_CTR=icb-sleep-$$
			if docker run -d --name "$DOCKER_CTR" "$@" "$DOCKER_IMG" /sleep >/dev/null; then
				measure docker exec -- docker exec "$DOCKER_CTR" /true
			else
				note "FAILED: docker exec: could not start the long-lived container"
				status=1
			fi
			docker rm -f "$DOCKER_CTR" >/dev/null 2>&1 || true
			DOCKER_CTR=""
			docker rmi "$DOCKER_IMG" >/dev/null 2>&1 || true
			DOCKER_IMG=""
		elif [ -n "$DOCKERD_PID" ]; then
			note "skipped: docker: dockerd did not answer within 120s (log: $(tail -n 3 "$WORK/dockerd.log" | tr '\n' ' '))"
		else
			note "skipped: docker: \`docker info\` fails (start dockerd, or run with START_DOCKERD=1)"
		fi
	fi
fi

# ---------------------------------------------------------------- report
info "run took: $(($(date +%s) - started)) s"
say "results"
mkdir -p "$(dirname "$OUT")"
# Commands as a reader can run them: relative to the repo root, and the
# run's scratch directory as $WORK.
for f in results.jsonl gobench.txt notes info; do
	sed "s|$WORK|\$WORK|g; s|$ROOT/||g" "$WORK/$f" >"$WORK/$f.shown"
done
"$CMP" report -o "$OUT" -gobench "$WORK/gobench.txt.shown" -notes "$WORK/notes.shown" -info "$WORK/info.shown" "$WORK/results.jsonl.shown"
say "wrote $OUT ($(($(date +%s) - started)) s)"
exit $status
