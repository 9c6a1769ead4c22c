"""Times the peers of `charm-host` and prints them against its hook benchmark.

- ops Scenario: DiscourseCharm's db-relation-changed as leader, in-process, one
  `Context.run` per event (Scenario cannot set pod specs, a deprecated API, so the mocked
  backend just records the spec; our host validates it).
- The Python process floor of a Juju hook: `python -c "import ops"` as a fresh process,
  which every Juju hook pays before any charm code runs (Juju also starts a process per
  hook tool call, not counted here).

Usage: peer.py HOOK_JSON   (the figures `cargo bench -p charm-host --bench hook` wrote)
"""

import json
import statistics
import subprocess
import sys
import time

import scenario.mocking
from ops import testing

from discourse_charm import CONFIG, META, DiscourseCharm

SCENARIO_RUNS = 2000
PROCESS_RUNS = 30

recorded_specs = []


def record_pod_spec(self, spec, k8s_resources=None):
    recorded_specs.append(spec)


scenario.mocking._MockModelBackend.pod_spec_set = record_pod_spec


def scenario_event_seconds():
    ctx = testing.Context(DiscourseCharm, meta=META, config=CONFIG)
    relation = testing.Relation(
        "db",
        interface="pgsql",
        remote_app_name="postgresql",
        remote_app_data={
            "master": "host=postgresql-0.postgresql-endpoints port=5432 "
            "dbname=discourse user=discourse password=secret"
        },
    )
    state = testing.State(leader=True, relations={relation})
    event = ctx.on.relation_changed(relation, remote_unit=0)
    out = ctx.run(event, state)
    assert out.unit_status == testing.ActiveStatus(""), out.unit_status
    assert recorded_specs, "the charm set no pod spec"
    times = []
    for _ in range(SCENARIO_RUNS):
        start = time.perf_counter()
        ctx.run(ctx.on.relation_changed(relation, remote_unit=0), state)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def process_floor_seconds():
    times = []
    for _ in range(PROCESS_RUNS):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import ops"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    ours = json.load(open(sys.argv[1]))
    hook = ours["full_hook/memory"]["p50_us"] * 1e-6
    floor = ours["floor"]["p50_us"] * 1e-6
    scenario_s = scenario_event_seconds()
    process_s = process_floor_seconds()
    rows = [
        ("charm-host: wasmtime floor (empty charm)", floor),
        ("charm-host: full hook, memory store", hook),
        ("charm-host: full hook, SQLite store", ours["full_hook/sqlite"]["p50_us"] * 1e-6),
        ("ops Scenario: one event, in-process", scenario_s),
        ('Juju hook floor: python -c "import ops"', process_s),
    ]
    print(f"| case | p50 | vs charm-host full hook (memory) |")
    print(f"|---|---|---|")
    for name, seconds in rows:
        if seconds >= 1e-3:
            shown = f"{seconds * 1e3:.2f} ms"
        else:
            shown = f"{seconds * 1e6:.1f} µs"
        print(f"| {name} | {shown} | {seconds / hook:,.1f}x |")


if __name__ == "__main__":
    main()
