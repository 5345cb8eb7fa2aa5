"""`tally serve --cache-dir`: the prefix cache outlives the process.

A long prompt answered by one server is answered again by a new server on the
same folder with its prefix loaded from disk (usage's cached_tokens and
disk_cached_tokens, /metrics' tally_kv_disk_* series) and the same greedy
reply as a server without the folder. Killed with SIGKILL while it writes,
again and again, or given a folder with a flipped byte and a truncated file,
the next server never answers differently and counts what it removed. A
folder that is a file is refused at start with one line.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import threading
import time

from conftest import tally_bin

SYSTEM = " ".join(f"Rule {i}: answer in plain words and keep each line short." for i in range(60))


def ask(server, question: str = "Name one colour.") -> dict:
    body = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
            "temperature": 0, "max_tokens": 12}
    status, _, out = server.post("/v1/chat/completions", body)
    assert status == 200, out
    return json.loads(out)


def reply(r: dict) -> str:
    return r["choices"][0]["message"]["content"]


def cached(r: dict) -> tuple[int, int]:
    d = r["usage"]["prompt_tokens_details"]
    return d["cached_tokens"], d["disk_cached_tokens"]


def block_files(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(folder.glob("*.kvb"))


def test_a_prefix_outlives_a_restart(start_server, tmp_path):
    folder = tmp_path / "kv"
    plain = start_server()
    expect = ask(plain)
    assert plain.stop() == 0

    first = start_server("--cache-dir", str(folder))
    r = ask(first)
    assert reply(r) == reply(expect)
    assert cached(r) == (0, 0)
    m = first.metrics()
    assert m["tally_kv_disk_writes_total"] > 0 and m["tally_kv_disk_files"] == len(block_files(folder))
    assert first.stop() == 0

    second = start_server("--cache-dir", str(folder))
    r = ask(second)
    assert reply(r) == reply(expect)
    total, disk = cached(r)
    prompt = r["usage"]["prompt_tokens"]
    assert disk == total and total >= prompt - 64, (total, disk, prompt)  # whole blocks, never the last token
    m = second.metrics()
    assert m["tally_kv_disk_hits_total"] * 32 == disk
    assert m["tally_kv_disk_corrupt_total"] == 0
    # A second question on the same system prompt shares the prefix, now from RAM.
    r = ask(second, "Name one animal.")
    assert cached(r)[0] > 0 and cached(r)[1] == 0
    assert second.stop() == 0

    out = subprocess.run([tally_bin(), "cache", str(folder), "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    usage = json.loads(out.stdout)
    assert usage["block_files"] == len(block_files(folder)) > 0
    assert usage["bytes"] == sum(f.stat().st_size for f in block_files(folder))


def test_kill_9_while_writing_and_bad_files_never_change_an_answer(start_server, tmp_path):
    folder = tmp_path / "kv"
    plain = start_server()
    expect = reply(ask(plain))
    assert plain.stop() == 0

    # SIGKILL at different moments of a request that writes blocks.
    for delay in (0.05, 0.2, 0.5):
        s = start_server("--cache-dir", str(folder))
        def request(server=s) -> None:
            try:
                ask(server)
            except (OSError, AssertionError):  # the server is killed under it
                pass

        t = threading.Thread(target=request, daemon=True)
        t.start()
        time.sleep(delay)
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait()
        t.join(60)
        s.returncode = 0  # killed on purpose

    files = block_files(folder)
    if len(files) >= 2:  # spoil two blocks: a flipped byte and a truncated file
        with open(files[0], "r+b") as f:
            f.seek(300)
            b = f.read(1)
            f.seek(300)
            f.write(bytes([b[0] ^ 0x40]))
        with open(files[1], "r+b") as f:
            f.truncate(os.path.getsize(files[1]) - 7)
    s = start_server("--cache-dir", str(folder))
    assert reply(ask(s)) == expect
    assert reply(ask(s, "Name one colour.")) == expect
    m = s.metrics()
    if len(files) >= 2:
        assert m["tally_kv_disk_corrupt_total"] >= 1
    assert s.stop() == 0
    assert not list(folder.glob(".*.tmp-*")), "a later server removes what killed writers left"


def test_a_cache_dir_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    out = subprocess.run([tally_bin(), "serve", "--port", "0", "-m", "smollm2:135m", "--cache-dir", str(f)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a folder" in lines[0] and str(f) in lines[0], out.stderr
