"""KServe's `InferenceRESTClient` (protocol v2, over httpx) as a second conformance oracle:
health, model readiness and gradients, with JSON and binary inputs."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.oip.oip_testkit import W, X, mlp_expected

kserve = pytest.importorskip("kserve", reason="kserve is in the dev extra; installed where it resolves")


def run(scenario):
    async def with_client():
        client = kserve.InferenceRESTClient(kserve.RESTConfig(protocol="v2", retries=0, timeout=30))
        try:
            return await scenario(client)
        finally:
            await client.close()

    return asyncio.run(with_client())


def kserve_input(name, array, binary):
    tensor = kserve.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def test_health_and_model_readiness(server, mlp):
    async def scenario(client):
        return (
            await client.is_server_live(server.base_url),
            await client.is_server_ready(server.base_url),
            await client.is_model_ready(server.base_url, mlp),
            await client.is_model_ready(server.base_url, "nope"),
        )

    assert run(scenario) == (True, True, True, False)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_gradients(server, mlp, binary):
    from kserve.protocol.infer_type import RequestedOutput

    request = kserve.InferRequest(
        model_name=mlp,
        infer_inputs=[kserve_input("x", X, binary), kserve_input("w", W, binary)],
        request_outputs=[
            RequestedOutput("loss", {"binary_data": binary}),
            RequestedOutput("grad:w", {"binary_data": binary}),
        ],
    )

    async def scenario(client):
        return await client.infer(server.base_url, request, model_name=mlp)

    response = run(scenario)
    outputs = {o.name: o.as_numpy() for o in response.outputs}
    loss, grad_w = mlp_expected()
    assert response.model_name == mlp
    assert outputs["loss"].item() == pytest.approx(loss, rel=1e-5)
    np.testing.assert_allclose(outputs["grad:w"].reshape(3, 1), grad_w, rtol=1e-5, atol=1e-6)
