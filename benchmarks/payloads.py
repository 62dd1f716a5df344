"""Protocol request bodies for the service benchmarks, built with the engine's own codec."""

from __future__ import annotations

import numpy

from wire import codec

SEED = (64, 1000, 100, 10)


def _inp(name, array, requires_grad=False):
    return {
        "id": name,
        "op": "input",
        "requires_grad": requires_grad,
        "shape": list(array.shape),
        "dtype": codec.datatype_of(array.dtype),
    }


def seed_request(dtype="float32", dims=SEED):
    """(header dict, arrays in order) of the seed net's /backward request (gradients of w1, w2); `dims`
    (N, D_in, H, D_out) makes the same net another size (the large MLP)."""
    n, d_in, h, d_out = dims
    rng = numpy.random.default_rng(0)
    arrays = {
        "x": rng.standard_normal((n, d_in)).astype(dtype),
        "y": rng.standard_normal((n, d_out)).astype(dtype),
        "w1": (rng.standard_normal((d_in, h)) / numpy.sqrt(d_in)).astype(dtype),
        "w2": (rng.standard_normal((h, d_out)) / numpy.sqrt(h)).astype(dtype),
    }
    nodes = [
        _inp("x", arrays["x"]),
        _inp("y", arrays["y"]),
        _inp("w1", arrays["w1"], True),
        _inp("w2", arrays["w2"], True),
        {"id": "h", "op": "mm", "inputs": ["x", "w1"]},
        {"id": "hr", "op": "clamp", "inputs": ["h"], "attrs": {"min": 0.0}},
        {"id": "yp", "op": "mm", "inputs": ["hr", "w2"]},
        {"id": "d", "op": "sub", "inputs": ["yp", "y"]},
        {"id": "two", "op": "constant", "attrs": {"value": 2.0}},
        {"id": "sq", "op": "pow", "inputs": ["d", "two"]},
        {"id": "loss", "op": "sum", "inputs": ["sq"]},
    ]
    graph = {"version": 1, "nodes": nodes, "outputs": ["loss"]}
    return {"graph": graph, "wrt": ["w1", "w2"]}, arrays


def tiny_request():
    x = numpy.array([1.0, 2.0], numpy.float32)
    nodes = [
        _inp("x", x, True),
        {"id": "c", "op": "constant", "attrs": {"value": 2.0}},
        {"id": "y", "op": "mul", "inputs": ["x", "c"]},
        {"id": "s", "op": "sum", "inputs": ["y"]},
    ]
    return {"graph": {"version": 1, "nodes": nodes, "outputs": ["s"]}, "wrt": ["x"]}, {"x": x}


def chain_request(length, x, a, b, salt: str = ""):
    """(header, arrays) of the /backward request of the chain of `length` alternating `* a`, `+ b`
    ops on x, summed (`worker.chain_step`), with the gradient of x: `length` + 4 nodes. A `salt`
    renames the chain's nodes, so the server sees a graph it has not planned yet."""
    nodes = [_inp("x", x, True), _inp("a", a), _inp("b", b)]
    prev = "x"
    for i in range(length):
        nodes.append(
            {
                "id": f"c{salt}{i}",
                "op": "mul" if i % 2 == 0 else "add",
                "inputs": [prev, "a" if i % 2 == 0 else "b"],
            }
        )
        prev = f"c{salt}{i}"
    nodes.append({"id": "loss", "op": "sum", "inputs": [prev]})
    return {"graph": {"version": 1, "nodes": nodes, "outputs": ["loss"]}, "wrt": ["x"]}, {"x": x, "a": a, "b": b}


def identity_request(mib: float):
    x = numpy.ones(int(mib * 2**20 // 4), numpy.float32)
    nodes = [_inp("x", x), {"id": "out", "op": "clone", "inputs": ["x"]}]
    return {"graph": {"version": 1, "nodes": nodes, "outputs": ["out"]}}, {"x": x}


def encode(header: dict, arrays: dict, binary: bool) -> tuple[bytes, dict]:
    """(body, extra HTTP headers) of a request in JSON or binary (Triton binary-data) form."""
    header = dict(header)
    if binary:
        buffers = []
        header["inputs"] = [codec.encode_binary(name, a, buffers) for name, a in arrays.items()]
        header["parameters"] = {"binary_data_output": True}
        body, length = codec.join_body(header, buffers)
        return body, {codec.HEADER_LENGTH: str(length), "Content-Type": "application/octet-stream"}
    header["inputs"] = [codec.encode_json(name, a) for name, a in arrays.items()]
    return codec.dumps(header), {"Content-Type": "application/json"}


def check_in_process():
    """Run every payload through the in-process Executor (what the service wraps)."""
    import orjson

    from wire.executor import Executor
    from wire.messages import decode_request

    ex = Executor()
    for make, method in (
        (seed_request, "backward"),
        (tiny_request, "backward"),
        (lambda: identity_request(0.01), "forward"),
    ):
        for binary in (False, True):
            body, headers = encode(*make(), binary)
            length = headers.get(codec.HEADER_LENGTH)
            head, tail = codec.split_body(body, int(length) if length else None)
            req = decode_request(orjson.loads(bytes(head)), tail, ex.limits)
            getattr(ex, method)(req)
    return True


if __name__ == "__main__":
    print(check_in_process())
