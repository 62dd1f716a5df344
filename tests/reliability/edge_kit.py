"""Helpers of the service-edge tests (issue 11): a /healthz prober, a server's RSS and open
descriptors, raw half-sent requests, and the slow graph."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import numpy as np

from .conftest import binary_body, matmul_chain

PROBE = """
import json, signal, sys, time, httpx
url, period = sys.argv[1], float(sys.argv[2])
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
latencies, failures = [], []
with httpx.Client(timeout=30) as client:
    print("ready", flush=True)
    while not stop:
        t0 = time.perf_counter()
        try:
            status = client.get(url).status_code
        except httpx.HTTPError as err:
            failures.append(repr(err))
        else:
            latencies.append(time.perf_counter() - t0)
            if status != 200:
                failures.append(f"status {status}")
        time.sleep(period)
print(json.dumps({"latencies": latencies, "failures": failures}), flush=True)
"""


class HealthProbe:
    """GET /healthz every `period` s from a separate process while in use (so the test's own
    work never delays it): latencies, and any failure."""

    def __init__(self, url: str, period: float = 0.02):
        self.args = [sys.executable, "-c", PROBE, url + "/healthz", str(period)]
        self.latencies: list[float] = []
        self.failures: list[str] = []

    def __enter__(self):
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        result = json.loads(out.strip().splitlines()[-1])
        self.latencies, self.failures = result["latencies"], result["failures"]

    def percentile(self, q: float) -> float:
        assert self.latencies, "the probe never got an answer"
        return float(np.percentile(self.latencies, q))


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def half_sent(port: int, head: bytes) -> socket.socket:
    """A connection that sent `head` (part of a request) and then nothing."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(head)
    return sock


def closed_by_server(sock: socket.socket, timeout: float) -> bytes | None:
    """What the server sent before closing `sock` within `timeout` s (None: still open)."""
    sock.settimeout(timeout)
    received = b""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return received
            received += data
    except (ConnectionResetError, BrokenPipeError):
        return received
    except TimeoutError:
        return None


def slow_binary(links: int, n: int = 512):
    """(body, headers) of a matmul chain of `links` [n, n] matmul + tanh steps, sent binary."""
    x = (np.random.default_rng(0).standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    return binary_body({"graph": matmul_chain(n, links)}, {"x": x})


def links_for(seconds: float, n: int) -> int:
    """How many [n, n] matmul + tanh steps run at least `seconds` on this machine: one step's time
    is taken from NumPy here (best of 5, so a loaded moment cannot shrink the chain), and a server
    only adds to it. A fixed chain length was not enough: a fast core ran 1500 links in 2 s."""
    x = (np.random.default_rng(0).standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    step = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        np.tanh(x @ x)
        step = min(step, time.perf_counter() - t0)
    return max(4, int(seconds / step) + 1)


def side_for(seconds: float, low: int = 1000, high: int = 12000) -> int:
    """n such that one float32 [n, n] @ [n, n] runs at least `seconds` on this machine (within
    [low, high]), from the FLOP rate of a 1024 matmul here (best of 3)."""
    x = np.ones((1024, 1024), np.float32)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        x @ x
        best = min(best, time.perf_counter() - t0)
    rate = 2 * 1024**3 / best
    return int(min(high, max(low, (rate * seconds / 2) ** (1 / 3))))


def slow_for(seconds: float, n: int = 768):
    """`slow_binary` sized on this machine (`links_for`) to run at least `seconds` on a server."""
    return slow_binary(links_for(seconds, n), n)


def metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith((name + " ", name + "{")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name} missing")


def wait_for(predicate, timeout: float, what: str, period: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(period)
    raise AssertionError(f"never saw {what} within {timeout} s")
