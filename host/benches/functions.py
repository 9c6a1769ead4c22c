#!/usr/bin/env python3
"""Instructions per hook by function, the charm's own functions named.

    functions.py DIR [TOP]

DIR holds two callgrind runs of the same case, `cg.200` and `cg.1200` (200 and 1,200
hooks), and the perf maps wasmtime wrote during each, `map.200` and `map.1200`; see
`functions.sh`, which makes them. Each function's self cost is the difference between the
two runs over 1,000, which leaves out loading and compiling. Callgrind knows nothing of
the code wasmtime compiles at run time: it names it by address, which the perf map turns
into the wasm function's name.
"""

import bisect
import re
import subprocess
import sys
from collections import Counter


def load_map(path):
    """(start, size, name) for each piece of compiled code, sorted by start."""
    rows = []
    with open(path) as f:
        for line in f:
            start, size, name = line.rstrip("\n").split(" ", 2)
            rows.append((int(start, 16), int(size, 16), name))
    rows.sort()
    return rows


LEGACY_ESCAPES = {
    "$LT$": "<", "$GT$": ">", "$RF$": "&", "$BP$": "*", "$LP$": "(", "$RP$": ")",
    "$C$": ",", "$u20$": " ", "$u27$": "'", "$u5b$": "[", "$u5d$": "]", "$u7b$": "{",
    "$u7d$": "}", "$u7e$": "~", "$SP$": "@",
}


def demangle(name):
    """Rust's legacy mangling (`_ZN...E`) made readable, even when wasmtime's map cut it
    short; other names unchanged."""
    m = re.search(r"_ZN(\d.*)", name)
    if not m:
        return name
    rest, parts = m.group(1), []
    while rest and rest[0].isdigit():
        n = re.match(r"\d+", rest).group(0)
        rest = rest[len(n):]
        part = rest[: int(n)]
        rest = rest[int(n):]
        if re.fullmatch(r"h[0-9a-f]{16}", part):
            break
        if part.startswith("_$"):
            part = part[1:]
        for code, text in LEGACY_ESCAPES.items():
            part = part.replace(code, text)
        parts.append(part.replace("..", "::"))
    return name[: m.start()] + "::".join(parts)


def self_costs(run, map_path):
    rows = load_map(map_path)
    starts = [r[0] for r in rows]
    out = subprocess.run(
        ["callgrind_annotate", "--auto=no", "--inclusive=no", "--threshold=100", run],
        capture_output=True, text=True, check=True,
    ).stdout
    costs = Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) +\([ \d.]+%\) +(.*)$", line)
        if not m or "PROGRAM TOTALS" in m.group(2):
            continue
        count, where = int(m.group(1).replace(",", "")), m.group(2)
        jit = re.match(r"\?\?\?:0x([0-9a-f]+) \[\?\?\?\]", where)
        if jit:
            address = int(jit.group(1), 16)
            i = bisect.bisect_right(starts, address) - 1
            if i >= 0 and address < rows[i][0] + rows[i][1]:
                # "wasm[0]::function[12]::name": keep the name, say it is the charm's.
                name = "wasm " + re.sub(r"^wasm\[\d+\]::function\[\d+\]::", "", rows[i][2])
            else:
                name = "compiled code, unnamed"
        else:
            # "file:function [object]": the function.
            name = where.split(" [")[0]
            name = name.split(":", 1)[1] if ":" in name else name
        costs[demangle(name)] += count
    return costs


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    run_dir, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 40
    short = self_costs(f"{run_dir}/cg.200", f"{run_dir}/map.200")
    long = self_costs(f"{run_dir}/cg.1200", f"{run_dir}/map.1200")
    per_hook = Counter({k: (long[k] - short.get(k, 0)) / 1000 for k in long})
    total = sum(per_hook.values())
    wasm = sum(v for k, v in per_hook.items() if k.startswith("wasm "))
    print(f"{'instr/hook':>10} {'share':>6}  function (self)")
    for name, count in per_hook.most_common(top):
        print(f"{count:10.0f} {count / total:6.1%}  {name[:150]}")
    print(f"{total:10.0f} {1:6.0%}  all")
    print(f"{wasm:10.0f} {wasm / total:6.1%}  of which the charm's own code (wasm)")


if __name__ == "__main__":
    main()
