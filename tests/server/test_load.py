"""A bounded load test from a second process (bench/load_generator.py): 32
concurrent clients, 200 streamed chat requests of mixed lengths, some
cancelled mid-stream, against a server that runs 4 sequences and queues 8.
No errors but the intended 429s (each retried after its Retry-After), and
afterwards every KV block is free or cached."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from conftest import ROOT

REQUESTS = 200


def test_load_32_clients(start_server):
    srv = start_server("--parallel", "4", "--queue", "8", "-c", "4096", "--max-tokens", "64")
    before = srv.metrics()
    total_blocks = before["tally_kv_blocks_free"] + before["tally_kv_blocks_used"] + before["tally_kv_blocks_cached"]
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "load_generator.py"), "--base-url", srv.url, "--clients", "32",
         "--requests", str(REQUESTS), "--max-tokens", "16", "--seed", "7", "--cancel-fraction", "0.15",
         "--retries", "100", "--timeout", "300", "--json"],
        capture_output=True, text=True, timeout=900)
    assert run.returncode in (0, 1), run.stderr
    report = json.loads(run.stdout)
    level = report["levels"][0]
    print(json.dumps(level, indent=1))
    assert level["errors"] == 0, level["error_samples"]
    assert level["ok"] + level["cancelled"] == REQUESTS
    assert level["cancelled"] > 0
    # 32 clients against 4 running + 8 queued: the queue overflows, and says so with 429s.
    assert level["rejected_429"] > 0
    assert run.returncode == 0

    after = srv.wait_idle(timeout=60)
    assert after["tally_kv_blocks_used"] == 0
    assert after["tally_kv_blocks_free"] + after["tally_kv_blocks_cached"] == total_blocks
    assert after["tally_running_sequences"] == 0
    # The server counted what the clients saw (a stream is counted once its connection is done: poll).
    key = 'tally_requests_total{endpoint="/v1/chat/completions",status="%d"}'
    deadline = time.monotonic() + 30
    while srv.metrics().get(key % 200, 0) < REQUESTS and time.monotonic() < deadline:
        time.sleep(0.05)
    m = srv.metrics()
    assert m.get(key % 200, 0) == REQUESTS
    assert m.get(key % 429, 0) == level["rejected_429"]
    assert after["tally_prefix_cache_hit_tokens_total"] > 0  # the shared system message
    assert level["cached_tokens"] > 0
