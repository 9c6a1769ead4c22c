#!/usr/bin/env bash
# What the way a charm is built does to a hook: builds the empty charm and discourse another
# way and runs the hook bench's plain loops with them as the "B" guests, beside the usual
# builds, in the same interleaved rounds (see HOOK_BENCH_B_GUESTS in hook.rs).
#
#   host/benches/guest_builds.sh VARIANT
#
# Variants:
#   no-wasi     built for wasm32-unknown-unknown and made components with `wasm-tools
#               component new`: no WASI imports (Rust's standard library for wasm32-wasip2
#               imports 13 WASI interfaces). Needs wasm-tools (cargo install wasm-tools).
#   stack-128k  wasm32-wasip2 with a 128 KiB stack instead of Rust's 1 MiB: a smaller linear
#               memory for the slot's reset to scan.
#   at-REV      discourse as the git revision REV wrote and built it (its SDK, its pgsql
#               library, its contract), with today's empty charm: today's host running an
#               older charm, beside today's charm in the same rounds. `B/full_hook/memory`
#               against an older build's own bench's `full_hook/memory` is then the host's
#               change alone; against today's `full_hook/memory`, the charm's. REV must
#               write a contract the host still runs (0.1.0 onwards).
#
# For instructions instead of time, with the same B guests:
#   HOOK_BENCH_B_GUESTS=$PWD/target/bench-guests-b/VARIANT host/benches/instructions.sh B/floor B/full_hook/memory
# and the usual cases from a run without HOOK_BENCH_B_GUESTS: with the B charms loaded too,
# the usual floor has counted about 12k more instructions, all of them `memset` in the slot's
# memory reset (valgrind's pool has two slots, which the B charms share).
set -euo pipefail
cd "$(dirname "$0")/../.."
variant=${1:?"usage: $0 no-wasi|stack-128k|at-REV"}
build=$PWD/target/bench-guests-b/build-$variant
# Absolute: cargo runs the bench in host/.
out=$PWD/target/bench-guests-b/$variant
mkdir -p "$out"
guests=(-p empty -p discourse)
case $variant in
    no-wasi)
        command -v wasm-tools >/dev/null || { echo "guest_builds.sh: needs wasm-tools (cargo install wasm-tools)" >&2; exit 1; }
        rustup target add wasm32-unknown-unknown >/dev/null
        CARGO_TARGET_DIR=$build cargo build --quiet --profile charm --target wasm32-unknown-unknown "${guests[@]}"
        for charm in empty discourse; do
            wasm-tools component new "$build/wasm32-unknown-unknown/charm/$charm.wasm" -o "$out/$charm.wasm"
        done
        ;;
    stack-128k)
        CARGO_TARGET_DIR=$build RUSTFLAGS="-C link-arg=-zstack-size=131072" \
            cargo build --quiet --profile charm --target wasm32-wasip2 "${guests[@]}"
        cp "$build"/wasm32-wasip2/charm/{empty,discourse}.wasm "$out/"
        ;;
    at-*)
        rev=${variant#at-}
        git rev-parse --quiet --verify "$rev^{commit}" >/dev/null \
            || { echo "guest_builds.sh: $rev names no commit of this repository" >&2; exit 1; }
        src=$build/src
        rm -rf "$src" && mkdir -p "$src"
        git archive "$rev" | tar -x -C "$src"
        # The revision's own lock file and profile, so the charm is built as it was then.
        CARGO_TARGET_DIR=$build cargo build --quiet --profile charm --target wasm32-wasip2 \
            --manifest-path "$src/Cargo.toml" -p discourse
        cp "$build/wasm32-wasip2/charm/discourse.wasm" "$out/"
        CARGO_TARGET_DIR=$build/today cargo build --quiet --profile charm --target wasm32-wasip2 -p empty
        cp "$build/today/wasm32-wasip2/charm/empty.wasm" "$out/"
        ;;
    *)
        echo "guest_builds.sh: no variant $variant (no-wasi, stack-128k, at-REV)" >&2
        exit 1
        ;;
esac
HOOK_BENCH_B_GUESTS=$out HOOK_BENCH_PLAIN_ONLY=1 cargo bench -p charm-host --bench hook
