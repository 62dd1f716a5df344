"""`torch.autograd.detect_anomaly` and `set_detect_anomaly`: while on (and `check_nan`), a backward node whose
gradient for an input holds a NaN stops the backward with PyTorch's RuntimeError, naming the node
("Function 'MulBackward0' returned nan values in its 0th output."). The walk reads the mode once per backward.
PyTorch also prints the forward traceback of the failing node; that is not recorded here."""

from __future__ import annotations

import functools
import threading

from engine.user_warnings import warn


class _Mode:
    enabled = False
    check_nan = True


class _Asked(threading.local):
    nan = False  # this thread's backward walks check for NaN whatever the mode (`checking_nan`)


ANOMALY = _Mode()
ASKED = _Asked()


def is_anomaly_enabled() -> bool:
    return ANOMALY.enabled


def is_anomaly_check_nan_enabled() -> bool:
    return ANOMALY.check_nan


def nan_check_on() -> bool:
    """Whether a backward starting now checks its nodes' gradients for NaN: anomaly mode with check_nan, or
    `checking_nan` on this thread."""
    return ANOMALY.enabled and ANOMALY.check_nan or ASKED.nan


class AnomalyError(RuntimeError):
    """PyTorch's RuntimeError of a node whose gradient holds a NaN; `node`: that node."""

    def __init__(self, node, index: int):
        super().__init__(f"Function '{node.name}' returned nan values in its {index}th output.")
        self.node = node


def check_nan(node, in_grads) -> None:
    """Refuse `node`'s gradients for its inputs when one holds a NaN (anomaly mode's check)."""
    for i, g in enumerate(in_grads):
        if g is not None and g._data.dtype.kind in "fc" and bool((g._data != g._data).any()):
            raise AnomalyError(node, i)


class checking_nan:  # noqa: N801  (a context manager, as the mode's)
    """The NaN check on for the backward walks of this thread only, within a `with` block: how a server runs
    a request that a client in anomaly mode sent, beside other clients' requests."""

    def __enter__(self) -> None:
        self.previous, ASKED.nan = ASKED.nan, True

    def __exit__(self, *exc) -> None:
        ASKED.nan = self.previous


class set_detect_anomaly:  # noqa: N801  (PyTorch's name)
    """Anomaly mode on or off (`check_nan` too) from here, or within a `with` block (put back after)."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self.previous = (ANOMALY.enabled, ANOMALY.check_nan)
        ANOMALY.enabled, ANOMALY.check_nan = bool(mode), bool(check_nan)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc) -> None:
        ANOMALY.enabled, ANOMALY.check_nan = self.previous


class detect_anomaly:  # noqa: N801  (PyTorch's name)
    """Anomaly mode within a `with` block or a decorated function (see the module docstring)."""

    def __init__(self, check_nan: bool = True) -> None:
        self.check_nan = check_nan
        self.previous = (ANOMALY.enabled, ANOMALY.check_nan)
        warn(
            "Anomaly Detection has been enabled. This mode will increase the runtime and should only be enabled "
            "for debugging."
        )

    def __enter__(self) -> None:
        self.previous = (ANOMALY.enabled, ANOMALY.check_nan)
        ANOMALY.enabled, ANOMALY.check_nan = True, self.check_nan

    def __exit__(self, *exc) -> None:
        ANOMALY.enabled, ANOMALY.check_nan = self.previous

    def __call__(self, function):
        @functools.wraps(function)
        def anomalous(*args, **kwargs):
            with self:
                return function(*args, **kwargs)

        return anomalous


NAMES = (set_detect_anomaly, detect_anomaly, is_anomaly_enabled, is_anomaly_check_nan_enabled)
