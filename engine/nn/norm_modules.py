"""`torch.nn`'s GroupNorm, RMSNorm and LocalResponseNorm, mixins that `engine.nn.module_classes.bind` joins to a side's
`Module` as it does `engine.nn.sequence`'s; each forward calls `engine.nn.functional`. Parameters (weight ones,
bias zeros), arguments and reprs are PyTorch's."""

from __future__ import annotations

from typing import Any

from engine.nn import functional as F
from engine.nn import init
from engine.nn.sequence import _Sided


def affine_parameters(module, affine, bias, shape, device=None, dtype=None) -> None:
    """A normalisation's `weight` and `bias` parameters of `shape` (uninitialised), each None where `affine` (or
    `bias`) is off, registered in PyTorch's order."""
    for name, wanted in (("weight", affine), ("bias", affine and bias)):
        value = module._parameter(module._ns.empty(shape, device=device, dtype=dtype)) if wanted else None
        module.register_parameter(name, value)


class GroupNorm(_Sided):
    weight: Any
    bias: Any

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        affine_parameters(self, affine, bias, num_channels, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, bias={self.bias is not None}"


class RMSNorm(_Sided):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = self._parameter(self._ns.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class LocalResponseNorm(_Sided):
    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


NORMS = (GroupNorm, RMSNorm, LocalResponseNorm)
