"""The OpenAPI description (GET /openapi.json) drives a schema-based fuzzer
(schemathesis) against the live server: valid and invalid bodies for every
operation, a bounded number of examples each. No answer may be a 5xx, and
the server must still be up, idle and holding no KV block afterwards."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from conftest import need

EXAMPLES = int(os.environ.get("TALLY_SCHEMATHESIS_EXAMPLES", "15"))


def test_schemathesis_finds_no_server_error(start_server, tmp_path):
    st = pathlib.Path(sys.executable).parent / "schemathesis"
    need(st.exists(), f"schemathesis is not installed beside {sys.executable} (scripts/setup_test_env.sh)")
    # Small replies and contexts keep every generated request short.
    srv = start_server("--parallel", "2", "--queue", "64", "-c", "2048", "--max-tokens", "4", "--max-body", "65536")
    run = subprocess.run(
        [str(st), "run", srv.url + "/openapi.json", "--url", srv.url, "--checks", "not_a_server_error",
         "--phases", "examples,coverage,fuzzing", "--max-examples", str(EXAMPLES), "--seed", "20261201",
         "--workers", "1", "--request-timeout", "120", "--no-shrink", "--suppress-health-check", "all"],
        cwd=tmp_path, capture_output=True, text=True, timeout=1200,
        env={**os.environ, "NO_COLOR": "1", "SCHEMATHESIS_TELEMETRY": "false"})
    print(run.stdout[-6000:])
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert srv.proc.poll() is None, "the server died under the fuzzer"
    status, _, body = srv.get("/health")
    assert status == 200, body
    m = srv.wait_idle(timeout=60)
    assert m["tally_kv_blocks_used"] == 0
    assert not any(k.startswith("tally_requests_total") and 'status="5' in k for k in m), \
        [k for k in m if 'status="5' in k]
