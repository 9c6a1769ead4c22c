#!/usr/bin/env bash
# Where a hook's wall-clock time goes, by phase: perf samples the hook bench's profiling loop
# with DWARF call graphs, and each sample is put in the phase its stack is in.
#
#   host/benches/phases.sh [CASE [RUNS]]     (default: full_hook/memory 100000)
#
# Complements instructions.sh: callgrind counts each byte of a `rep movsb`/`rep stosb` as
# an instruction (so it overstates copying pages back) and cannot see the kernel, where
# part of resetting a slot's memory happens. Needs perf (Debian's linux-perf) and either
# root or kernel.perf_event_paranoid <= 2 (user-space samples of our own process).
#
# The charm's own code runs as JIT code without unwind information for perf, so a sample
# whose innermost frame is not in a known binary is the charm's code; its host frames are
# not seen. Host calls made from the charm show as "host calls" (their frames up to the
# charm's). Samples outside the hook loop (loading, compiling) are left out.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v perf >/dev/null || { echo "phases.sh: needs perf (apt-get install linux-perf)" >&2; exit 1; }
case=${1:-full_hook/memory}
runs=${2:-100000}
freq=999
source host/benches/lib.sh
bench=$(hook_bench)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Builds the guests (a child process) before sampling.
HOOK_BENCH_PROFILE=$case HOOK_BENCH_PROFILE_RUNS=1 "$bench" >/dev/null
HOOK_BENCH_PROFILE=$case HOOK_BENCH_PROFILE_RUNS=$runs \
    perf record -q -F $freq --call-graph dwarf,16384 -o "$out/perf.data" "$bench" >/dev/null 2>"$out/log" \
    || { cat "$out/log" >&2; exit 1; }
perf script -i "$out/perf.data" -F ip,sym,dso 2>/dev/null | awk -v runs="$runs" -v freq="$freq" -v case="$case" '
function phase(stack, leaf) {
    # The innermost frame in no binary perf knows: the charm (JIT code).
    if (leaf ~ /\[unknown\]|perf-[0-9]+\.map|\[JIT\]/) return "charm code (wasm)";
    if (stack ~ /cranelift|regalloc2|CompileCache|Component::from/) return "";
    if (stack ~ /reset_with_pagemap|reset_with_original_mapping/) return "slot memory reset (after the hook)";
    if (stack ~ /drop_in_place<wasmtime::runtime::store/) return "store drop, other";
    if (stack ~ /_instantiate::|Instantiator::|InstancePre/) return "instantiate";
    if (stack ~ /HostFn|charm_host::imports::/) return "host calls (imports, lowering, realloc)";
    if (stack ~ /StateStore>::snapshot/) return "store snapshot";
    if (stack ~ /StateStore>::commit/) return "store commit";
    if (stack ~ /full_hook|run_hook|Floor::hook/) return "other (store, context, tokio)";
    return "";
}
function flush() {
    if (nframes == 0) return;
    p = phase(stack, leaf);
    if (p != "") { count[p]++; total++ }
    nframes = 0; stack = ""; leaf = "";
}
/^$/ { flush(); next }
{
    if (nframes == 0) leaf = $0;
    stack = stack "\n" $0; nframes++;
}
END {
    flush();
    if (total == 0) { print "phases.sh: no samples in the hook loop" > "/dev/stderr"; exit 1 }
    per_hook = total / freq / runs * 1e6;
    printf "%s: %d samples in %d hooks at %d Hz, about %.1f us of CPU per hook\n", case, total, runs, freq, per_hook;
    printf "%-42s %8s %7s %9s\n", "phase", "samples", "share", "us/hook";
    n = 0;
    for (name in count) order[++n] = name;
    # By share, largest first.
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
        if (count[order[j]] > count[order[i]]) { t = order[i]; order[i] = order[j]; order[j] = t }
    for (i = 1; i <= n; i++)
        printf "%-42s %8d %6.1f%% %9.2f\n", order[i], count[order[i]], 100 * count[order[i]] / total, per_hook * count[order[i]] / total;
}'
