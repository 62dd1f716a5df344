"""tritonclient's asyncio client (`tritonclient.http.aio`, over aiohttp) against a live server:
the same protocol from a client that sends its bodies with aiohttp's content types."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tritonclient.http.aio as triton_aio

from tests.oip.oip_testkit import (
    TWO_OUTPUTS,
    W,
    X,
    config,
    host_port,
    infer_input,
    mlp_expected,
    requested,
)


def run(server, scenario):
    async def with_client():
        client = triton_aio.InferenceServerClient(url=host_port(server))
        try:
            return await scenario(client)
        finally:
            await client.close()

    return asyncio.run(with_client())


def test_health_metadata_and_repository(server):
    async def scenario(client):
        assert await client.is_server_live()
        assert await client.is_server_ready()
        assert "model_repository" in (await client.get_server_metadata())["extensions"]
        await client.load_model("aio-mlp", config=config(TWO_OUTPUTS))
        ready = await client.is_model_ready("aio-mlp")
        index = await client.get_model_repository_index()
        metadata = await client.get_model_metadata("aio-mlp")
        await client.unload_model("aio-mlp")
        return ready, index, metadata, await client.is_model_ready("aio-mlp")

    ready, index, metadata, ready_after = run(server, scenario)
    assert ready and not ready_after
    assert any(entry["name"] == "aio-mlp" for entry in index)
    assert [o["name"] for o in metadata["outputs"]] == ["y", "z", "grad:a", "grad:b"]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_gradients_concurrently(server, mlp, binary):
    """Eight infers at once on one model; each gets its own gradients back."""
    scales = [np.float32(0.5 + i / 4) for i in range(8)]

    async def scenario(client):
        async def one(scale):
            inputs = [infer_input("x", X, binary), infer_input("w", W * scale, binary)]
            result = await client.infer(mlp, inputs, outputs=requested("loss", "grad:w", binary=binary))
            return result.as_numpy("loss"), result.as_numpy("grad:w")

        return await asyncio.gather(*(one(s) for s in scales))

    for scale, (loss, grad_w) in zip(scales, run(server, scenario)):
        expected_loss, expected_grad = mlp_expected(w=W * scale)
        assert loss == pytest.approx(expected_loss, rel=1e-5)
        np.testing.assert_allclose(grad_w, expected_grad, rtol=1e-5, atol=1e-6)
