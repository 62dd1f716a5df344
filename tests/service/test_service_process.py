"""The process: settings from env and flags, `gradserve serve`, workers, graceful SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import time

import httpx
import orjson
import pytest
from service_testkit import EXAMPLE, running_server

from service import cli
from service.settings import Settings

GRADSERVE = shutil.which("gradserve")


def test_settings_defaults_bind_loopback(monkeypatch):
    for name in Settings.model_fields:
        monkeypatch.delenv(f"GRADSERVE_{name.upper()}", raising=False)
    settings = Settings()
    assert settings.host == "127.0.0.1" and settings.port == 8000 and settings.workers == 1
    assert settings.api_key is None and settings.cors_origins == []
    assert settings.limits().as_dict() == type(settings.limits())().as_dict()


def test_settings_from_env(monkeypatch):
    monkeypatch.setenv("GRADSERVE_MAX_NODES", "77")
    monkeypatch.setenv("GRADSERVE_TAPE_TTL_S", "1.5")
    monkeypatch.setenv("GRADSERVE_API_KEY", "zq-secret")
    monkeypatch.setenv("GRADSERVE_LOG_LEVEL", "WARNING")
    monkeypatch.setenv("GRADSERVE_CORS_ORIGINS", "")
    settings = Settings()
    assert settings.limits().max_nodes == 77 and settings.limits().tape_ttl_s == 1.5
    assert settings.api_key.get_secret_value() == "zq-secret" and "zq-secret" not in repr(settings)
    assert settings.log_level == "warning" and settings.cors_origins == []
    monkeypatch.setenv("GRADSERVE_API_KEY", "")  # compose passes an empty value when unset: no key
    assert Settings().api_key is None


def test_cli_flags_override_env_and_reach_uvicorn(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if not k.startswith("GRADSERVE_")})
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    monkeypatch.setenv("GRADSERVE_PORT", "9001")
    monkeypatch.setenv("GRADSERVE_MAX_TAPES", "3")
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append((app, kw)))
    assert cli.main(["serve", "--port", "9002", "--workers", "3", "--device", "cpu", "--log-level", "debug"]) == 0
    ((app, kw),) = calls
    assert app == "service.cli:worker_app" and kw["factory"] is True
    assert kw["port"] == 9002 and kw["workers"] == 3 and kw["host"] == "127.0.0.1" and kw["log_level"] == "debug"
    assert kw["timeout_graceful_shutdown"] > 0
    assert kw["access_log"] is False  # service.logs writes the request lines
    assert kw["log_config"]["root"]["level"] == 10  # debug
    calls.clear()
    assert cli.main(["serve", "--log-level", "warning"]) == 0
    assert calls[0][1]["log_config"]["root"]["level"] == 30  # warning
    assert os.environ["GRADSERVE_PORT"] == "9002" and os.environ["GRADSERVE_MAX_TAPES"] == "3"
    assert os.environ["GRADSERVE_DEVICE"] == "cpu"


@pytest.mark.parametrize("preset", [None, "1"])
def test_cli_serves_without_numpy_huge_pages_unless_told(monkeypatch, preset):
    """`gradserve serve` sets NUMPY_MADVISE_HUGEPAGE=0 (read by NumPy when the engine imports it,
    and inherited by the workers) unless the operator set it."""
    environ = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if preset is not None:
        environ["NUMPY_MADVISE_HUGEPAGE"] = preset
    monkeypatch.setattr(os, "environ", environ)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    assert cli.main(["serve", "--device", "cpu"]) == 0
    assert os.environ["NUMPY_MADVISE_HUGEPAGE"] == (preset or "0")


def test_cli_rejects_bad_settings(monkeypatch, capsys):
    monkeypatch.setenv("GRADSERVE_MAX_CONCURRENCY", "0")
    assert cli.main(["serve"]) == 2
    assert "max_concurrency" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["serve", "--device", "tpu"])
    with pytest.raises(SystemExit):
        cli.main([])


def _partial_request(port: int, body: bytes, cut: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    sock.sendall(
        f"POST /backward HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body[:cut]
    )
    return sock


def _read_response(sock: socket.socket) -> tuple[int, dict]:
    chunks = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), orjson.loads(body)


@pytest.mark.skipif(GRADSERVE is None, reason="the gradserve console script is not installed")
def test_sigterm_lets_the_request_in_flight_finish_and_exits_0(tmp_path):
    """`gradserve serve`; SIGTERM arrives while a request is half sent; it still gets its 200."""
    body = orjson.dumps(EXAMPLE)
    with running_server(
        tmp_path / "server.log", command=[GRADSERVE, "serve", "--log-level", "info"], timeout_graceful_shutdown=10
    ) as server:
        sock = _partial_request(server.port, body, len(body) // 2)
        with sock:
            time.sleep(0.3)  # the server has the headers: the request is in flight
            server.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # bounded: wait until it stops accepting new connections
                try:
                    httpx.get(f"{server.base_url}/healthz", timeout=0.5)
                except httpx.TransportError:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the server kept accepting connections after SIGTERM")
            time.sleep(0.5)
            assert server.proc.poll() is None  # ...but waits for the request in flight
            sock.sendall(body[len(body) // 2 :])
            status, result = _read_response(sock)
        assert status == 200, result
        assert result["grads"][0]["data"] == pytest.approx([10.0, 14.0, 18.0])
        assert server.proc.wait(timeout=15) == 0, server.text()
    assert "Waiting for connections to close" in server.text()


def test_python_m_service_with_workers_takes_settings_from_env(tmp_path):
    with running_server(
        tmp_path / "server.log", command=[sys.executable, "-m", "service", "serve", "--workers", "2"], max_nodes=123
    ) as server:
        for _ in range(4):  # whichever worker answers has the same settings
            info = httpx.get(f"{server.base_url}/info", timeout=10).json()
            assert info["limits"]["max_nodes"] == 123
        response = httpx.post(f"{server.base_url}/backward", json=EXAMPLE, timeout=30)
        assert response.status_code == 200
        assert server.stop() == 0, server.text()


def test_cli_refuses_a_missing_gpu_in_one_line(monkeypatch, capsys):
    from engine import backend

    if backend.gpu_available():
        pytest.skip("a GPU is present here")
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if not k.startswith("GRADSERVE_")})
    assert cli.main(["serve", "--device", "cuda"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gradserve: device 'cuda' requested") and "Traceback" not in err


@pytest.mark.gpu
def test_cuda_server_computes_the_example(tmp_path):
    from engine import backend

    if not backend.gpu_available():
        pytest.skip("needs CuPy and a visible GPU")
    with running_server(tmp_path / "server.log", device="cuda") as server:
        assert httpx.get(f"{server.base_url}/readyz", timeout=10).json()["device"] == "cuda"
        response = httpx.post(f"{server.base_url}/backward", json=EXAMPLE, timeout=60)
        assert response.status_code == 200, response.text
        assert response.json()["grads"][0]["data"] == pytest.approx([10.0, 14.0, 18.0])
        assert server.stop() == 0, server.text()
