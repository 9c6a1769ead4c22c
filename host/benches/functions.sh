#!/usr/bin/env bash
# Instructions per hook by function, the charm's own functions named: where a case's
# instructions go, host and charm alike, counted by callgrind (so the machine's load does
# not move them).
#
#   host/benches/functions.sh [CASE] [TOP]     (default: full_hook/memory, 40 rows)
#
# Builds the hook bench with the `profiling` feature (wasmtime then writes a perf map,
# /tmp/perf-PID.map, naming the code it compiles) and the charms with their symbols, runs
# the bench's profiling loop under callgrind for 200 and 1,200 hooks, and prints each
# function's own instructions over the 1,000 hooks between (functions.py). The first run
# builds wasmtime again with the feature: several minutes. Needs valgrind and python3.
# Counts run a few thousand instructions per hook above instructions.sh's (another build).
set -euo pipefail
cd "$(dirname "$0")/../.."
for tool in valgrind callgrind_annotate python3; do
    command -v $tool >/dev/null || { echo "functions.sh: needs $tool (apt-get install valgrind python3)" >&2; exit 1; }
done
case=${1:-full_hook/memory}
top=${2:-40}
# The charms keep their names; the bench builds them at run time, so they see this too.
export CARGO_PROFILE_CHARM_STRIP=false
bench=$(cargo bench -p charm-host --bench hook --features profiling --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "hook" and m.get("executable"):
        print(m["executable"])')
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# A pool of two slots: valgrind's address space cannot hold the default pool's reservation.
export BENCH_HOOK_SLOTS=2 HOOK_BENCH_PROFILE=$case
# Builds the guests (a child process callgrind would not count anyway) before counting.
HOOK_BENCH_PROFILE_RUNS=1 "$bench" >/dev/null
for runs in 200 1200; do
    HOOK_BENCH_PROFILE_RUNS=$runs valgrind --tool=callgrind \
        --callgrind-out-file="$out/cg.$runs" "$bench" >"$out/log.$runs" 2>&1 \
        || { cat "$out/log.$runs" >&2; exit 1; }
    # Valgrind runs the bench as its own process: the map is named by valgrind's pid.
    pid=$(grep -o -m1 '^==[0-9]*==' "$out/log.$runs" | tr -d =)
    mv "/tmp/perf-$pid.map" "$out/map.$runs"
done
echo "$case: instructions per hook by function (self), the charm's marked wasm"
python3 host/benches/functions.py "$out" "$top"
