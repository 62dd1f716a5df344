"""PyTorch's printing of a tensor (`torch._tensor_str`), so a program prints what it printed under PyTorch:
`tensor([[1.5000, 2.0000]], requires_grad=True)`. One format for all of a tensor's numbers: integers as `3.`,
else `precision` decimals, or scientific where the magnitudes differ over 1000x, pass 1e8 or fall under 1e-4;
columns padded to the widest; past `threshold` elements the first and last `edgeitems` of each dimension
around `...`; rows wrapped at `linewidth`; then the dtype (when not a default one), device and autograd.
"""

from __future__ import annotations

import math

import numpy

from engine.dtypes import get_default_dtype

PROFILES: dict[str, dict] = {
    "default": {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80},
    "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80},
    "full": {"precision": 4, "threshold": math.inf, "edgeitems": 3, "linewidth": 80},
}
OPTIONS: dict = {**PROFILES["default"], "sci_mode": None}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """PyTorch's: a profile ("default", "short", "full"), then the options given; `sci_mode` None is automatic."""
    if profile is not None:
        OPTIONS.update(PROFILES[profile])
    given = {"precision": precision, "threshold": threshold, "edgeitems": edgeitems, "linewidth": linewidth}
    OPTIONS.update({name: value for name, value in given.items() if value is not None}, sci_mode=sci_mode)


class _Formatter:
    """The one number format of a tensor's printed values, and their width."""

    def __init__(self, values):
        self.floating, self.int_mode, self.sci_mode, self.width = values.dtype.kind == "f", True, False, 1
        flat = values.reshape(-1)
        if not self.floating:
            self.width = max([1, *(len(str(v)) for v in flat.tolist())])
            return
        shown = flat[numpy.isfinite(flat) & (flat != 0)]
        if shown.size == 0:
            return
        magnitudes = numpy.abs(shown).astype(numpy.float64)
        low, high = magnitudes.min(), magnitudes.max()
        self.int_mode = bool(numpy.all(shown == numpy.ceil(shown)))
        self.sci_mode = OPTIONS["sci_mode"]
        if self.sci_mode is None:
            self.sci_mode = bool(high / low > 1000.0 or high > 1.0e8 or low < 1.0e-4)
        numbers, precision = shown.tolist(), OPTIONS["precision"]
        if self.sci_mode:
            self.width = max(len(f"{v:.{precision}e}") for v in numbers)
        elif self.int_mode:
            self.width = max(len(f"{v:.0f}") + 1 for v in numbers)
        else:
            self.width = max(len(f"{v:.{precision}f}") for v in numbers)

    def format(self, value) -> str:
        if not self.floating:
            text = f"{value}"
        elif self.sci_mode:
            text = f"{value:{self.width}.{OPTIONS['precision']}e}"
        elif self.int_mode:
            text = f"{value:.0f}" + ("" if math.isinf(value) or math.isnan(value) else ".")
        else:
            text = f"{value:.{OPTIONS['precision']}f}"
        return " " * (self.width - len(text)) + text


def _summarized(values):
    """The values printed when summarizing: of each dimension, the first and last `edgeitems`."""
    edge = OPTIONS["edgeitems"]
    if values.ndim == 0:
        return values
    if len(values) > 2 * edge:
        values = numpy.concatenate([values[:edge], values[-edge:]])
    return values if values.ndim == 1 else numpy.stack([_summarized(row) for row in values])


def _body(values, indent, summarize, formatter) -> str:
    if values.ndim == 0:
        return formatter.format(values.item())
    edge = OPTIONS["edgeitems"]
    cut = summarize and len(values) > 2 * edge
    if values.ndim == 1:
        per_line = max(1, math.floor((OPTIONS["linewidth"] - indent) / (formatter.width + 2)))
        items = [*values[:edge].tolist(), None, *values[len(values) - edge :].tolist()] if cut else values.tolist()
        texts = [" ..." if v is None else formatter.format(v) for v in items]
        lines = [", ".join(texts[i : i + per_line]) for i in range(0, len(texts), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    rows = [*range(edge), None, *range(len(values) - edge, len(values))] if cut else range(len(values))
    parts = ["..." if i is None else _body(values[i], indent + 1, summarize, formatter) for i in rows]
    return "[" + ("," + "\n" * (values.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def format_tensor(array, grad_fn_name=None, requires_grad=False, device="cpu", tangent=None, prefix="tensor(") -> str:
    """`repr()` of a tensor holding `array` (host values), as PyTorch prints it."""
    values = array.astype(numpy.float32) if array.dtype == numpy.float16 else array
    indent, suffixes = len(prefix), []
    if device != "cpu":
        suffixes.append(f"device='{device}'")
    if values.size == 0:
        body = "[]"
        if values.ndim != 1:
            suffixes.append(f"size={tuple(values.shape)}")
        if array.dtype != get_default_dtype():
            suffixes.append(f"dtype=torch.{array.dtype}")
    else:
        summarize = values.size > OPTIONS["threshold"]
        body = _body(values, indent, summarize, _Formatter(_summarized(values) if summarize else values))
        if array.dtype not in (get_default_dtype(), numpy.int64, numpy.bool_):
            suffixes.append(f"dtype=torch.{array.dtype}")
    if grad_fn_name is not None:
        suffixes.append(f"grad_fn=<{grad_fn_name}>")
    elif requires_grad:
        suffixes.append("requires_grad=True")
    if tangent is not None:
        suffixes.append(f"tangent={tangent!r}")
    text = prefix + body
    last = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last + len(suffix) + 2 > OPTIONS["linewidth"]:
            text, last = text + ",\n" + " " * indent + suffix, indent + len(suffix)
        else:
            text, last = text + ", " + suffix, last + len(suffix) + 2
    return text + ")"
