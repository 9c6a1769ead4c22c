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
source host/benches/lib.sh
bench=$(hook_bench)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(floor full_hook/memory)
printf '%-24s %14s\n' case "instr/hook"
for case in "${cases[@]}"; do
    callgrind_runs "$bench" "$case" "$out"
    printf '%-24s %14d\n' "$case" "$(collected "$out")"
done
