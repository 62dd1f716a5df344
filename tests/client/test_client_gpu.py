"""The client against a server on the GPU: remote training with resident parameters (SGD with momentum and weight
decay, Adam) keeps its parameters in CuPy arrays on the server and its losses and parameters equal the engine's on
NumPy step by step. Skipped where CuPy is missing or sees no GPU."""

from __future__ import annotations

import numpy
import pytest

import client
import engine
from engine import backend
from tests.client.test_client_resident import OPTIMIZERS, train
from tests.service.service_testkit import running_server

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not backend.gpu_available(), reason="no GPU: CuPy is not installed or sees no CUDA device"),
]


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("gpu-server") / "server.log", device="cuda") as server:
        yield server


@pytest.mark.parametrize(("name", "options"), OPTIMIZERS)
def test_resident_parameters_train_on_the_gpu_as_the_engine_on_numpy(gpu_server, name, options):
    with client.connect(gpu_server.base_url) as session:
        losses, params = train(client, name, options, client.tensor)
        assert session._residents.params  # the parameters were kept resident, on the server's GPU
        remote = [p.detach().numpy() for p in params]
    want_losses, want_params = train(engine, name, options, engine.tensor)
    numpy.testing.assert_allclose(losses, want_losses, rtol=1e-9)  # float64: the two BLASes round apart far under this
    for got, want in zip(remote, want_params, strict=True):
        numpy.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-9, atol=1e-12)
