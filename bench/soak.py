#!/usr/bin/env python3
"""Soak test of tally serve: many clients for a long time, with cancelled and
slow ones, while the server's memory and KV blocks are recorded over time.

    python3 bench/soak.py --tally build/release/tally --clients 32 --duration 1800 \\
        --cancel-fraction 0.15 --slow-fraction 0.05 --out soak.jsonl -- -m smollm2:135m

Starts `tally serve` (the arguments after -- are passed to it), then runs
--clients threads until --duration seconds have passed, each sending the
streamed chat requests of bench/load_generator.py's mix one after another:
a share (--cancel-fraction) is closed after one to three content chunks, a
share (--slow-fraction) reads its stream slowly (one event every
--slow-read seconds, a small receive buffer), the rest read it whole. A 429
is retried after its Retry-After and counted; anything else that is not a
complete stream is an error (429s are retried for as long as the run lasts).

Every --interval seconds a line of JSON goes to --out: the time, the
server's RSS (/proc/PID/status), its KV blocks (used, cached, free), the
running and queued requests and the answers so far. At the end the clients
stop, the server must go idle (no block used), and the run passes when:
no error; the RSS after --warmup seconds (a quarter of the run by default)
grew by at most --rss-growth (fraction) from its minimum to its maximum;
the blocks used at idle are 0. A JSON summary is printed; exit 0 on pass, 1 on fail, 2 for bad
arguments.

Standard library only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import pathlib
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from load_generator import Outcome, Target, build_mix, one_request  # noqa: E402


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def slow_request(t: Target, req: dict, retries: int, pause: float) -> Outcome:
    """A client that reads its stream slowly, through a small receive buffer, to the end."""
    out = Outcome()
    body = json.dumps({"messages": req["messages"], "max_tokens": req["max_tokens"], "temperature": 0,
                       "stream": True}).encode()
    for attempt in range(retries + 1):
        conn = t.connect()
        try:
            conn.connect()
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            conn.request("POST", t.path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status == 429:
                out.rejected_429 += 1
                after = resp.getheader("Retry-After", "")
                resp.read()
                if not after.isdigit() or attempt == retries:
                    out.status, out.error = "error", f"429 (Retry-After {after!r}, attempt {attempt})"
                    return out
                time.sleep(int(after))
                continue
            if resp.status != 200:
                out.status, out.error = "error", f"HTTP {resp.status}: {resp.read()[:300]!r}"
                return out
            done = finished = False
            while True:
                line = resp.readline()
                if not line:
                    break
                line = line.strip()
                if not line:
                    continue
                if line == b"data: [DONE]":
                    done = True
                    continue
                if not line.startswith(b"data: "):
                    out.status, out.error = "error", f"not an SSE data line: {line[:100]!r}"
                    return out
                ev = json.loads(line[6:])
                if "error" in ev:
                    out.status, out.error = "error", f"error event: {ev['error']}"
                    return out
                for c in ev.get("choices", []):
                    finished = finished or c.get("finish_reason") is not None
                    if c.get("delta", {}).get("content"):
                        out.completion_tokens += 1
                time.sleep(pause)
            if not (done and finished):
                out.status, out.error = "error", f"stream ended early (done {done}, finish_reason {finished})"
            return out
        except (OSError, http.client.HTTPException, ValueError) as e:
            out.status, out.error = "error", f"{type(e).__name__}: {e}"
            return out
        finally:
            conn.close()
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    serve_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, serve_args = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tally", required=True, help="the tally binary")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=1800, help="seconds of load")
    ap.add_argument("--cancel-fraction", type=float, default=0.15)
    ap.add_argument("--slow-fraction", type=float, default=0.05)
    ap.add_argument("--slow-read", type=float, default=0.25, help="seconds between a slow client's reads")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--interval", type=float, default=10, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds before the RSS must stay flat (default: a quarter of --duration); the KV pool's "
                         "pages are first touched then")
    ap.add_argument("--rss-growth", type=float, default=0.10,
                    help="largest allowed rise of the RSS after the warm-up, as a fraction of its minimum")
    ap.add_argument("--retries", type=int, default=100000,
                    help="retries of a request answered 429 (each after its Retry-After)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="soak.jsonl", help="where the samples go, one JSON object a line")
    a = ap.parse_args(argv)
    if a.clients < 1 or a.duration <= 0 or a.interval <= 0 or not 0 <= a.cancel_fraction + a.slow_fraction <= 1:
        ap.error("--clients and --duration must be positive, and the two fractions sum to at most 1")

    srv = subprocess.Popen([a.tally, "serve", "--host", "127.0.0.1", "--port", "0", *serve_args],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace")
    log: list[str] = []
    port: list[int] = []

    def pump():
        for line in srv.stdout:
            log.append(line)
            if not port and (m := re.search(r"on http://127\.0\.0\.1:(\d+)/", line)):
                port.append(int(m.group(1)))
            if len(log) > 2000:
                del log[:1000]

    threading.Thread(target=pump, daemon=True).start()
    t_start = time.time()
    while not port:
        if srv.poll() is not None or time.time() - t_start > 600:
            print("".join(log[-50:]), file=sys.stderr)
            print("soak: the server did not start", file=sys.stderr)
            return 1
        time.sleep(0.2)
    url = f"http://127.0.0.1:{port[0]}"
    target = Target(url, "", "", 600)
    mix = build_mix(10000, a.max_tokens, a.seed, 0.0)
    lock = threading.Lock()
    counts = {"ok": 0, "cancelled": 0, "slow": 0, "error": 0, "rejected_429": 0}
    errors: list[str] = []
    stop = threading.Event()

    def client(k: int):
        rng = random.Random(a.seed * 1000 + k)
        n = k
        while not stop.is_set():
            req = dict(mix[n % len(mix)])
            n += a.clients
            r = rng.random()
            if r < a.slow_fraction:
                out, kind = slow_request(target, req, a.retries, a.slow_read), "slow"
            else:
                req["cancel_after"] = rng.randint(1, 3) if r < a.slow_fraction + a.cancel_fraction else 0
                out = one_request(target, req, a.retries)
                kind = "cancelled" if out.status == "cancelled" else "ok"
            with lock:
                counts["rejected_429"] += out.rejected_429
                if out.status == "error":
                    counts["error"] += 1
                    if len(errors) < 20:
                        errors.append(f"{kind}: {out.error}")
                else:
                    counts[kind] += 1

    samples = []
    with open(a.out, "w") as f:
        def sample():
            m = metrics(url)
            s = {"t": round(time.time() - t_start, 1), "rss": rss_bytes(srv.pid),
                 "blocks_used": m.get("tally_kv_blocks_used"), "blocks_cached": m.get("tally_kv_blocks_cached"),
                 "blocks_free": m.get("tally_kv_blocks_free"), "running": m.get("tally_running_requests"),
                 "queued": m.get("tally_queue_depth"), **counts}
            samples.append(s)
            f.write(json.dumps(s) + "\n")
            f.flush()

        sample()
        threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(a.clients)]
        t_load = time.time()
        for t in threads:
            t.start()
        while time.time() - t_load < a.duration and srv.poll() is None:
            time.sleep(min(a.interval, max(0.0, a.duration - (time.time() - t_load))))
            sample()
        stop.set()
        for t in threads:
            t.join(timeout=900)
        idle = None
        deadline = time.time() + 120
        while srv.poll() is None and time.time() < deadline:
            m = metrics(url)
            if m.get("tally_running_requests") == 0 and m.get("tally_queue_depth") == 0:
                idle = m
                break
            time.sleep(1)
        if srv.poll() is None:
            sample()

    alive = srv.poll() is None
    if alive:
        srv.terminate()
        try:
            srv.wait(timeout=120)
        except subprocess.TimeoutExpired:
            srv.kill()
    warmup = a.duration / 4 if a.warmup is None else a.warmup
    loaded = [s for s in samples if s["t"] >= (t_load - t_start) + warmup]
    rss = [s["rss"] for s in loaded] or [samples[-1]["rss"]]
    growth = (max(rss) - min(rss)) / min(rss)
    summary = {
        "duration_s": round(time.time() - t_load, 1), "clients": a.clients, **counts,
        "rss_first": samples[0]["rss"], "warmup_s": warmup, "rss_min_after_warmup": min(rss),
        "rss_max_after_warmup": max(rss), "rss_growth": round(growth, 4),
        "blocks_used_at_idle": idle.get("tally_kv_blocks_used") if idle else None,
        "server_alive": alive, "server_exit": srv.returncode, "errors": errors, "samples": a.out,
    }
    ok = (alive and counts["error"] == 0 and idle is not None and idle.get("tally_kv_blocks_used") == 0
          and growth <= a.rss_growth and counts["ok"] > 0)
    summary["pass"] = ok
    print(json.dumps(summary, indent=1))
    if not ok:
        print("".join(log[-30:]), file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
