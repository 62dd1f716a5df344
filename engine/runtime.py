"""PyTorch's process-level helpers that training programs call around their math, written once for both
Variables and bound to each package by `bind`: `compile` (returns what it is given: there is no compiler
here, and the results are the same), `backends` (cudnn/cuda/mps flags and availability), thread counts,
`set_float32_matmul_precision`, `use_deterministic_algorithms` (everything here is deterministic),
`set_printoptions`, type promotion (`result_type`, `promote_types`, `can_cast`), `dtype` and `Size` as
types, `asarray`, and `testing.assert_close` with PyTorch's default tolerances and messages.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy

from engine import promotion
from engine.dtypes import DType
from engine.dtypes import of as dtype_of
from engine.factory import as_dtype
from engine.printing import set_printoptions
from engine.surface_types import Size
from engine.user_warnings import warn

ASARRAY_GRAD = (
    "torch.asarray: unspecified requires_grad now defaults to obj.requires_grad instead of False. Pass "
    "requires_grad=False explicitly to get the old behavior and silence this warning."
)

# PyTorch's default (rtol, atol) of assert_close by dtype
TOLERANCES = {"float16": (1e-3, 1e-5), "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}


def compile(model=None, **options):  # noqa: A001  (PyTorch's name)
    """`torch.compile(model)`: `model` itself (also as `@torch.compile` and `@torch.compile(mode=...)`)."""
    if model is None:
        return lambda fn: fn
    return model


class _Settings:
    def __init__(self):
        self.threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.interop_threads = self.threads
        self.matmul_precision = "highest"
        self.deterministic = False


class memory_format:  # noqa: N801  (PyTorch's spelling)
    """`torch.memory_format`: every Variable here but a view and a view's `clone()` is contiguous (row-major), so
    each layout is accepted and the values are the same (`zeros_like(p, memory_format=torch.preserve_format)`)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "torch." + self.name


LAYOUTS = ("contiguous_format", "preserve_format", "channels_last", "channels_last_3d")
MEMORY_FORMATS = {name: memory_format(name) for name in LAYOUTS}


def _close_message(actual, expected, rtol, atol) -> str | None:
    a, e = numpy.asarray(actual, dtype=numpy.float64), numpy.asarray(expected, dtype=numpy.float64)
    close = numpy.isclose(a, e, rtol=rtol, atol=atol, equal_nan=False)
    if close.all():
        return None
    difference = numpy.abs(a - e)
    with numpy.errstate(divide="ignore", invalid="ignore"):
        relative = numpy.where(e != 0, difference / numpy.abs(e), numpy.inf)
    at = numpy.unravel_index(numpy.nanargmax(numpy.where(close, -1, difference)), a.shape) if a.ndim else ()
    rel_at = numpy.unravel_index(numpy.nanargmax(numpy.where(close, -1, relative)), a.shape) if a.ndim else ()
    return (
        f"Tensor-likes are not close!\n\nMismatched elements: {int((~close).sum())} / {close.size} "
        f"({100 * (~close).sum() / close.size:.1f}%)\n"
        f"Greatest absolute difference: {difference[at]} at index {tuple(int(i) for i in at)} (up to {atol} allowed)\n"
        f"Greatest relative difference: {relative[rel_at]} at index {tuple(int(i) for i in rel_at)} "
        f"(up to {rtol} allowed)"
    )


def bind(ns) -> dict:
    """The names package `ns` gets (see the module docstring)."""
    settings = _Settings()

    def set_num_threads(n: int) -> None:
        """Recorded for `get_num_threads`; NumPy's BLAS takes its threads from OMP_NUM_THREADS at start."""
        if int(n) < 1:
            raise RuntimeError("set_num_threads expects a positive integer")
        settings.threads = int(n)

    def set_num_interop_threads(n: int) -> None:
        settings.interop_threads = int(n)

    def set_float32_matmul_precision(precision: str) -> None:
        if precision not in ("highest", "high", "medium"):
            raise RuntimeError(f"Invalid precision {precision!r}: expected 'highest', 'high' or 'medium'")
        settings.matmul_precision = precision

    def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
        settings.deterministic = bool(mode)

    def result_type(tensor1, tensor2) -> DType:
        """The dtype an op of the two (Variables or Python numbers) gives: PyTorch's (engine.promotion)."""
        operands = (tensor1, tensor2)
        shapes = [() if type(v) in promotion.NUMBERS else tuple(v.shape) for v in operands]
        return dtype_of(promotion.result_type(shapes, [getattr(v, "dtype", v) for v in operands]))

    def promote_types(type1, type2) -> DType:
        return dtype_of(promotion.promote_types(as_dtype(type1), as_dtype(type2)))

    def can_cast(from_, to) -> bool:
        return promotion.can_cast(as_dtype(from_), as_dtype(to))

    def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=None):
        """A tensor of `obj` (`obj` itself, its graph kept, when it is one of the dtype and device, as PyTorch's
        `as_tensor`); unspecified, `requires_grad` is obj's (PyTorch 2.13 warns where that is True)."""
        if copy:
            return ns.tensor(obj, dtype=dtype, device=device, requires_grad=bool(requires_grad))
        out = ns.as_tensor(obj, dtype=dtype, device=device)
        if requires_grad is None and out.requires_grad:
            warn(ASARRAY_GRAD)
        if out.requires_grad:
            return out.detach() if requires_grad is False else out
        return out.requires_grad_(bool(requires_grad))

    def assert_close(actual, expected, *, rtol=None, atol=None, equal_nan=False, check_dtype=True, msg=None, **_):
        """`torch.testing.assert_close`: equal shapes (and dtypes), values within rtol/atol (PyTorch's defaults
        for the dtype when not given); an AssertionError in PyTorch's words otherwise."""
        if (rtol is None) != (atol is None):
            missing = "rtol" if rtol is None else "atol"
            raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got no {missing}.")
        pairs = list(zip(actual, expected)) if isinstance(actual, (list, tuple)) else [(actual, expected)]
        for a, e in pairs:
            a_is, e_is = ns.is_tensor(a), ns.is_tensor(e)
            a_array = a.detach().numpy() if a_is else numpy.asarray(a)
            e_array = e.detach().numpy() if e_is else numpy.asarray(e)
            if a_is and e_is:
                if tuple(a.shape) != tuple(e.shape):
                    raise AssertionError(
                        msg or f"The values for attribute 'shape' do not match: {Size(a.shape)} != {Size(e.shape)}."
                    )
                if check_dtype and a.dtype != e.dtype:
                    raise AssertionError(
                        msg or f"The values for attribute 'dtype' do not match: {a.dtype} != {e.dtype}."
                    )
            if equal_nan:
                both = numpy.isnan(a_array.astype(numpy.float64)) & numpy.isnan(e_array.astype(numpy.float64))
                a_array, e_array = numpy.where(both, 0, a_array), numpy.where(both, 0, e_array)
            name = numpy.result_type(a_array, e_array).name
            tol = (rtol, atol) if rtol is not None else TOLERANCES.get(name, (0.0, 0.0))
            failure = _close_message(a_array, e_array, *tol)
            if failure is not None:
                raise AssertionError(msg or failure)

    cudnn = SimpleNamespace(
        benchmark=False, deterministic=False, enabled=True, allow_tf32=True, is_available=lambda: False
    )
    backends = SimpleNamespace(
        cudnn=cudnn,
        cuda=SimpleNamespace(
            matmul=SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True),
            is_built=ns.cuda.is_available,
        ),
        mps=SimpleNamespace(is_available=lambda: False, is_built=lambda: False),
        mkldnn=SimpleNamespace(is_available=lambda: False, enabled=False),
        openmp=SimpleNamespace(is_available=lambda: False),
    )
    return {
        "compile": compile,
        "backends": backends,
        "mps": SimpleNamespace(is_available=lambda: False, device_count=lambda: 0),
        "set_num_threads": set_num_threads,
        "get_num_threads": lambda: settings.threads,
        "set_num_interop_threads": set_num_interop_threads,
        "get_num_interop_threads": lambda: settings.interop_threads,
        "set_float32_matmul_precision": set_float32_matmul_precision,
        "get_float32_matmul_precision": lambda: settings.matmul_precision,
        "use_deterministic_algorithms": use_deterministic_algorithms,
        "are_deterministic_algorithms_enabled": lambda: settings.deterministic,
        "set_printoptions": set_printoptions,
        "result_type": result_type,
        "promote_types": promote_types,
        "can_cast": can_cast,
        "asarray": asarray,
        "dtype": DType,
        "Size": Size,
        "testing": SimpleNamespace(assert_close=assert_close),
        "memory_format": memory_format,
        **MEMORY_FORMATS,
    }
