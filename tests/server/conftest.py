"""Fixtures of the server tests: a live `tally serve` on a loopback port.

Each server is started by the tests with `--port 0` (it prints the chosen port
on stderr) and stopped with SIGTERM, which must end it with status 0. Its
stderr is kept; a failing test shows its tail.

What a test needs and does not find (the default model, a program such as
nginx or chromium) skips it with the reason, unless TALLY_REQUIRE_MODEL=1 or
TALLY_REQUIRE_SERVER_DEPS=1 is set (scripts/test.sh sets the first): then it
fails.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
REQUIRED = os.environ.get("TALLY_REQUIRE_MODEL") == "1" or os.environ.get("TALLY_REQUIRE_SERVER_DEPS") == "1"
START_TIMEOUT_S = 120  # loading the model on a busy machine


def need(ok: bool, why: str) -> None:
    """Skips the test with `why` when `ok` is false, or fails it when the dependencies are required."""
    if ok:
        return
    if REQUIRED:
        pytest.fail(f"{why} (required: TALLY_REQUIRE_MODEL=1 or TALLY_REQUIRE_SERVER_DEPS=1)", pytrace=False)
    pytest.skip(why)


def tally_home() -> pathlib.Path:
    return pathlib.Path(os.environ.get("TALLY_HOME") or pathlib.Path.home() / ".cache" / "tally")


def default_model() -> pathlib.Path:
    """The tests' model, smollm2:135m (the server's own default, qwen2.5-coder:1.5b, is too slow for them)."""
    return tally_home() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def tally_bin() -> str:
    b = os.environ.get("TALLY_BIN")
    if b:
        return b
    for d in ("build/dev", "build/ci", "build/release"):
        p = ROOT / d / "tally"
        if p.exists():
            return str(p)
    pytest.fail("no tally binary: set TALLY_BIN or build build/dev", pytrace=False)


def find_program(name: str, *extra_dirs: str) -> str | None:
    p = shutil.which(name)
    if p:
        return p
    for d in extra_dirs:
        q = pathlib.Path(d) / name
        if q.exists() and os.access(q, os.X_OK):
            return str(q)
    return None


class TallyServer:
    """One `tally serve` process on 127.0.0.1 with a port of the kernel's choosing (or the args' --port)."""

    def __init__(self, *args: str):
        need(default_model().exists(), f"smollm2:135m is not installed at {default_model()} (tally pull smollm2:135m)")
        model = [] if "-m" in args or "--model" in args else ["-m", str(default_model())]
        port = [] if "--port" in args else ["--port", "0"]  # a test may name one (a restart on the same origin)
        self.args = ["serve", "--host", "127.0.0.1", *port, *model, *args]
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen([tally_bin(), *self.args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        m = self.wait_for_log(r"on http://127\.0\.0\.1:(\d+)/", START_TIMEOUT_S)
        self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        self.returncode: int | None = None

    def _read(self) -> None:
        for line in self.proc.stderr:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def log(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_for_log(self, pattern: str, timeout: float, start: int = 0) -> re.Match:
        """The first stderr line from `start` on that matches `pattern`; fails after `timeout` or at exit."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            i = start
            while True:
                while i < len(self.lines):
                    m = rx.search(self.lines[i])
                    if m:
                        return m
                    i += 1
                if self.proc.poll() is not None and not self._reader.is_alive():
                    raise AssertionError(f"tally serve exited ({self.proc.returncode}) before printing /{pattern}/:\n"
                                         + "\n".join(self.lines[-40:]))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no /{pattern}/ on tally serve's stderr in {timeout} s:\n"
                                         + "\n".join(self.lines[-40:]))
                self._cond.wait(min(left, 0.5))

    def get(self, path: str, headers: dict | None = None, timeout: float = 30) -> tuple[int, dict, bytes]:
        req = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def post(self, path: str, body, headers: dict | None = None, timeout: float = 120) -> tuple[int, dict, bytes]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h = {"Content-Type": "application/json", **(headers or {})}
        req = urllib.request.Request(self.url + path, data=data, headers=h, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def metrics(self, headers: dict | None = None) -> dict[str, float]:
        """GET /metrics as {name or name{labels}: value}."""
        status, _, body = self.get("/metrics", headers)
        assert status == 200, body
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def wait_idle(self, timeout: float = 30, headers: dict | None = None) -> dict[str, float]:
        """Polls /metrics until nothing is queued or running and no KV block is held; returns the metrics."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics(headers)
            if m["tally_queue_depth"] == 0 and m["tally_running_requests"] == 0 and m["tally_kv_blocks_used"] == 0:
                return m
            if time.monotonic() > deadline:
                raise AssertionError(f"the server is not idle after {timeout} s: " + json.dumps(
                    {k: v for k, v in m.items() if k.startswith(("tally_queue", "tally_running", "tally_kv_blocks"))}))
            time.sleep(0.05)  # a poll interval

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then waits; returns the exit status (killed and failed after `timeout`)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"tally serve did not exit {timeout} s after SIGTERM:\n{self.log()[-4000:]}")
        self._reader.join(10)
        self.returncode = self.proc.returncode
        return self.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        shared = getattr(item.module, "tally_shared_server", None)
        for s in list(getattr(item, "tally_servers", [])) + ([shared] if shared else []):
            rep.sections.append((f"tally serve {' '.join(s.args[5:])} stderr (tail)", "\n".join(s.lines[-60:])))


@pytest.fixture
def start_server(request):
    """Starts servers for one test (start_server('--parallel', '1', ...)); each must stop with status 0."""
    servers: list[TallyServer] = []
    request.node.tally_servers = servers

    def start(*args: str) -> TallyServer:
        s = TallyServer(*args)
        servers.append(s)
        return s

    yield start
    failures = []
    for s in servers:
        try:
            if s.returncode is None and s.stop() != 0:
                failures.append(f"tally serve exited {s.returncode}:\n{s.log()[-3000:]}")
        finally:
            s.kill()
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


@pytest.fixture(scope="module")
def server(request):
    """A server shared by a module's tests: 4 sequences at once, a 4096-position pool, replies of at most 256 tokens."""
    s = TallyServer("--parallel", "4", "--queue", "32", "-c", "4096", "--max-tokens", "256")
    request.module.tally_shared_server = s
    yield s
    try:
        assert s.stop() == 0, f"tally serve exited {s.returncode}:\n{s.log()[-3000:]}"
    finally:
        s.kill()



def pytest_sessionfinish(session, exitstatus):
    # Under CTest (tests/server/run.sh), a file whose every test skipped reports CTest's skip code.
    if os.environ.get("TALLY_CTEST") == "1" and exitstatus == 0:
        rep = session.config.pluginmanager.get_plugin("terminalreporter")
        if rep is not None and rep.stats.get("skipped") and not rep.stats.get("passed"):
            session.exitstatus = 77
