"""One-op requests built from the registry's samples at sizes where the allocator's noise is small,
with their planned peak (wire.budget) and their measured one (tracemalloc sees NumPy's allocations).

Not a test module; `tests/reliability/test_memory_model.py` sweeps the registry with it, and it runs
as a script (`PYTHONPATH=$PWD python tests/reliability/memory_kit.py [op ...]`) to print the ratios.
"""

from __future__ import annotations

import math
import sys
import tracemalloc

import numpy as np

from engine import shapes
from engine.registry import OPS
from wire.codegen import GENERATOR
from wire.executor import Executor
from wire.handler import run
from wire.messages import Request

TARGET = 2**18  # elements of an elementwise op's largest value
BLAS_TARGET = 2**14  # of a matrix product's (FP16 and integer products run as naive loops)
DTYPES = (np.float16, np.float32, np.float64)


def scale_factor(op, sample, arrays, target) -> int:
    """The integer every dimension above 1 is multiplied by so that the largest value (the output's
    included) has about `target` elements."""
    shapes = [a.shape for a in arrays]
    shapes.append(tuple(op.infer(shapes, [a.dtype for a in arrays], op.check_attrs(dict(sample.attrs)))[0]))
    largest = max(shapes, key=math.prod)
    grown = sum(1 for d in largest if d > 1)
    if not grown:
        return 1
    return max(1, round((target / math.prod(largest)) ** (1 / grown)))


def _scaled_shape(shape, s):
    return tuple(d * s if d > 1 else d for d in shape)


def _scaled_attrs(attrs, s):
    """The attributes with the sizes they give (a `shape`, a transform's signal sizes `s`, an output's `size`)
    scaled too."""
    return {
        **attrs,
        **{k: tuple(d * s if d > 1 else d for d in attrs[k]) for k in ("shape", "s", "size") if k in attrs},
    }


SIZED_BY_ATTRS = {"affine_grid_generator"}  # inputs of fixed shape (theta: N x 2 x 3), the output sized by `size`


def _factorization(op) -> bool:
    """Whether `op`'s shape rule is one of inv's, det's, cholesky's... (made per op by `shapes.square(name)`,
    `shapes.square_to_batch(name)`, so that a refusal names it as torch's does)."""
    return getattr(op.infer, "__qualname__", "").startswith(("square.", "square_to_batch."))


SPECTRAL = (shapes.spectral_r2c, shapes.spectral_c2r)  # fft_r2c, fft_c2r: float32 and float64 only, as torch's
DECOMPOSITIONS = (shapes.eigh_packed, shapes.svd_packed, shapes.qr_packed, shapes.pinv)  # float32 and float64 too


def big_case(op, index, dtype, seed=0):
    """(input arrays, attrs) of sample `index` of `op` grown to about TARGET elements, floats in `dtype`;
    None where the sample does not grow (a 0-d one)."""
    sample = op.samples[index]
    rng = np.random.default_rng(seed)
    if sample.make is not None:
        small = [np.asarray(a) for a in sample.make(rng)]
    else:
        small = [np.empty(shape) for shape in sample.shapes]
    s = scale_factor(op, sample, small, BLAS_TARGET if op.name in ("mm", "matmul", "einsum") else TARGET)
    if s == 1:
        return None
    arrays = []
    for a in small:
        if sample.make is not None:
            grown = np.tile(a, tuple(s if d > 1 else 1 for d in a.shape)) if a.ndim else a
        else:
            parts = op.infer is shapes.spectral_c2r  # a spectrum's last axis (real, imaginary) stays 2
            fixed = op.name in SIZED_BY_ATTRS
            grown = rng.uniform(
                sample.low, sample.high, _scaled_shape(a.shape[:-1] if parts else a.shape, 1 if fixed else s)
            )
            grown = np.stack([grown, grown[::-1]], -1) if parts else grown
        if _factorization(op):  # symmetric and diagonally dominant: invertible, positive-definite
            n = grown.shape[-1]
            grown = (grown + grown.swapaxes(-1, -2)) / 2 + 5 * n * np.eye(n)
        arrays.append(grown.astype(dtype) if grown.dtype.kind == "f" else grown)
    return arrays, _scaled_attrs(sample.attrs, s)


def one_op_graph(op, arrays, attrs):
    """A graph of inputs x0.. (floating ones requiring grad) and one node `y` of `op`."""
    nodes = [
        {"id": f"x{i}", "op": "input", **({"requires_grad": True} if a.dtype.kind == "f" else {})}
        for i, a in enumerate(arrays)
    ]
    nodes.append({"id": "y", "op": op.name, "inputs": [f"x{i}" for i in range(len(arrays))], "attrs": attrs})
    return {"version": 1, "nodes": nodes, "outputs": ["y"]}


def nested_grad_graph(op, arrays, attrs, order):
    """y = op(x0, ...) and `order` grad nodes nested: g1 = d sum(y) / d x0, g2 = d sum(g1 * g1) / d x0, ..."""
    graph = one_op_graph(op, arrays, attrs)
    nodes = graph["nodes"]
    nodes.append({"id": "s0", "op": "sum", "inputs": ["y"]})
    for k in range(1, order + 1):
        nodes.append({"id": f"g{k}", "op": "grad", "inputs": [f"s{k - 1}", "x0"]})
        nodes.append({"id": f"q{k}", "op": "mul", "inputs": [f"g{k}", f"g{k}"]})
        nodes.append({"id": f"s{k}", "op": "sum", "inputs": [f"q{k}"]})
    return {"version": "1.1", "nodes": nodes, "outputs": [f"s{order}"]}


def _request(graph, arrays, output=None):
    inputs = {f"x{i}": a for i, a in enumerate(arrays)}
    grad_outputs = {} if output is None or output.size == 1 else {"y": np.ones_like(output)}
    return Request(graph=graph, inputs=inputs, grad_outputs=grad_outputs)


def measure(executor: Executor, graph, arrays, backward: bool):
    """(planned peak bytes, measured peak bytes) of one request: the measured peak is what
    tracemalloc saw allocated at once on top of the inputs (and grad_outputs), plus those."""
    path = "/backward" if backward else "/forward"
    for _ in range(3):  # warm: the plan and its forward program are cached (at the second), the program checked
        output = run(executor, "/forward", _request(graph, arrays)).outputs[graph["outputs"][0]]
    if backward:
        for _ in range(3):  # the backward's program, recorded (at the second) and checked
            run(executor, path, _request(graph, arrays, output))
    GENERATOR.idle()  # its code generated (tracemalloc would count the generator thread's allocations)
    request = _request(graph, arrays, output if backward else None)
    _, shapes = executor._plan(request)
    planned = (shapes.backward_cost if backward else shapes.forward_cost).peak_bytes
    held = sum(a.nbytes for a in request.inputs.values()) + sum(a.nbytes for a in request.grad_outputs.values())
    tracemalloc.start()
    try:
        result = run(executor, path, request)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del result
    return planned, peak + held


def cases(name, dtypes=DTYPES):
    """(sample index, dtype name, graph, arrays, backward) of every grown sample of op `name`."""
    op = OPS[name]
    for index in range(len(op.samples)):
        for dtype in dtypes:
            case = big_case(op, index, dtype)
            if case is None:
                continue
            arrays, attrs = case
            if (_factorization(op) or op.infer in SPECTRAL + DECOMPOSITIONS) and np.dtype(dtype) == np.float16:
                continue  # refused (LAPACK and torch.fft's CPU kernels have no float16): nothing to measure
            graph = one_op_graph(op, arrays, attrs)
            differentiable = op.differentiable and any(a.dtype.kind == "f" for a in arrays)
            for backward in (False, True) if differentiable else (False,):
                yield index, np.dtype(dtype).name, graph, arrays, backward


def sweep(names=None, dtypes=DTYPES, compiled=(True, False)):
    """(op, sample, dtype, backward, compiled, planned, measured) of every grown sample of every op."""
    executors = {flag: Executor(compiled=flag) for flag in compiled}
    for name in sorted(names or OPS):
        for index, dtype, graph, arrays, backward in cases(name, dtypes):
            for flag, executor in executors.items():
                planned, measured = measure(executor, graph, arrays, backward)
                yield name, index, dtype, backward, flag, planned, measured


if __name__ == "__main__":
    rows = sorted(sweep(sys.argv[1:] or None), key=lambda r: r[6] / r[5])
    for name, index, dtype, backward, flag, planned, measured in rows:
        kind = "backward" if backward else "forward"
        mode = "compiled" if flag else "engine"
        print(
            f"{measured / planned:6.2f}  {name}[{index}] {dtype} {kind} {mode}  planned {planned} measured {measured}"
        )
