#!/usr/bin/env bash
# Creates the Python environment of the server tests (tests/server/): a venv at
# $TALLY_HOME/venv-test (TALLY_HOME defaults to ~/.cache/tally; TALLY_TEST_VENV
# overrides the path) with the pinned packages of
# scripts/requirements-server-tests.txt, from PyPI. Idempotent and quick once
# done: a stamp holds the requirements' hash. scripts/test.sh calls it; the
# Debian packages the tests drive (curl, nginx, chromium, chromium-driver)
# come from scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
home="${TALLY_HOME:-$HOME/.cache/tally}"
venv="${TALLY_TEST_VENV:-$home/venv-test}"
req=scripts/requirements-server-tests.txt
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c '' 2>/dev/null && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
echo "setup_test_env: installing $req into $venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
echo "$want" >"$stamp"
echo "setup_test_env: $venv ready"
