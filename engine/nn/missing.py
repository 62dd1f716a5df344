"""What a PyTorch name that gradserve does not provide raises: a `NotImplementedError` naming it (also an
`AttributeError`, so `hasattr` and `getattr(..., default)` keep working), never an AttributeError from
deep inside a program."""

from __future__ import annotations


class NotProvided(NotImplementedError, AttributeError):
    """A name of PyTorch's API that gradserve does not implement."""


def missing(module: str):
    """A module `__getattr__` that refuses every public name not defined in `module` by name."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotProvided(f"{module}.{name} is not provided by gradserve (README: 'torch.nn.functional' lists what is)")

    return __getattr__
