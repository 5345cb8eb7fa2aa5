#!/usr/bin/env bash
# Runs one file of the server tests with pytest from the test venv (made by
# scripts/setup_test_env.sh), for CTest: run.sh TALLY_BINARY TEST_FILE.
# Without the venv: exit 77 (CTest's skip) with the reason, or 1 when
# TALLY_REQUIRE_MODEL=1 or TALLY_REQUIRE_SERVER_DEPS=1 (scripts/test.sh) asks
# for every test to run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export TALLY_BIN="$(realpath "$1")"  # the tests run from this folder
test_file="$2"
home="${TALLY_HOME:-$HOME/.cache/tally}"
venv="${TALLY_TEST_VENV:-$home/venv-test}"
if ! "$venv/bin/python" -c 'import openai, pytest, schemathesis, selenium, jsonschema' 2>/dev/null; then
  msg="server tests: no test venv at $venv (run scripts/setup_test_env.sh)"
  if [ "${TALLY_REQUIRE_MODEL:-}" = 1 ] || [ "${TALLY_REQUIRE_SERVER_DEPS:-}" = 1 ]; then
    echo "FAILED: $msg" >&2
    exit 1
  fi
  echo "SKIPPED: $msg" >&2
  exit 77
fi
export TALLY_CTEST=1  # conftest.py: a run whose tests all skipped exits 77
cd "$here"
exec "$venv/bin/python" -m pytest -p no:cacheprovider -ra --tb=short "$test_file"
