"""What an op costs, from shapes and dtypes alone: the elements it allocates, its work, and the
temporaries it holds beyond its inputs and outputs while it runs.

Work is counted in flop-equivalents: a matrix product's multiply-adds are BLAS flops, and one
element of an elementwise pass, a reduction or a copy counts `ELEMENT_OP` flops (NumPy touches
memory once per element per pass, which is much slower than a BLAS flop; measured on the CI
machine: ~4e7-8e7 elements/s against ~2e10 flop/s). Each op's declaration in the registry names
a work rule only when the default (one pass over its largest operand) does not fit, and the kind
of kernel it runs (`KERNELS`): the work is then scaled by that kernel's factor for the dtype it
runs in (`Factors`), because NumPy has BLAS only for float32/float64 products and computes float16
elementwise by converting every element. The factors are measured by `gradserve calibrate`
(`wire.calibrate`) and read from the JSON file named by GRADSERVE_COST_FACTORS when set.

Temporaries (`Scratch`) are counted in bytes: what a forward allocates besides its output, what a
composite's internal nodes keep for the backward, and what the vjps allocate besides the
gradients they return. Each op's declaration names a scratch rule where the default (a backward
temporary of the output's size, nothing else) does not fit.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields

import numpy

ELEMENT_OP = 64
# NumPy's ufunc buffers: 8192 elements of each of two operands, allocated when a ufunc broadcasts
# or casts (about 130 KiB in float64: noise beside a float output, not beside a bool one)
BUFFER_ELEMENTS = 2 * 8192
ENV = "GRADSERVE_COST_FACTORS"  # the path of a JSON file of Factors (written by `gradserve calibrate`)
KERNELS = ("elementwise", "blas")  # an op's kernel: passes over elements, or matrix products


@dataclass(frozen=True)
class Factors:
    """How many times slower than in float32 a kernel runs in a dtype (float32 and float64: 1).

    The defaults are what `gradserve calibrate` measured on the CI machine (NumPy 2.x with
    scipy-openblas 0.3.31, 2 cores of a Haswell-class x86-64 VM, otherwise idle): a 512x512 product
    takes 4.7 ms in float32 (5.7e10 flop/s), 1.07 s in float16 (NumPy has no float16 BLAS: a naive
    loop) and 0.46 s in int64; a float16 add or mul over 2^20 elements takes ~12 ns per element,
    ~11x the 1.1 ns the model prices an element at (ELEMENT_OP flops at that rate; float32's take
    0.25-0.4 ns). Busier machines measure lower float32 rates and so lower factors."""

    blas_float16: float = 230.0
    blas_integer: float = 100.0
    elementwise_float16: float = 11.0

    def of(self, kernel: str, dtype) -> float:
        dtype = numpy.dtype(dtype)
        if kernel == "blas":
            if dtype.kind in "iu":
                return self.blas_integer
            return self.blas_float16 if dtype == numpy.float16 else 1.0
        return self.elementwise_float16 if dtype == numpy.float16 else 1.0

    @classmethod
    def load(cls, path: str) -> Factors:
        """The factors of a JSON file (keys: the field names; a missing one keeps its default)."""
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if not isinstance(data, dict) or unknown:
            raise ValueError(f"{path}: expected a JSON object with keys among {sorted(names)}, got {sorted(unknown)}")
        values = {name: float(value) for name, value in data.items()}
        if any(not (1.0 <= v < 1e6) for v in values.values()):
            raise ValueError(f"{path}: every factor must be a number from 1 to 1e6")
        return cls(**values)

    def as_dict(self) -> dict:
        return asdict(self)


def _from_environment() -> Factors:
    path = os.environ.get(ENV)
    return Factors.load(path) if path else Factors()


FACTORS = _from_environment()


def use_factors(factors: Factors) -> Factors:
    """Price work by `factors` from now on; returns the previous ones."""
    global FACTORS
    previous, FACTORS = FACTORS, factors
    return previous


def numel(shape) -> int:
    return math.prod(shape)


def one_pass(in_shapes, out_shape, attrs) -> int:
    """The default: one pass over the largest of the inputs and the output."""
    return ELEMENT_OP * max([numel(out_shape), *map(numel, in_shapes)])


def matrix_product(in_shapes, out_shape, attrs) -> int:
    """2*m*k*n flops per product (batched: times the batch), plus a pass over the operands."""
    a = in_shapes[0]
    k = a[-1] if a else 1
    return 2 * numel(out_shape) * k + one_pass(in_shapes, out_shape, attrs)


def factorization(in_shapes, out_shape, attrs) -> int:
    """A factorization of a batch of n x n matrices (inverse, determinant, Cholesky): ~2 n^3 flops each."""
    a = in_shapes[0]
    n = a[-1] if a else 1
    return 2 * numel(a[:-2]) * n**3 + one_pass(in_shapes, out_shape, attrs)


def dtype_factor(kernel: str, dtypes) -> float:
    """The factor of the slowest of `dtypes` (an op's inputs' and output's) for `kernel`."""
    return max((FACTORS.of(kernel, d) for d in dtypes), default=1.0)


# --------------------------------------------------------------------------------------------
# Temporaries
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scratch:
    """Bytes an op holds beyond its inputs, its output and (backward) the gradients it returns:
    `forward` while its forward runs, `kept` from its forward to its vjps (a composite's internal
    values that its recorded nodes save), `backward` while its vjps run."""

    forward: int = 0
    kept: int = 0
    backward: int = 0


def nbytes(meta) -> int:
    shape, dtype = meta
    return numel(shape) * numpy.dtype(dtype).itemsize


def float_itemsize(in_metas, out_meta) -> int:
    """The bytes of one element in the floating dtype an op computes in (its widest floating
    operand's; the output's when none is floating)."""
    floats = [numpy.dtype(d).itemsize for _, d in (out_meta, *in_metas) if numpy.dtype(d).kind == "f"]
    return max(floats, default=numpy.dtype(out_meta[1]).itemsize)


def largest(in_metas, out_meta) -> int:
    """Elements of the largest of an op's inputs and output."""
    return max(numel(shape) for shape, _ in (out_meta, *in_metas))


def broadcast_inputs(in_metas, out_meta) -> int:
    """How many floating inputs are smaller than the output: each one's vjp builds a gradient of
    the output's size before summing it down to the input's shape."""
    size = numel(out_meta[0])
    return sum(1 for shape, d in in_metas if numpy.dtype(d).kind == "f" and numel(shape) < size)


def temporaries(
    forward=0.0, kept=0.0, backward=1.0, per_broadcast=0.0, of="largest", backward_masks=0.0, buffered=False
):
    """A scratch rule in multiples of one value's bytes, in the floating dtype the op computes in:
    of the largest of its inputs and output (`of="largest"`) or of its output (`of="output"`).
    `per_broadcast` more for each broadcast input (`broadcast_inputs`), and `backward_masks`
    boolean masks of that many elements in the vjps; `buffered`: NumPy's ufunc buffers in the forward."""

    def rule(in_metas, out_meta, attrs) -> Scratch:
        elements = numel(out_meta[0]) if of == "output" else largest(in_metas, out_meta)
        one = elements * float_itemsize(in_metas, out_meta)
        vjps = backward + per_broadcast * broadcast_inputs(in_metas, out_meta)
        buffers = BUFFER_ELEMENTS * float_itemsize(in_metas, out_meta) if buffered else 0
        return Scratch(
            forward=int(forward * one) + buffers,
            kept=int(kept * one),
            backward=int(vjps * one + backward_masks * elements),
        )

    return rule


default_scratch = temporaries(of="output")
