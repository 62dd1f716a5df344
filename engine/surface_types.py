"""The Variable surface as a class that type checkers and editors can follow.

`VariableSurface` is the base class of both Variables: the engine's (`engine.variable.Variable`,
computed now) and the client's (`client.variable.Variable`, recorded). At run time it holds the
registry ops' methods, as real `def`s inherited from `engine.surface_methods.SurfaceMethods`
(generated; each calls the Variable class's `_ops.<op>`, the side's op function), so
go-to-definition and `inspect.getsource` find them; `engine.surface.install` puts the rest of the
surface (operators, properties, PyTorch spellings) and `_ops` on each Variable class itself. For
type checkers, `surface_types.pyi` next to this file declares every one of those methods with its
signature; it is generated from the registry and the surface by `python -m engine.stubgen`, which
also writes the packages' module-level functions (`engine/_surface.pyi`, `client/_surface.pyi`),
and tests/test_static.py fails when they are stale.

The names the surface's annotations use (`V`: the Variable's own class, `Operand`, `DTypeLike`,
`DeviceLike`...) are declared in the stub; source modules import them under `TYPE_CHECKING`.
"""

from __future__ import annotations

import math
from typing import Generic, NamedTuple, TypeVar

from engine.surface_methods import SurfaceMethods

_V = TypeVar("_V")


class VariableSurface(SurfaceMethods):
    """What both Variables share: the surface installed by `engine.surface` (see `surface_types.pyi`)."""

    __slots__ = ()


class Size(tuple):
    """`torch.Size`: a tuple of dimensions, what `.shape` and `.size()` return (`print(x.shape)`: torch.Size([3, 4]))."""

    __slots__ = ()

    def numel(self) -> int:
        return math.prod(self)

    def __getitem__(self, index):  # (`x.shape[1:]` is a Size too)
        got = tuple.__getitem__(self, index)
        return Size(got) if isinstance(index, slice) else got

    def __repr__(self) -> str:
        return f"torch.Size({list(self)})"


class MaxMin(NamedTuple, Generic[_V]):
    """What `max(x, dim)` and `min(x, dim)` return, as in PyTorch: (values, indices)."""

    values: _V
    indices: _V
