#!/bin/sh
# The peer comparison: charm-host's hook benchmark (plain loops only), then Discourse as a
# Python ops charm timed through ops Scenario and the Python process floor of a Juju hook,
# printed as ratios against charm-host's full hook.
#
#   host/benches/peer/run.sh
#
# Creates a virtualenv in target/peer-venv (PyPI must be reachable on the first run).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
venv="$root/target/peer-venv"
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "ops[testing]==3.9.0"

cd "$root"
HOOK_BENCH_PLAIN_ONLY=1 cargo bench --quiet -p charm-host --bench hook
"$venv/bin/python" -c 'import ops, sys; print(f"ops {ops.__version__}, Python {sys.version.split()[0]}")'
cd "$here"
"$venv/bin/python" peer.py "$root/target/bench-results/hook.json"
