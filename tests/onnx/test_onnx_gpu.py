"""An ONNX model served from a model repository by a server on the GPU (`--device cuda`): outputs and `grad:x`
saliency as PyTorch's on the CPU, asked in plain Open Inference Protocol JSON (no tritonclient: the GPU machines
this runs on may lack it). Skipped where CuPy is missing or sees no GPU."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from engine import backend
from tests.onnx.onnx_testkit import sample, torch_grads
from tests.service.service_testkit import running_server

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not backend.gpu_available(), reason="no GPU: CuPy is not installed or sees no CUDA device"),
]
pytest.importorskip("onnx")
pytest.importorskip("torch")


def test_a_gpu_server_gives_the_same_saliency(tmp_path, exported):
    module, example, data = exported["lenet"]
    folder = tmp_path / "models" / "lenet" / "1"
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(data)
    x = sample(example, batch=3)
    seed = np.eye(5, dtype=np.float32)[[0, 3, 1]]
    body = {
        "inputs": [
            {"name": name, "shape": list(a.shape), "datatype": "FP32", "data": a.ravel().tolist()}
            for name, a in (("x", x), ("grad_output:y", seed))
        ],
        "outputs": [{"name": "y"}, {"name": "grad:x"}],
    }
    with running_server(tmp_path / "server.log", device="cuda", model_repository=str(tmp_path / "models")) as live:
        answer = httpx.post(f"{live.base_url}/v2/models/lenet/infer", json=body, timeout=60)
        assert answer.status_code == 200, answer.text[:300]
        outputs = {o["name"]: np.reshape(o["data"], o["shape"]) for o in answer.json()["outputs"]}
    expected, grad_x, _ = torch_grads(module, x, seed)
    np.testing.assert_allclose(outputs["y"], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outputs["grad:x"], grad_x, rtol=1e-4, atol=1e-5)
