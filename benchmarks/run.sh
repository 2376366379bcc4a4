#!/usr/bin/env bash
# The full benchmark in one command: bash benchmarks/run.sh [run.py options, e.g. --only leaves-b8]
# Makes benchmarks/.venv (torch, torchvision, every peer pinned in requirements.txt, hookscope from
# this checkout) on first use, then runs every case. Results: benchmarks/results/latest.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
venv="$here/.venv"
py="$venv/bin/python"
stamp="$venv/.installed"
if [ ! -f "$stamp" ] || [ "$here/requirements.txt" -nt "$stamp" ]; then
    test -x "$py" || python3 -m venv "$venv"
    "$py" -m pip install -q --upgrade pip
    "$py" -m pip install -q torch==2.14.1 torchvision==0.29.1
    "$py" -m pip install -q -r "$here/requirements.txt"
    "$py" -m pip install -q --no-deps -e "$root"
    touch "$stamp"
fi
exec "$py" "$here/run.py" "$@"
