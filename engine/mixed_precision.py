"""Automatic mixed precision: `torch.autocast` and `torch.amp.GradScaler`, written once for both Variables.

Inside an enabled `autocast(device_type, dtype)`, the ops PyTorch's CPU autocast runs in lower precision
(`LOWER`: matmul, the convolutions, linear, einsum, prelu, scaled_dot_product_attention) cast their float16
and float32 inputs to `dtype`, and those it runs in float32 (`FLOAT32`: the losses, prod) cast theirs to
float32; float64 inputs are left alone and every other op runs in its inputs' dtype, as in PyTorch. A cast
is a recorded op, so gradients reach float32 leaves in float32. An op casts once: what it calls inside
runs with autocast paused. The lists wrap the registry's op functions (`casting`, from
`registry.make_function`) and `nn.functional`'s (`cast_functions`), so methods, operators and modules
follow them on the engine and the client alike.

Lower precision here is float16: NumPy has no bfloat16, so an autocast asking for it (the CPU default)
warns and is disabled, as PyTorch disables one whose dtype the device does not support; so is a
`'cuda'` autocast where no GPU computes (PyTorch's rule when CUDA is unavailable).

`GradScaler` is PyTorch's dynamic loss scaling: `scale(loss)`, `unscale_(optimizer)`, `step(optimizer)`
(skipped when a gradient is inf or NaN), `update()` (backoff on an overflow, growth after
`growth_interval` clean steps), `state_dict()`.
"""

from __future__ import annotations

import functools
import threading
from types import SimpleNamespace
from typing import Any

import numpy

from engine.user_warnings import warn

LOWER = frozenset(
    {
        "matmul",
        "mm",
        "einsum",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "linear",
        "prelu",
        "scaled_dot_product_attention",
    }
)
FLOAT32 = frozenset(
    {
        "prod",
        "cross_entropy",
        "nll_loss",
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "kl_div",
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "poisson_nll_loss",
        "cosine_embedding_loss",
        "margin_ranking_loss",
        "soft_margin_loss",
        "hinge_embedding_loss",
        "triplet_margin_loss",
        "multi_margin_loss",
    }
)
CAST = LOWER | FLOAT32
DEFAULT_DTYPES = {"cpu": "bfloat16", "cuda": "float16"}


class _State(threading.local):
    dtype = None  # the lower-precision numpy dtype while an enabled autocast is active
    device = None


STATE = _State()


def _cast(value, target):
    """`value` in `target` when it is a float16 or float32 Variable (of either side), else itself."""
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    if kind == "f" and hasattr(value, "grad_fn") and value.dtype.itemsize < 8 and value.dtype != target:
        return value.to(target)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, target) for v in value)
    return value


def casting(fn, name: str):
    """`fn` (an op function named `name`) casting its inputs under autocast as `LOWER`/`FLOAT32` say."""
    lower = name in LOWER
    if not lower and name not in FLOAT32:
        return fn

    @functools.wraps(fn)
    def cast_then_call(*args, **kwargs):
        dtype = STATE.dtype
        if dtype is None:
            return fn(*args, **kwargs)
        target = dtype if lower else numpy.dtype(numpy.float32)
        STATE.dtype = None  # what fn calls is not cast again
        try:
            return fn(*_cast(args, target), **{k: _cast(v, target) for k, v in kwargs.items()})
        finally:
            STATE.dtype = dtype

    return cast_then_call


def cast_operator(fast, casting_call):
    """An operator method: `fast` (a side's own, e.g. the engine's apply_op) while no autocast is on,
    `casting_call` (through the casting op function) under one."""

    def operator(self, other):
        return fast(self, other) if STATE.dtype is None else casting_call(self, other)

    return operator


def cast_functions(names: dict) -> None:
    """Wrap the functions of a module's `names` (nn.functional's globals) that the lists name."""
    for name in CAST:
        if callable(names.get(name)):
            names[name] = casting(names[name], name)


class autocast:  # noqa: N801  (PyTorch's name)
    """`torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)`: a context manager
    and decorator (see the module docstring). `cuda_available()` says whether `'cuda'` computes here."""

    cuda_available = staticmethod(lambda: False)  # set per side by `bind`

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        if device_type not in DEFAULT_DTYPES:
            raise RuntimeError(
                f"User specified an unsupported autocast device_type '{device_type}' (here: 'cpu' or 'cuda')"
            )
        self.device = device_type
        name = str(dtype if dtype is not None else DEFAULT_DTYPES[device_type]).removeprefix("torch.")
        self.fast_dtype = None
        self._enabled = bool(enabled)
        if not self._enabled:
            return
        if device_type == "cuda" and not self.cuda_available():
            warn("CUDA is not available here (gradserve computes on the CPU). Disabling autocast.")
            self._enabled = False
        elif name != "float16":
            warn(
                f"In {device_type} autocast, but the target dtype {name} is not supported. Disabling autocast.\n"
                "gradserve's autocast supports float16 only (NumPy has no bfloat16)."
            )
            self._enabled = False
        else:
            self.fast_dtype = numpy.dtype(numpy.float16)

    def __enter__(self):
        self._saved = (STATE.dtype, STATE.device)
        STATE.dtype, STATE.device = (self.fast_dtype, self.device) if self._enabled else (None, None)
        return self

    def __exit__(self, *exc):
        STATE.dtype, STATE.device = self._saved
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def autocasted(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return autocasted


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    return STATE.dtype is not None and STATE.device == device_type


class Unsupported:
    """A PyTorch dtype that NumPy lacks (`torch.bfloat16`): it can be named (an autocast asking for it
    is disabled with a warning), not used for a Variable."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    @property
    def dtype(self):
        raise TypeError(f"torch.{self.name} is not supported here: NumPy has no {self.name}")


class GradScaler:
    """`torch.amp.GradScaler(device='cuda', init_scale=2.**16, growth_factor=2.0, backoff_factor=0.5,
    growth_interval=2000, enabled=True)`: PyTorch's dynamic loss scaling (see the module docstring)."""

    ns: Any = None  # the package whose Variables it scales, set per side by `bind`

    def __init__(
        self,
        device="cuda",
        init_scale=2.0**16,
        growth_factor=2.0,
        backoff_factor=0.5,
        growth_interval=2000,
        enabled=True,
    ):
        if enabled and device == "cuda" and not self.ns.cuda.is_available():
            warn("GradScaler is enabled, but CUDA is not available here.  Disabling.")
            enabled = False
        if enabled and (growth_factor <= 1.0 or backoff_factor >= 1.0):
            raise ValueError("The growth factor must be > 1.0 and the backoff factor < 1.0.")
        self._enabled, self._device = bool(enabled), device
        self._scale, self._growth_factor, self._backoff_factor = float(init_scale), growth_factor, backoff_factor
        self._growth_interval, self._growth_tracker = growth_interval, 0
        self._per_optimizer: dict = {}  # id(optimizer) -> {"unscaled": bool, "stepped": bool, "found_inf": bool}

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def scale(self, outputs):
        """`outputs` (a Variable, or an iterable of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        return outputs * self._scale

    def _state(self, optimizer) -> dict:
        return self._per_optimizer.setdefault(id(optimizer), {"unscaled": False, "stepped": False, "found_inf": False})

    def unscale_(self, optimizer) -> None:
        """Divide `optimizer`'s gradients by the scale in place, noting whether one is inf or NaN."""
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["unscaled"]:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stepped"]:
            raise RuntimeError("unscale_() is being called after step().")
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        inverse = 1.0 / self._scale
        with self.ns.no_grad():
            finite = [self.ns.isfinite(g).all() for g in grads]
            state["found_inf"] = bool(grads) and not bool(self.ns.stack(finite).all())
            for g in grads:
                g.mul_(inverse)
        state["unscaled"] = True

    def step(self, optimizer, *args, **kwargs):
        """`optimizer.step()` unless a gradient was inf or NaN (unscaling first if not done)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        state = self._state(optimizer)
        if state["stepped"]:
            raise RuntimeError("step() has already been called since the last update().")
        if not state["unscaled"]:
            self.unscale_(optimizer)
        state["stepped"] = True
        return None if state["found_inf"] else optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        """The next scale: `new_scale`, else backed off after an overflow, grown after `growth_interval`
        clean updates; then every optimizer's unscale/step record is cleared."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if hasattr(new_scale, "item") else new_scale)
        else:
            if not self._per_optimizer:
                raise AssertionError("No inf checks were recorded prior to update.")
            scale = numpy.float32(self._scale)  # a float32, as PyTorch's: a growth past its range is not taken
            if any(s["found_inf"] for s in self._per_optimizer.values()):
                self._scale = float(scale * numpy.float32(self._backoff_factor))
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    with numpy.errstate(over="ignore"):
                        grown = scale * numpy.float32(self._growth_factor)
                    self._scale = float(grown) if numpy.isfinite(grown) else self._scale
                    self._growth_tracker = 0
        self._per_optimizer = {}

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved from a disabled instance."
            )
        self._scale = float(state_dict["scale"])
        self._growth_factor, self._backoff_factor = state_dict["growth_factor"], state_dict["backoff_factor"]
        self._growth_interval, self._growth_tracker = state_dict["growth_interval"], state_dict["_growth_tracker"]


def bind(ns) -> dict:
    """The names a package `ns` (engine's or client's) gets: `autocast`, `amp` (autocast, GradScaler),
    `cpu.amp`, `cuda.amp` (PyTorch's older spellings), `is_autocast_enabled`, `get_autocast_dtype`, and
    `bfloat16` (named, not usable: see `Unsupported`)."""
    side_autocast = type("autocast", (autocast,), {"cuda_available": staticmethod(ns.cuda.is_available)})
    scaler = type("GradScaler", (GradScaler,), {"ns": ns})
    bfloat16 = Unsupported("bfloat16")

    def cpu_autocast(enabled=True, dtype=bfloat16, cache_enabled=True):
        return side_autocast("cpu", dtype, enabled, cache_enabled)

    def cuda_autocast(enabled=True, dtype=ns.float16, cache_enabled=True):
        return side_autocast("cuda", dtype, enabled, cache_enabled)

    def get_autocast_dtype(device_type: str):
        if is_autocast_enabled(device_type):
            return ns.float16
        return bfloat16 if DEFAULT_DTYPES.get(device_type) == "bfloat16" else ns.float16

    amp = SimpleNamespace(
        autocast=side_autocast,
        GradScaler=scaler,
        is_autocast_available=lambda device_type: device_type in DEFAULT_DTYPES,
    )
    ns.cuda.amp = SimpleNamespace(autocast=cuda_autocast, GradScaler=functools.partial(scaler, "cuda"))
    return {
        "autocast": side_autocast,
        "amp": amp,
        "cpu": SimpleNamespace(amp=SimpleNamespace(autocast=cpu_autocast, GradScaler=functools.partial(scaler, "cpu"))),
        "is_autocast_enabled": is_autocast_enabled,
        "get_autocast_dtype": get_autocast_dtype,
        "bfloat16": bfloat16,
    }
