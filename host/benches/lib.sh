# Sourced by the bench scripts: building the hook bench and running its profiling loop.

# Builds the hook bench (cargo arguments, such as `--features profiling`, added) and prints
# its executable: the one cargo built for these arguments, not the newest file of that name
# (a build with other features is another file).
hook_bench() {
    cargo bench -p charm-host --bench hook --no-run --message-format=json "$@" 2>/dev/null \
        | grep '"reason":"compiler-artifact"' | grep '"name":"hook"' \
        | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | tail -1
}

# callgrind_runs BENCH CASE OUT: CASE's profiling loop under callgrind for 200 and 1,200
# hooks, into OUT/cg.200 and OUT/cg.1200 (logs OUT/log.*); the difference over 1,000 leaves
# out loading and compiling the charms. Keeps the perf map wasmtime writes when the bench
# has the `profiling` feature, as OUT/map.200 and OUT/map.1200.
callgrind_runs() {
    local bench=$1 case=$2 out=$3 runs pid
    # Builds the guests (a child process callgrind would not count anyway) before counting.
    HOOK_BENCH_PROFILE=$case HOOK_BENCH_PROFILE_RUNS=1 "$bench" >/dev/null
    for runs in 200 1200; do
        # A pool of two slots: valgrind's address space cannot hold the default pool's
        # reservation.
        BENCH_HOOK_SLOTS=2 HOOK_BENCH_PROFILE=$case HOOK_BENCH_PROFILE_RUNS=$runs \
            valgrind --tool=callgrind --callgrind-out-file="$out/cg.$runs" "$bench" \
            >"$out/log.$runs" 2>&1 || { cat "$out/log.$runs" >&2; return 1; }
        # Valgrind runs the bench as its own process: a map is named by valgrind's pid.
        pid=$(grep -o -m1 '^==[0-9]*==' "$out/log.$runs" | tr -d =)
        if [ -f "/tmp/perf-$pid.map" ]; then mv "/tmp/perf-$pid.map" "$out/map.$runs"; fi
    done
}

# collected OUT: instructions per hook from callgrind_runs' logs.
collected() {
    local a b
    a=$(grep -o 'Collected : [0-9]*' "$1/log.200" | grep -o '[0-9]*$')
    b=$(grep -o 'Collected : [0-9]*' "$1/log.1200" | grep -o '[0-9]*$')
    echo $(( (b - a) / 1000 ))
}
