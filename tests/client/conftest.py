"""Fixtures of the client tests: a live `python -m service` on 127.0.0.1, and the two places a
program can run (`mode`: embedded in-process, or remote against that server)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = os.path.dirname(os.path.abspath(__file__))
for path in (str(ROOT), HERE):
    if path not in sys.path:  # the checkout's client/ (and client_testkit) win over any installed copy
        sys.path.insert(0, path)

from client_testkit import Recorder, free_port  # noqa: E402,F401

import client  # noqa: E402
from client import state as client_context  # noqa: E402


class LiveServer:
    def __init__(self, proc, url, log):
        self.proc, self.url, self.log = proc, url, log

    def text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text

    def requests(self, endpoint: str, status: str = "200") -> float:
        """gradserve_requests_total for POST `endpoint` with `status` (0 before the first)."""
        pattern = re.compile(
            r'^gradserve_requests_total\{(?=[^}]*endpoint="%s")(?=[^}]*method="POST")(?=[^}]*status="%s")[^}]*\}\s+(\S+)$'
            % (re.escape(endpoint), status),
            re.M,
        )
        match = pattern.search(self.metrics())
        return float(match.group(1)) if match else 0.0


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """`python -m service` on a free loopback port (settings from GRADSERVE_* env); SIGTERM at the end."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSERVE_")}
    env.update(
        GRADSERVE_HOST="127.0.0.1",
        GRADSERVE_PORT=str(port),
        GRADSERVE_DEVICE="cpu",
        GRADSERVE_LOG_LEVEL="warning",
        PYTHONPATH=str(ROOT),
    )
    log = tmp_path_factory.mktemp("server") / "server.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service"], cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    srv = LiveServer(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the server exited with {proc.returncode}:\n{srv.text()}")
        try:
            if httpx.get(f"{srv.url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the server did not come up in 30 s:\n{srv.text()}")
        time.sleep(0.05)
    yield srv
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def _clean_client_state(monkeypatch):
    """Each test starts with grad mode on, no GRADSERVE_URL, and no connect() left open."""
    monkeypatch.delenv("GRADSERVE_URL", raising=False)
    monkeypatch.delenv("GRADSERVE_API_KEY", raising=False)
    client.set_grad_enabled(True)
    before = list(client_context._stack)
    yield
    client.set_grad_enabled(True)
    for s in list(client_context._stack):
        if s not in before:
            s.close()


@pytest.fixture(params=["embedded", "remote"])
def mode(request):
    return request.param


@pytest.fixture
def session(mode, request):
    """A connect()ed session, embedded or against the live server, as the default."""
    url = request.getfixturevalue("server").url if mode == "remote" else None
    with client.connect(url) as s:
        yield s


@pytest.fixture
def remote(server):
    with client.connect(server.url) as s:
        yield s


@pytest.fixture
def recorder(session):
    return Recorder(session)


@pytest.fixture(params=["engine", "embedded", "remote"])
def torch_like(request):
    """The module a program imports as `torch`: engine, or client embedded or against the server."""
    import client
    import engine

    if request.param == "engine":
        yield engine
        return
    url = request.getfixturevalue("server").url if request.param == "remote" else None
    with client.connect(url):
        yield client
