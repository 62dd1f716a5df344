"""The endpoint a user would write instead of gradserve: FastAPI + uvicorn + torch (or `jax.jit`).

One fixed model per route, no graph: `POST /seed/backward` (inputs x, y, w1, w2; the seed net's
loss and the gradients of w1, w2) and `POST /tiny/backward` (input x; `sum(x * 2)` and its
gradient). Tensors come and go as Open Inference Protocol tensors, JSON or Triton's binary
extension (`Inference-Header-Content-Length`), read in place with `numpy.frombuffer`; the answer
has gradserve's shape (`outputs`, `grads`) so the same decoders read both. Written the way a
user would: a few lines of parsing, the autograd call right in the `async` route.

Served by `uvicorn benchmarks.endpoints:torch_app` (or `jax_app`); `benchmarks.peers` has the
JAX idioms. The JAX functions are compiled for the benchmark's shapes when the app is built.
"""

from __future__ import annotations

import warnings

import numpy
import orjson
from fastapi import FastAPI, Request, Response

HEADER_LENGTH = "Inference-Header-Content-Length"
DTYPES = {
    "FP32": numpy.dtype("<f4"),
    "FP64": numpy.dtype("<f8"),
    "INT64": numpy.dtype("<i8"),
    "INT32": numpy.dtype("<i4"),
}
NAMES = {dtype: name for name, dtype in DTYPES.items()}
SEED = (64, 1000, 100, 10)


def read_tensors(body: bytes, header_length: str | None, lists=("inputs",)) -> tuple[dict, bool]:
    """({name: array} of the tensors in the header's `lists`, whether binary output was asked) of a
    request body (or, with lists=("outputs", "grads"), of an answer)."""
    if header_length is None:
        head, tail = orjson.loads(body), None
    else:
        n = int(header_length)
        head, tail = orjson.loads(body[:n]), memoryview(body)[n:]
    return tensors_of(head, tail, lists), bool(head.get("parameters", {}).get("binary_data_output"))


def tensors_of(head: dict, tail=None, lists=("inputs",)) -> dict:
    """{name: array} of the tensors in a parsed header's `lists` (binary data read from `tail`)."""
    arrays, offset = {}, 0
    for t in (t for key in lists for t in head.get(key, ())):
        dtype, shape = DTYPES[t["datatype"]], t["shape"]
        if "data" in t:
            arrays[t["name"]] = numpy.asarray(t["data"], dtype).reshape(shape)
        else:
            size = t["parameters"]["binary_data_size"]
            arrays[t["name"]] = numpy.frombuffer(tail, dtype, size // dtype.itemsize, offset).reshape(shape)
            offset += size
    return arrays


def write_outputs(outputs: dict, grads: dict, binary: bool) -> tuple[bytes, dict]:
    """(body, headers) of the answer: `outputs` and `grads` as JSON or binary tensors."""
    buffers = []

    def tensor(name, array):
        array = numpy.asarray(array)
        obj = {"name": name, "shape": list(array.shape), "datatype": NAMES[array.dtype.newbyteorder("<")]}
        if binary:
            buffers.append(array.tobytes())
            obj["parameters"] = {"binary_data_size": array.nbytes}
        else:
            obj["data"] = array.reshape(-1)
        return obj

    head = orjson.dumps(
        {"outputs": [tensor(k, v) for k, v in outputs.items()], "grads": [tensor(k, v) for k, v in grads.items()]},
        option=orjson.OPT_SERIALIZE_NUMPY,
    )
    if not binary:
        return head, {}
    return b"".join([head, *buffers]), {HEADER_LENGTH: str(len(head))}


def torch_models():
    import torch

    # the inputs are read-only views of the request body; autograd never writes into them
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

    def seed(a):
        x, y = torch.from_numpy(a["x"]), torch.from_numpy(a["y"])
        w1, w2 = torch.from_numpy(a["w1"]).requires_grad_(), torch.from_numpy(a["w2"]).requires_grad_()
        loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
        loss.backward()
        return {"loss": loss.detach().numpy()}, {"w1": w1.grad.numpy(), "w2": w2.grad.numpy()}

    def tiny(a):
        x = torch.from_numpy(a["x"]).requires_grad_()
        s = (x * 2.0).sum()
        s.backward()
        return {"s": s.detach().numpy()}, {"x": x.grad.numpy()}

    return {"seed": seed, "tiny": tiny}


def jax_models():
    import jax
    import jax.numpy as jnp

    def seed_loss(w, x, y):
        d = jnp.dot(jnp.maximum(jnp.dot(x, w[0]), 0), w[1]) - y
        return jnp.sum(d * d)

    seed_vg = jax.jit(jax.value_and_grad(seed_loss))
    tiny_vg = jax.jit(jax.value_and_grad(lambda x: jnp.sum(x * 2.0)))

    def seed(a):
        loss, (g1, g2) = seed_vg((a["w1"], a["w2"]), a["x"], a["y"])
        return {"loss": numpy.asarray(loss)}, {"w1": numpy.asarray(g1), "w2": numpy.asarray(g2)}

    def tiny(a):
        s, g = tiny_vg(a["x"])
        return {"s": numpy.asarray(s)}, {"x": numpy.asarray(g)}

    n, d_in, h, d_out = SEED
    zeros = {
        "x": numpy.zeros((n, d_in), "f4"),
        "y": numpy.zeros((n, d_out), "f4"),
        "w1": numpy.zeros((d_in, h), "f4"),
        "w2": numpy.zeros((h, d_out), "f4"),
    }
    seed(zeros)
    tiny({"x": numpy.zeros(2, "f4")})
    return {"seed": seed, "tiny": tiny}


def build_app(models: dict):
    app = FastAPI()

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.post("/{model}/backward")
    async def backward(model: str, request: Request):
        arrays, binary = read_tensors(await request.body(), request.headers.get(HEADER_LENGTH))
        body, headers = write_outputs(*models[model](arrays), binary)
        return Response(body, media_type="application/octet-stream" if binary else "application/json", headers=headers)

    return app


def __getattr__(name):
    if name in ("torch_app", "jax_app"):
        app = build_app(torch_models() if name == "torch_app" else jax_models())
        globals()[name] = app
        return app
    raise AttributeError(name)
