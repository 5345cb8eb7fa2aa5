"""`tally serve --cache-dir`: the prefix cache outlives the process.

A long prompt answered by one server is answered again by a new server on the
same folder with its prefix loaded from disk (usage's cached_tokens and
disk_cached_tokens, /metrics' tally_kv_disk_* series) and the same greedy
reply as a server without the folder. Killed with SIGKILL while it writes,
again and again, or given a folder with a flipped byte and a truncated file,
the next server never answers differently and counts what it removed. On a
full disk (a 3 MiB tmpfs) the answers stay the same, the failed writes are
counted and said once, nothing half-written stays, and the next server and
`tally run` find what fitted. A folder that is a file is refused at start
with one line.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import subprocess
import threading
import time

import pytest

from conftest import default_model, tally_bin

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


def kill_at_a_write(p: subprocess.Popen, folder: pathlib.Path, nth: int) -> None:
    """SIGKILL as soon as p's nth block file appears under its temporary name (or when p ends first)."""
    own = f".tmp-{p.pid}-"
    seen: set[str] = set()
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline:
        try:
            seen.update(e.name for e in os.scandir(folder) if own in e.name)
        except FileNotFoundError:
            pass
        if len(seen) >= nth:
            break
        time.sleep(0.0005)  # a block's write and fsync take milliseconds
    p.send_signal(signal.SIGKILL)
    p.wait()


def test_kill_9_looped_while_run_writes_blocks(tmp_path):
    """`tally run` killed in the middle of a block write, at a seeded random block, each time on a new prefix."""
    folder = tmp_path / "kv"
    base = [tally_bin(), "run", "-m", str(default_model()), "-n", "4", "--temp", "0", "--json",
            "--cache-dir", str(folder)]
    prompt = lambda i: f"Run {i}. " + SYSTEM * 2  # noqa: E731  (about 50 blocks, none shared between runs)
    rng = random.Random(7)
    left_behind = 0
    for i in range(12):
        p = subprocess.Popen([*base, "-p", prompt(i)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        kill_at_a_write(p, folder, rng.randint(1, 45))
        left_behind += any(folder.glob(f".*.tmp-{p.pid}-*"))
    assert left_behind >= 4, f"only {left_behind} of 12 kills landed while a block was being written"
    for i in (0, 11):  # a prefix once more, with whatever its killed run left
        cold = subprocess.run([*base[:-2], "-p", prompt(i)], capture_output=True, text=True, timeout=300)
        warm = subprocess.run([*base, "-p", prompt(i)], capture_output=True, text=True, timeout=300)
        assert cold.returncode == 0 and warm.returncode == 0, warm.stderr
        w = json.loads(warm.stdout)
        assert w["token_ids"] == json.loads(cold.stdout)["token_ids"], (i, w["kv"])
        assert w["kv"]["disk_blocks"]["corrupt"] == 0, w["kv"]  # renamed whole or not there at all
    assert not list(folder.glob(".*.tmp-*")), "a later run removes what killed writers left"


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MiB tmpfs (four of smollm2:135m's 720 KiB f16 block files), mounted for the test."""
    d = tmp_path / "small"
    d.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(d)]
    r = subprocess.run(mount if os.geteuid() == 0 else ["sudo", "-n", *mount], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"a tmpfs cannot be mounted here (root or sudo -n is needed): {r.stderr.strip()}")
    try:
        yield d
    finally:
        umount = ["umount", str(d)]
        subprocess.run(umount if os.geteuid() == 0 else ["sudo", "-n", *umount], check=True)


def test_a_full_disk_changes_no_answer_and_counts_the_failed_writes(start_server, small_disk):
    folder = small_disk / "kv"
    plain = start_server()
    expect = reply(ask(plain))
    assert plain.stop() == 0

    s = start_server("--cache-dir", str(folder))
    r = ask(s)
    assert reply(r) == expect
    m = s.metrics()
    written, failed = m["tally_kv_disk_writes_total"], m["tally_kv_disk_write_errors_total"]
    assert written >= 1 and failed >= 1, (written, failed)
    assert len(block_files(folder)) == written
    assert not list(folder.glob(".*.tmp-*")), "a failed write removes its temporary file"
    warnings = [line for line in s.lines if "warning" in line]
    assert len(warnings) == 1 and "No space left on device" in warnings[0], warnings
    assert reply(ask(s)) == expect  # the blocks that were not written are in RAM: the whole prefix is a hit
    assert s.metrics()["tally_kv_disk_write_errors_total"] == failed
    assert s.stop() == 0

    # The next server loads the blocks that fitted (the first of the prefix), and is still answered right.
    s = start_server("--cache-dir", str(folder))
    r = ask(s)
    assert reply(r) == expect
    assert cached(r)[1] == written * 32, (cached(r), written)
    assert s.stop() == 0

    # `tally run` on the full folder: its blocks (no chat template) cannot be written; it says so once,
    # chooses the same tokens and exits 0.
    base = [tally_bin(), "run", "-m", str(default_model()), "-p", SYSTEM, "-n", "6", "--temp", "0", "--json"]
    want = subprocess.run(base, capture_output=True, text=True, timeout=300)
    got = subprocess.run([*base, "--cache-dir", str(folder)], capture_output=True, text=True, timeout=300)
    assert want.returncode == 0 and got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["token_ids"] == json.loads(want.stdout)["token_ids"]
    blocks = json.loads(got.stdout)["kv"]["disk_blocks"]
    assert blocks["written"] == 0 and blocks["write_errors"] >= 1, blocks
    lines = [line for line in got.stderr.splitlines() if "warning" in line]
    assert len(lines) == 1 and "could not be written" in lines[0] and "No space left" in lines[0], got.stderr


def test_a_cache_dir_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    out = subprocess.run([tally_bin(), "serve", "--port", "0", "-m", "smollm2:135m", "--cache-dir", str(f)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a folder" in lines[0] and str(f) in lines[0], out.stderr
