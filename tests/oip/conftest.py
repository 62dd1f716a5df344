"""Fixtures of the Open Inference Protocol tests: live servers (`python -m service`), a
tritonclient on the default one, and the MLP graph registered as a model."""

from __future__ import annotations

import pytest
import tritonclient.http as tritonclient_http

from tests.oip.oip_testkit import API_KEY, MLP, config, host_port
from tests.service.service_testkit import running_server


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("oip") / "server.log", max_models=8) as live:
        yield live


@pytest.fixture(scope="session")
def keyed_server(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("oip-key") / "server.log", api_key=API_KEY) as live:
        yield live


@pytest.fixture
def triton(server):
    client = tritonclient_http.InferenceServerClient(url=host_port(server))
    yield client
    client.close()


@pytest.fixture
def mlp(triton):
    """MLP registered as model "mlp" (unloaded afterwards)."""
    triton.load_model("mlp", config=config(MLP))
    yield "mlp"
    triton.unload_model("mlp")
