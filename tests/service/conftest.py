"""Fixtures of the service tests: a real uvicorn process on 127.0.0.1 and in-process ASGI apps.

`api` runs a test twice, once through the ASGI app (TestClient, lifespan included) and once
against the session's uvicorn process; both are configured by the same SETTINGS.
"""

from __future__ import annotations

import os
import sys

import httpx
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # service_testkit lives here (also under --import-mode=importlib)
    sys.path.insert(0, HERE)

from service_testkit import asgi_client, running_server  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_backend():
    """App lifespans select the backend globally; give other tests the one they had."""
    from engine import backend

    device = backend.device
    yield
    if backend.device != device:
        backend.use(device)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("server") / "server.log") as srv:
        yield srv
    assert srv.proc.returncode == 0, srv.text()


@pytest.fixture(scope="session")
def http(server):
    with httpx.Client(base_url=server.base_url, timeout=30.0) as client:
        yield client


@pytest.fixture(scope="session")
def asgi():
    with asgi_client() as client:
        yield client


@pytest.fixture(params=["asgi", "uvicorn"])
def api(request):
    """The same client interface over the in-process app and over the real server."""
    return request.getfixturevalue("asgi" if request.param == "asgi" else "http")
