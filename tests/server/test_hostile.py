"""tally serve against hostile HTTP clients, on raw sockets: forged metrics
labels and log lines, authentication edge cases, chunked and malformed
framing, slow clients, methods a route does not take, connection caps, and
the options `serve` must refuse at start."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time

import pytest

from conftest import TallyServer, default_model, find_program, need, tally_bin


def chat_body(text: str, **kw) -> dict:
    return {"messages": [{"role": "user", "content": text}], **kw}


def raw(srv: TallyServer, data: bytes, timeout: float = 10, read_all: bool = True, piece: int = 0) -> bytes:
    """Sends `data` on a new connection (in writes of `piece` bytes, 0: at once) and returns what comes back until
    the server closes (or `timeout`)."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=timeout) as s:
        try:
            for i in range(0, len(data), piece or max(len(data), 1)):
                s.sendall(data[i:i + (piece or len(data))])
                if piece:
                    time.sleep(0.001)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before taking everything
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            out += chunk
            if not read_all and b"\r\n\r\n" in out:
                break
        return out


def status_of(response: bytes) -> int:
    m = re.match(rb"HTTP/1\.1 (\d{3}) ", response)
    assert m, response[:200]
    return int(m.group(1))


def header_of(response: bytes, name: str) -> str | None:
    head = response.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    for line in head.split("\r\n")[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == name.lower():
            return v.strip()
    return None


def json_body(response: bytes) -> dict:
    return json.loads(response.split(b"\r\n\r\n", 1)[1])


def post_head(path: str, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}").encode()


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@pytest.fixture(scope="module")
def srv(request):
    s = TallyServer("--parallel", "2", "-c", "2048", "--max-tokens", "64", "--max-body", "1MiB",
                    "--read-timeout", "3", "--idle-timeout", "5")
    request.module.tally_shared_server = s
    yield s
    try:
        assert s.stop() == 0, f"tally serve exited {s.returncode}:\n{s.log()[-3000:]}"
    finally:
        s.kill()


# --- /metrics and the log -------------------------------------------------------------------------


def test_unknown_paths_share_one_label_and_cannot_forge_lines(srv):
    before = srv.get("/metrics")[2]
    for i in range(300):
        assert srv.get(f"/scan/{i}/%22%7D%0Atally_kv_blocks_free%201e9")[0] == 404
    r = raw(srv, b'GET /a"b\\c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
    assert status_of(r) in (400, 404)
    after = srv.get("/metrics")[2].decode()
    assert len(after) < len(before) + 400, "unknown paths grew /metrics"
    assert not re.search(r"^tally_kv_blocks_free 1e9", after, re.M)
    labels = set(re.findall(r'tally_requests_total\{endpoint="([^"]*)"', after))
    assert "other" in labels and not any(l.startswith("/scan") for l in labels), labels
    for line in after.splitlines():  # every sample line parses: name{labels} value
        assert line.startswith("#") or re.fullmatch(r'[a-z_]+(\{[a-z_]+="[^"\\\n]*"(,[a-z_]+="[^"\\\n]*")*\})? \S+', line), line


def test_the_log_escapes_control_bytes_of_the_path(srv):
    start = len(srv.lines)
    raw(srv, b"GET /x\x1b[31mred\x07/y HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    raw(srv, b"GET /\xc2\x9b2J HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")  # a C1 CSI
    srv.get("/health")  # the log line of the probes above is written before this one's
    srv.wait_for_log(r"GET /health -> 200", 10, start)
    for line in srv.lines[start:]:
        assert "\x1b" not in line and "\x07" not in line and "\u009b" not in line, repr(line)


# --- authentication -------------------------------------------------------------------------------


def test_an_empty_api_key_or_key_file_is_refused_at_start(tmp_path):
    need(default_model().exists(), "the default model is not installed")
    empty = tmp_path / "key"
    empty.write_text("\n")
    spaced = tmp_path / "key2"
    spaced.write_text("a key with spaces\n")
    for args, want in ((["--api-key", ""], "key is empty"), (["--api-key-file", str(empty)], "key is empty"),
                       (["--api-key", "k\x01"], "printable ASCII"), (["--api-key-file", str(spaced)], "printable ASCII"),
                       (["--api-key-file", "/dev/zero"], "API key file")):
        p = subprocess.run([tally_bin(), "serve", "-m", str(default_model()), "--port", "0", *args],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode in (1, 2) and want in p.stderr and len(p.stderr.splitlines()) == 1, (args, p.stderr)


def test_the_key_must_match_the_whole_header(start_server):
    s = start_server("--parallel", "1", "-c", "1024", "--api-key", "k-123")
    ok = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k-123\r\nConnection: close\r\n\r\n"
    assert status_of(raw(s, ok)) == 200
    for bad in (b"Authorization: Bearer k-123\x00more\r\n", b"Authorization: Bearer k-123 \x00\r\n",
                b"Authorization: Bearer k-123\r\nAuthorization: Bearer k-123\r\n",
                b"Authorization: Bearer k-123x\r\n", b"Authorization: bearer k-123\r\n"):
        r = raw(s, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + bad + b"Connection: close\r\n\r\n")
        assert status_of(r) in (400, 401), (bad, r[:200])


# --- framing --------------------------------------------------------------------------------------


def test_a_chunked_body_over_the_cap_is_refused_as_it_arrives(srv):
    rss0 = rss_kib(srv.proc.pid)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=20) as s:
        s.sendall(post_head("/v1/chat/completions", "Transfer-Encoding: chunked\r\n\r\n"))
        piece = b'{"messages": [{"role": "user", "content": "' + b"x" * 60000
        sent, answered = 0, b""
        try:
            while sent < 100 << 20:  # 100 MB offered
                s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        s.settimeout(10)
        try:
            while chunk := s.recv(65536):
                answered += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    assert sent < 20 << 20, f"the server took {sent} bytes of a body over a 1 MiB cap"
    assert answered and status_of(answered) == 413, answered[:300]
    assert "--max-body" in json_body(answered)["error"]["message"]
    assert rss_kib(srv.proc.pid) - rss0 < 64 << 10, "the refused body stayed in memory"


def test_a_huge_chunk_size_is_refused_at_once(srv):
    t0 = time.monotonic()
    r = raw(srv, post_head("/v1/completions", "Transfer-Encoding: chunked\r\n\r\n") + b"8000000000000000\r\nxx")
    assert status_of(r) == 413 and time.monotonic() - t0 < 2


def test_a_last_chunk_whose_extension_runs_past_its_line_is_a_400_at_once(srv):
    # An unclosed quoted string: the reader used to wait, reading all that came after it again with each read.
    t0 = time.monotonic()
    r = raw(srv, post_head("/v1/completions", "Transfer-Encoding: chunked\r\n\r\n") + b'0;e="q\r\n\r\n' + b"x" * 200000)
    assert status_of(r) == 400 and "malformed" in json_body(r)["error"]["message"], r[:300]
    assert time.monotonic() - t0 < 2


def test_a_chunk_header_over_4_kib_is_the_same_400_at_once_or_in_pieces(srv):
    body = b'{"prompt": "hi", "max_tokens": 1}'
    head = post_head("/v1/completions", "Transfer-Encoding: chunked\r\n\r\n")
    cases = [  # a valid chunk extension, and trailer fields, each over the bound
        (b"%x;%s\r\n%s\r\n0\r\n\r\n" % (len(body), b"e" * 5000, body), "a chunk header"),
        (b"%x\r\n%s\r\n0\r\n%s\r\n" % (len(body), body, b"X-T: 1\r\n" * 700), "trailer fields"),
    ]
    for chunked, what in cases:
        whole, cut = raw(srv, head + chunked), raw(srv, head + chunked, piece=997)
        for r in (whole, cut):
            assert status_of(r) == 400, r[:300]
            assert what in json_body(r)["error"]["message"] and "4096 bytes" in json_body(r)["error"]["message"]
        assert json_body(whole)["error"]["message"] == json_body(cut)["error"]["message"]


@pytest.mark.parametrize("headers,want", [
    ("Content-Length: 2\r\nContent-Length: 2\r\n", 400),
    ("Content-Length: 2\r\nContent-Length: 3\r\n", 400),
    ("Content-Length: -1\r\n", 400),
    ("Content-Length: 1e3\r\n", 400),
    ("Content-Length: 99999999999999999999999\r\n", 400),
    ("Content-Length: 2000000\r\n", 413),
    ("Transfer-Encoding: gzip\r\n", 400),
    ("Transfer-Encoding: chunked\r\nContent-Length: 2\r\n", 400),
    ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400),
    ("X-Long: " + "a" * 20000 + "\r\n", 431),
])
def test_malformed_framing_gets_a_4xx_at_once(srv, headers, want):
    t0 = time.monotonic()
    r = raw(srv, post_head("/v1/completions", headers + "\r\n") + b"{}")
    assert status_of(r) == want, r[:300]
    assert json_body(r)["error"]["message"]
    assert time.monotonic() - t0 < 2


def test_pipelined_requests_and_head(srv):
    r = raw(srv, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert r.count(b"HTTP/1.1 200 OK") == 3, r
    head = r.split(b"HTTP/1.1 200 OK")[2]
    assert b"<html" not in head.lower() and int(header_of(b"HTTP/1.1 200 OK" + head, "Content-Length")) > 1000


def test_expect_100_continue_with_curl(srv, tmp_path):
    curl = find_program("curl")
    need(curl is not None, "curl is not installed")
    body = tmp_path / "b.json"
    body.write_text(json.dumps({"content": "word " * 150000}))  # 750 KB
    p = subprocess.run([curl, "-sS", "-v", "-H", "Content-Type: application/json", "-H", "Expect: 100-continue",
                        "--data-binary", f"@{body}",
                        f"{srv.url}/tokenize"], capture_output=True, text=True, timeout=60)
    assert "HTTP/1.1 100 Continue" in p.stderr and len(json.loads(p.stdout)["tokens"]) >= 150000, p.stderr[-500:]


# --- methods --------------------------------------------------------------------------------------


@pytest.mark.parametrize("method,path,allow", [
    ("PUT", "/v1/chat/completions", "POST"), ("PATCH", "/v1/completions", "POST"),
    ("DELETE", "/v1/models", "GET, HEAD"), ("GET", "/tokenize", "POST"), ("BREW", "/health", "GET, HEAD"),
])
def test_a_method_the_route_does_not_take_is_405_with_allow_at_once(srv, method, path, allow):
    t0 = time.monotonic()
    r = raw(srv, f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    assert status_of(r) == 405 and header_of(r, "Allow") == allow, r[:300]
    assert time.monotonic() - t0 < 2


# --- slow clients ---------------------------------------------------------------------------------


def test_slow_clients_do_not_starve_health_or_streams(srv):
    """100 connections that send a header line every second (a per-read timeout never fires): /health and
    a stream are served meanwhile, and each slow one is cut off with 408 at the 3 s read timeout."""
    answers: list[bytes] = []

    def slowloris():
        try:
            with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
                s.settimeout(1)
                out = b""
                for i in range(20):
                    try:
                        s.sendall(f"X-Slow-{i}: a\r\n".encode())
                    except OSError:
                        break
                    try:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        out += chunk
                    except socket.timeout:
                        pass
                    except OSError:
                        break
                answers.append(out)
        except OSError as e:
            answers.append(repr(e).encode())

    threads = [threading.Thread(target=slowloris) for _ in range(100)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    for _ in range(5):
        t0 = time.monotonic()
        assert srv.get("/health", timeout=5)[0] == 200
        assert time.monotonic() - t0 < 1
    status, _, out = srv.post("/v1/chat/completions", chat_body("Count to five.", max_tokens=8, stream=True), timeout=30)
    assert status == 200 and out.rstrip().endswith(b"data: [DONE]")
    for t in threads:
        t.join(40)
    assert len(answers) == 100
    cut = [a for a in answers if a.startswith(b"HTTP/1.1 408") and b"--read-timeout" in a]
    assert len(cut) == 100, [a[:80] for a in answers if a not in cut][:5]


def test_connections_beyond_the_cap_get_503_at_once(start_server):
    s = start_server("--parallel", "1", "-c", "1024", "--max-connections", "8", "--read-timeout", "30")
    held = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(8)]
    try:
        time.sleep(0.3)
        t0 = time.monotonic()
        r = raw(s, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", timeout=5)
        assert status_of(r) == 503 and header_of(r, "Retry-After") == "1"
        assert "--max-connections" in json_body(r)["error"]["message"]
        assert time.monotonic() - t0 < 2
    finally:
        for h in held:
            h.close()
    deadline = time.monotonic() + 10
    while s.get("/health")[0] != 200 and time.monotonic() < deadline:  # the held ones are gone: served again
        time.sleep(0.1)
    assert s.get("/health")[0] == 200


def test_connections_beyond_the_per_client_cap_get_503(start_server):
    s = start_server("--parallel", "1", "-c", "1024", "--max-connections-per-client", "4", "--read-timeout", "30")
    held = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(4)]
    try:
        time.sleep(0.3)
        r = raw(s, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", timeout=5)
        assert status_of(r) == 503 and "--max-connections-per-client" in json_body(r)["error"]["message"]
    finally:
        for h in held:
            h.close()


# --- options refused at start ---------------------------------------------------------------------


@pytest.mark.parametrize("args,want", [
    (["--max-body", "0"], "--max-body"),
    (["--host", ""], "address is empty"),
    (["--max-tokens", str(2 ** 40)], "--max-tokens"),
    (["-c", "1"], "at least 64 positions"),
    (["--read-timeout", "0"], "--read-timeout"),
    (["--max-connections", "0"], "--max-connections"),
])
def test_serve_refuses_options_that_cannot_work(args, want):
    need(default_model().exists(), "the default model is not installed")
    p = subprocess.run([tally_bin(), "serve", "-m", str(default_model()), "--port", "0", *args], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode in (1, 2) and want in p.stderr and len(p.stderr.splitlines()) == 1, (args, p.returncode, p.stderr)


def test_a_port_in_use_is_refused(srv):
    p = subprocess.run([tally_bin(), "serve", "-m", str(default_model()), "--host", "127.0.0.1", "--port", str(srv.port)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "address already in use" in p.stderr, p.stderr
    assert srv.get("/health")[0] == 200
