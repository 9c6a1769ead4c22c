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
# Its totals differ from instructions.sh's by up to about 2k a hook (another build).
set -euo pipefail
cd "$(dirname "$0")/../.."
for tool in valgrind callgrind_annotate python3; do
    command -v $tool >/dev/null || { echo "functions.sh: needs $tool (apt-get install valgrind python3)" >&2; exit 1; }
done
case=${1:-full_hook/memory}
top=${2:-40}
# The charms keep their names; the bench builds them at run time, so they see this too.
export CARGO_PROFILE_CHARM_STRIP=false
source host/benches/lib.sh
bench=$(hook_bench --features profiling)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
callgrind_runs "$bench" "$case" "$out"
echo "$case: instructions per hook by function (self), the charm's marked wasm"
python3 host/benches/functions.py "$out" "$top"
