"""Slow and hostile connections against a real server (issue 11): slowloris headers, a flood of
half-sent requests, bodies whose last byte is withheld, trickled bodies. Each is bounded by a
setting, and /healthz answers during and after."""

from __future__ import annotations

import contextlib
import json
import resource
import select
import socket
import time

import httpx

from .conftest import HEADER_LENGTH, assert_error, simple_request, strict_json
from .edge_kit import HealthProbe, closed_by_server, half_sent, open_fds

SLOW_HEAD = b"POST /forward HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"  # no blank line


def _json_error(raw: bytes, status: int) -> dict:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status}".encode()), raw[:200]
    error = strict_json(body)
    assert isinstance(error["error"], str) and "node" in error and "field" in error
    return error


def test_slowloris_connections_are_closed_after_header_timeout(server_factory):
    server = server_factory(header_timeout_s=1, log_level="warning")
    rss_before = server.rss_kb()
    with HealthProbe(server.url) as probe:
        socks = [half_sent(server.port, SLOW_HEAD) for _ in range(100)]
        t0 = time.monotonic()
        answers = [closed_by_server(s, timeout=max(0.1, 15 - (time.monotonic() - t0))) for s in socks]
        elapsed = time.monotonic() - t0
    for sock in socks:
        sock.close()
    assert all(a is not None for a in answers), f"{sum(a is None for a in answers)} connections still open"
    assert elapsed < 15
    error = _json_error(answers[0], 408)
    assert "header_timeout_s" in error["error"]
    assert not probe.failures, probe.failures[:3]
    assert server.rss_kb() - rss_before < 50_000
    assert httpx.post(server.url + "/forward", json=simple_request(), timeout=30).status_code == 200


def test_a_flood_of_half_sent_requests_cannot_exhaust_descriptors(server_factory):
    cap = 64
    server = server_factory(max_connections=cap, header_timeout_s=3, log_level="warning")
    fds_idle = open_fds(server.pid)
    socks, refused = [], 0
    try:
        for _ in range(400):
            socks.append(half_sent(server.port, SLOW_HEAD))
        time.sleep(0.5)
        peak_fds = open_fds(server.pid)
        for sock in socks:
            sock.settimeout(0.01)
            with contextlib.suppress(TimeoutError, OSError):
                if sock.recv(100).startswith(b"HTTP/1.1 503"):
                    refused += 1
        assert peak_fds <= fds_idle + cap + 8, (fds_idle, peak_fds)
        assert refused >= 400 - cap - 8, refused
        # the held connections time out (header_timeout_s), and the server takes new ones again
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(server.url + "/healthz", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
    finally:
        for sock in socks:
            sock.close()
    assert httpx.post(server.url + "/forward", json=simple_request(), timeout=30).status_code == 200
    info = httpx.get(server.url + "/info", timeout=5).json()["limits"]
    assert info["max_connections"] == cap and info["header_timeout_s"] == 3


def _content_length(raw: bytes) -> int:
    head = raw.partition(b"\r\n\r\n")[0].lower()
    return int(head.split(b"content-length:")[1].split(b"\r\n")[0])


def test_endless_headers_are_refused_at_the_header_size_bound(server_factory):
    """Request lines and headers are bounded in size (service.connections.MAX_HEADER_BYTES), not
    only in time: a client streaming headers that never end gets 431 and is closed long before
    header_timeout_s, on a fresh connection and on a kept-alive one; headers under the bound pass."""
    from service.connections import MAX_HEADER_BYTES

    server = server_factory(header_timeout_s=60, log_level="warning")
    rss_before = server.rss_kb()
    filler = b"X-Filler: " + b"a" * 1000 + b"\r\n"
    for kept_alive in (False, True):
        sock = half_sent(server.port, b"")
        if kept_alive:
            _one_request(sock)
        t0 = time.monotonic()
        with sock:
            sock.sendall(SLOW_HEAD)
            with contextlib.suppress(OSError):  # the server may close while we still send
                for _ in range(4 * MAX_HEADER_BYTES // len(filler)):
                    sock.sendall(filler)
                    time.sleep(0.001)
            answer = closed_by_server(sock, timeout=20)
        assert answer is not None and time.monotonic() - t0 < 20
        error = _json_error(answer, 431)
        assert str(MAX_HEADER_BYTES) in error["error"]
    big_but_allowed = {"X-Filler": "a" * (MAX_HEADER_BYTES // 2)}
    assert (
        httpx.post(server.url + "/forward", json=simple_request(), headers=big_but_allowed, timeout=30).status_code
        == 200
    )
    assert server.rss_kb() - rss_before < 50_000


def _withheld_binary(port: int, size: int):
    """A binary request of `size` bytes declared, all sent but the last byte."""
    header = json.dumps(
        {
            "graph": {
                "version": 1,
                "nodes": [{"id": "x", "op": "input"}, {"id": "s", "op": "sum", "inputs": ["x"]}],
                "outputs": ["s"],
            },
            "inputs": [
                {"name": "x", "shape": [size // 4], "datatype": "FP32", "parameters": {"binary_data_size": size}}
            ],
        }
    ).encode()
    head = (
        f"POST /forward HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n{HEADER_LENGTH}: "
        f"{len(header)}\r\nContent-Length: {len(header) + size}\r\n\r\n"
    ).encode()
    sock = half_sent(port, head + header)
    chunk = b"\0" * 2**20
    left = size - 1
    while left > 0:
        sock.sendall(chunk[: min(left, len(chunk))])
        left -= min(left, len(chunk))
    return sock


def test_withheld_bodies_are_bounded_by_the_body_budget_and_timeout(server_factory):
    size, timeout = 96 * 2**20, 6
    server = server_factory(
        max_inflight_body_bytes=200 * 2**20,
        max_peer_inflight_body_bytes=200 * 2**20,  # one client here: the server-wide budget is the bound tested
        body_timeout_s=timeout,
        log_level="warning",
    )
    rss_before = server.rss_kb()
    socks, answers = [], []
    with HealthProbe(server.url) as probe:
        t0 = time.monotonic()
        for _ in range(4):
            try:
                socks.append(_withheld_binary(server.port, size))
            except OSError:  # refused and closed while we were still sending
                answers.append(b"HTTP/1.1 503 (closed while sending)")
        peak = server.rss_kb()
        answers += [closed_by_server(sock, timeout=20) for sock in socks]
        waited = time.monotonic() - t0
    for sock in socks:
        sock.close()
    assert all(a is not None for a in answers), "a withheld body still held its connection"
    timed_out = [a for a in answers if a.startswith(b"HTTP/1.1 408")]
    refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
    assert len(timed_out) == 2 and len(refused) == 2, [a[:40] for a in answers]  # room for two bodies at once
    for answer in timed_out:
        assert "body_timeout_s" in _json_error(answer, 408)["error"]
    for answer in refused:
        if b"closed while sending" not in answer:
            assert "max_inflight_body_bytes" in _json_error(answer, 503)["error"]
    assert waited < timeout + 15
    assert peak - rss_before < 2 * size // 1024 + 100_000, (rss_before, peak)
    assert not probe.failures, probe.failures[:3]
    assert httpx.post(server.url + "/forward", json=simple_request(), timeout=30).status_code == 200


def _declared(port: int, size: int, source: str = "127.0.0.1") -> socket.socket:
    """A connection that declares a `size`-byte binary body and sends none of it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    sock.sendall(
        f"POST /forward HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n{HEADER_LENGTH}: 10\r\n"
        f"Content-Length: {size}\r\n\r\n".encode()
    )
    return sock


def test_declared_bodies_that_never_come_hold_nothing_and_are_closed_when_idle(server_factory):
    """Two connections declaring 128 MiB bodies and sending nothing used to reserve the whole body budget for
    the 60 s body timeout (every POST from anyone a 503, renewable forever). Bodies are now counted as their
    bytes arrive, and a body with no byte for body_idle_timeout_s is a 408."""
    server = server_factory(body_idle_timeout_s=2, log_level="warning")
    socks = [_declared(server.port, 128 * 2**20) for _ in range(4)]
    t0 = time.monotonic()
    for _ in range(3):
        assert httpx.post(server.url + "/forward", json=simple_request(), timeout=30).status_code == 200
    answers = [closed_by_server(sock, timeout=10) for sock in socks]
    for sock in socks:
        sock.close()
    assert time.monotonic() - t0 < 8
    for answer in answers:
        assert answer is not None and "body_idle_timeout_s=2 s" in _json_error(answer, 408)["error"]


def test_one_client_cannot_take_the_whole_body_budget(server_factory):
    """A client's bodies in flight are bounded by max_peer_inflight_body_bytes; another address still posts."""
    mib = 2**20
    server = server_factory(
        max_inflight_body_bytes=64 * mib,
        max_peer_inflight_body_bytes=24 * mib,
        body_timeout_s=60,
        body_idle_timeout_s=60,  # the held body must not time out while a loaded machine sends the other
        log_level="warning",
    )
    hog = [_declared(server.port, 20 * mib) for _ in range(2)]
    for sock in hog:
        sock.sendall(b"\0" * (20 * mib - 1))  # all but the last byte: held
    answered, _, _ = select.select(hog, [], [], 15)  # whichever body passes the client's share first
    assert len(answered) == 1, answered  # one body is refused, the other held within the client's share
    refused = closed_by_server(answered[0], timeout=10)
    assert refused is not None
    assert "max_peer_inflight_body_bytes=25165824" in _json_error(refused, 503)["error"]
    held = hog[1] if answered[0] is hog[0] else hog[0]
    assert closed_by_server(held, timeout=1) is None
    other = socket.create_connection(("127.0.0.1", server.port), timeout=10, source_address=("127.0.0.2", 0))
    body = json.dumps(simple_request()).encode()
    other.sendall(
        b"POST /forward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    answer = closed_by_server(other, timeout=10)
    assert answer is not None and answer.startswith(b"HTTP/1.1 200"), answer
    for sock in [*hog, other]:
        sock.close()


def test_a_trickled_body_gets_408_at_body_timeout(server_factory):
    server = server_factory(body_timeout_s=2, log_level="warning")
    payload = json.dumps(simple_request()).encode()
    sock = half_sent(
        server.port,
        b"POST /forward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n",
    )
    t0 = time.monotonic()
    answer = None
    for byte in payload[:40]:  # one byte every 0.2 s: each read is quick, the whole body is not
        sock.sendall(bytes([byte]))
        answer = closed_by_server(sock, timeout=0.2)
        if answer is not None:
            break
    answer = answer if answer is not None else closed_by_server(sock, timeout=10)
    sock.close()
    assert answer is not None and time.monotonic() - t0 < 8
    error = _json_error(answer, 408)
    assert "body_timeout_s" in error["error"] and error["field"] == "body"
    assert httpx.post(server.url + "/forward", json=simple_request(), timeout=30).status_code == 200


def _one_request(sock) -> None:
    """Send a whole request on `sock` and read its 200 answer: the connection is kept alive."""
    body = json.dumps(simple_request()).encode()
    sock.sendall(
        b"POST /forward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    answer = b""
    while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _content_length(answer):
        answer += sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200")


def test_a_kept_alive_connections_slow_next_headers_get_408(server_factory):
    """The header deadline of a kept-alive connection's next request is armed when its first bytes come
    without the whole line and headers (service.connections: a request whose headers come in one piece
    arms none): trickled, they get 408 after header_timeout_s, as on a fresh connection."""
    server = server_factory(header_timeout_s=1, keep_alive_timeout_s=30, log_level="warning")
    sock = half_sent(server.port, b"")
    with sock:
        for _ in range(3):
            _one_request(sock)  # whole requests on one connection: no deadline left armed to fire later
        time.sleep(1.5)  # longer than header_timeout_s, idle: the keep-alive timeout's to bound, not a 408
        t0 = time.monotonic()
        sock.sendall(SLOW_HEAD)
        answer = closed_by_server(sock, timeout=15)
    assert answer is not None and 0.5 < time.monotonic() - t0 < 15
    assert "header_timeout_s" in _json_error(answer, 408)["error"]


def test_idle_keep_alive_connections_are_closed(server_factory):
    server = server_factory(keep_alive_timeout_s=1, log_level="warning")
    sock = half_sent(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = closed_by_server(sock, timeout=10)
    sock.close()
    assert answer is not None and answer.startswith(b"HTTP/1.1 200")
    assert_error(
        httpx.post(server.url + "/forward", content=b"{", headers={"Content-Type": "application/json"}, timeout=10)
    )


def test_the_server_raises_its_open_file_limit_to_the_hard_limit(server_factory):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(1024, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))  # inherited by the server process
    try:
        server = server_factory(log_level="warning")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    with open(f"/proc/{server.pid}/limits") as fh:
        line = next(line for line in fh if line.startswith("Max open files"))
    server_soft, server_hard = line.split()[3:5]
    assert server_soft == server_hard == str(hard)
    assert httpx.get(server.url + "/info", timeout=10).json()["limits"]["max_connections"] <= hard - 64
