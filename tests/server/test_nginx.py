"""docs/deploy.md, run: two tally serve replicas behind nginx with
`hash $tally_conversation consistent`. nginx runs without root, everything in
a temporary folder, on a loopback port, with the configuration block taken
from docs/deploy.md itself. The second turn of a conversation through the
proxy reaches the first turn's replica and is a prefix-cache hit."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import time
import uuid

import pytest

from conftest import ROOT, find_program, need

DOC = ROOT / "docs" / "deploy.md"


def doc_block() -> str:
    m = re.search(r"```nginx\n(.*?)```", DOC.read_text(), re.S)
    assert m, "docs/deploy.md has no ```nginx block"
    return m.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    def __init__(self, exe: str, folder, replicas: list[int]):
        block = doc_block()
        for doc_port, port in zip((8081, 8082), replicas):
            assert f"127.0.0.1:{doc_port};" in block
            block = block.replace(f"127.0.0.1:{doc_port};", f"127.0.0.1:{port};")
        self.folder = folder
        for attempt in range(5):  # the free port may be taken between choosing and binding it
            self.port = free_port()
            assert "listen 127.0.0.1:8080;" in block
            conf = folder / "nginx.conf"
            d = str(folder)
            # As root, nginx would run its workers as nobody, who cannot enter a private temp folder.
            user = "user root;\n" if os.geteuid() == 0 else ""
            conf.write_text(f"""{user}worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 512; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
{block.replace("listen 127.0.0.1:8080;", f"listen 127.0.0.1:{self.port};")}
}}
""")
            self.proc = subprocess.Popen([exe, "-p", d, "-c", str(conf), "-e", f"{d}/error.log"],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if self._wait_up():
                return
        raise AssertionError(f"nginx did not start:\n{self.error_log()}")

    def error_log(self) -> str:
        p = self.folder / "error.log"
        return p.read_text()[-4000:] if p.exists() else ""

    def _wait_up(self) -> bool:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                status, _, _ = self.request("GET", "/health")
                if status == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.05)  # poll until nginx listens and proxies
        raise AssertionError(f"nginx never answered /health:\n{self.error_log()}")

    def request(self, method: str, path: str, body: dict | None = None, key: str | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["X-Conversation-Id"] = key
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        r = conn.getresponse()
        out = r.read()
        conn.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def cluster(start_server, tmp_path):
    exe = find_program("nginx", "/usr/sbin", "/usr/local/sbin")
    need(exe is not None, "nginx is not installed (scripts/setup.sh installs it)")
    replicas = [start_server("--parallel", "2", "-c", "4096", "--max-tokens", "512", "-t", "1") for _ in range(2)]
    ng = Nginx(exe, tmp_path, [s.port for s in replicas])
    try:
        yield ng, {f"127.0.0.1:{s.port}": s for s in replicas}
    finally:
        ng.stop()


def test_conversation_stays_on_its_replica_and_hits_the_prefix_cache(cluster):
    ng, replicas = cluster

    # The same key always goes to the same replica; different keys reach both.
    placement = {}
    for i in range(24):
        seen = {ng.request("GET", "/health", key=f"conversation-{i}")[1]["x-tally-upstream"] for _ in range(2)}
        assert len(seen) == 1, f"conversation-{i} went to {seen}"
        placement[f"conversation-{i}"] = seen.pop()
    assert set(placement.values()) == set(replicas), placement
    key = "conversation-0"
    home = placement[key]
    other_key = next(k for k, v in placement.items() if v != home)

    # Turn 1.
    question = f"My name is Ada and my ticket is {uuid.uuid4().hex[:12]}. What is a prefix cache?"
    turn1 = [{"role": "user", "content": question}]
    status, h, out = ng.request("POST", "/v1/chat/completions",
                                {"messages": turn1, "max_tokens": 32, "temperature": 0}, key=key)
    assert status == 200, out
    assert h["x-tally-upstream"] == home
    r1 = json.loads(out)
    p1 = r1["usage"]["prompt_tokens"]
    answer = r1["choices"][0]["message"]["content"]

    # Turn 2, streamed through the proxy: same replica, the first turn's prompt from the cache.
    turn2 = turn1 + [{"role": "assistant", "content": answer}, {"role": "user", "content": "And why does it help?"}]
    hits_before = {a: s.metrics()["tally_prefix_cache_hit_tokens_total"] for a, s in replicas.items()}
    status, h, out = ng.request("POST", "/v1/chat/completions",
                                {"messages": turn2, "max_tokens": 16, "temperature": 0, "stream": True,
                                 "stream_options": {"include_usage": True}}, key=key)
    assert status == 200, out
    assert h["x-tally-upstream"] == home
    assert h["content-type"].startswith("text/event-stream")
    assert out.endswith(b"data: [DONE]\n\n")
    usage = [json.loads(e[6:]) for e in out.split(b"\n\n") if e.startswith(b"data: {")][-1]["usage"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert usage["prompt_tokens"] > p1
    assert cached >= p1 - 16, f"turn 2 took {cached} tokens from the cache; turn 1's prompt alone had {p1}"
    hits_after = {a: s.metrics()["tally_prefix_cache_hit_tokens_total"] for a, s in replicas.items()}
    assert hits_after[home] - hits_before[home] == cached
    assert all(hits_after[a] == hits_before[a] for a in replicas if a != home)

    # The control: the same turn 2 under a key of the other replica recomputes the conversation.
    status, h, out = ng.request("POST", "/v1/chat/completions",
                                {"messages": turn2, "max_tokens": 1, "temperature": 0}, key=other_key)
    assert status == 200 and h["x-tally-upstream"] != home
    elsewhere = json.loads(out)["usage"]["prompt_tokens_details"]["cached_tokens"]
    print(f"turn 1: {p1} prompt tokens on {home}; turn 2: {usage['prompt_tokens']} prompt tokens, {cached} cached; "
          f"turn 2 on the other replica: {elsewhere} cached")
    assert elsewhere < p1 - 16


def test_disconnect_through_the_proxy_cancels_on_the_replica(cluster):
    ng, replicas = cluster
    conn = http.client.HTTPConnection("127.0.0.1", ng.port, timeout=120)
    conn.request("POST", "/v1/chat/completions", body=json.dumps({
        "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
        "max_tokens": 512, "temperature": 0, "stream": True}),
        headers={"Content-Type": "application/json", "X-Conversation-Id": "long-story"})
    r = conn.getresponse()
    assert r.status == 200
    home = replicas[r.getheader("X-Tally-Upstream")]
    while True:  # up to the first token
        line = r.readline()
        assert line, "the stream ended early"
        if line.startswith(b"data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
            break
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    home.wait_idle(timeout=20)
    m = home.wait_for_log(r"chat \S+ (\w+): \d+ prompt tokens \(\d+ cached\), (\d+) generated", 10)
    assert m.group(1) == "cancelled" and int(m.group(2)) < 512, m.group(0)
