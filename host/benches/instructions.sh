#!/usr/bin/env bash
# Instructions per hook, counted by callgrind: a figure that does not move with the
# machine's load, for comparing a change against its parent on a shared machine.
#
#   host/benches/instructions.sh [CASE ...]     (default: floor full_hook/memory)
#
# Each case runs the hook bench's profiling loop twice under callgrind, 200 and 1,200 hooks;
# the difference over 1,000 leaves out loading and compiling the charms. Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v valgrind >/dev/null || { echo "instructions.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo bench -p charm-host --bench hook --no-run 2>/dev/null
bench=$(ls -t target/release/deps/hook-* | grep -v '\.d$' | head -1)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# A pool of two slots: valgrind's address space cannot hold the default pool's reservation.
export BENCH_HOOK_SLOTS=2
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(floor full_hook/memory)
printf '%-24s %14s\n' case "instr/hook"
for case in "${cases[@]}"; do
    # Builds the guests (a child process callgrind would not count anyway) before counting.
    HOOK_BENCH_PROFILE=$case HOOK_BENCH_PROFILE_RUNS=1 "$bench" >/dev/null
    declare -A total=()
    for runs in 200 1200; do
        HOOK_BENCH_PROFILE=$case HOOK_BENCH_PROFILE_RUNS=$runs valgrind --tool=callgrind \
            --callgrind-out-file="$out/cg.$runs" "$bench" >"$out/log.$runs" 2>&1 \
            || { cat "$out/log.$runs" >&2; exit 1; }
        total[$runs]=$(grep -o 'Collected : [0-9]*' "$out/log.$runs" | grep -o '[0-9]*$')
    done
    printf '%-24s %14d\n' "$case" $(( (total[1200] - total[200]) / 1000 ))
done
