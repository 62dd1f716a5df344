"""`torch.device`, `torch.cuda`, `torch.accelerator` and `set_default_device`, mapped onto the
backend that computes (`engine.backend`: NumPy on the CPU, CuPy on a GPU).

A side computes on one device: the engine on its active backend's, the client where its
session's executor runs. So `device="cuda"` (on a constructor, `.to()`, `.cuda()`) is accepted
only where that device is CUDA, and refused otherwise, as PyTorch refuses it without CUDA;
`device="cpu"` is accepted everywhere and changes nothing: values stay where the backend
computes (a program that names the CPU on a GPU backend still runs, on the GPU). `"meta"` (PyTorch's
shape-only tensors, where tutorials move the template module of `functional_call`) is accepted the
same way: nothing here computes shape-only, so values stay as they are.
"""

from __future__ import annotations

from types import SimpleNamespace

TYPES = ("cpu", "cuda", "meta")


class Device:
    """`torch.device("cpu")`, `torch.device("cuda:0")`, `torch.device("cuda", 0)`; equal to its string."""

    __slots__ = ("type", "index")

    def __init__(self, type, index=None):
        if isinstance(type, Device):
            type, index = type.type, type.index if index is None else index
        elif not isinstance(type, str):
            raise TypeError(f"device() expects a string like 'cpu' or 'cuda:0', got {type!r}")
        elif ":" in type:
            type, _, number = type.partition(":")
            if index is not None or not number.isdigit():
                raise RuntimeError(f"Invalid device string: '{type}:{number}'")
            index = int(number)
        if type not in TYPES:
            raise RuntimeError(f"Expected one of {', '.join(TYPES)} device type at start of device string: {type}")
        self.type = type
        self.index = index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        extra = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{extra})"

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = Device(other)
            except (RuntimeError, TypeError):
                return False
        if not isinstance(other, Device):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))


def as_device(spec) -> Device:
    """A Device from a Device, a string or a CUDA ordinal (an int means 'cuda:<int>')."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        return Device("cuda", spec)
    return Device(spec)


class Placement:
    """One side's devices: `computes()` says where its ops run ('cpu' or 'cuda')."""

    def __init__(self, computes):
        self.computes = computes
        self.default = Device("cpu")

    def check(self, spec) -> Device | None:
        """The Device `spec` names (None for None), refused when it is CUDA and this side computes on the CPU."""
        if spec is None:
            return None
        device = as_device(spec)
        if device.type == "cuda" and self.computes() != "cuda":
            raise RuntimeError(
                f"device '{device}' is not available: gradserve computes with NumPy on the CPU here "
                "(CUDA needs CuPy, a GPU, and GRADSERVE_DEVICE=auto or cuda where the engine runs)"
            )
        if device.index not in (None, 0):
            raise RuntimeError(f"device '{device}' is not available: gradserve computes on one device")
        return device

    def set_default_device(self, spec) -> None:
        self.default = self.check(spec) if spec is not None else Device("cpu")

    def get_default_device(self) -> Device:
        return self.default

    def names(self) -> dict:
        """The module-level names: `device`, `cuda`, `accelerator`, `set_default_device`, `get_default_device`."""

        def is_available() -> bool:
            return self.computes() == "cuda"

        def device_count() -> int:
            return int(is_available())

        def current_accelerator(check_available=False):
            return Device("cuda") if is_available() else None

        def manual_seed(seed) -> None:
            """Seeds draw from one generator here (the package's `manual_seed`): nothing more to seed."""

        cuda = SimpleNamespace(
            is_available=is_available,
            device_count=device_count,
            manual_seed=manual_seed,
            manual_seed_all=manual_seed,
            synchronize=lambda device=None: None,
        )
        accelerator = SimpleNamespace(
            is_available=is_available,
            device_count=device_count,
            current_accelerator=current_accelerator,
            synchronize=lambda device=None: None,
        )
        return {
            "device": Device,
            "cuda": cuda,
            "accelerator": accelerator,
            "set_default_device": self.set_default_device,
            "get_default_device": self.get_default_device,
        }
