"""`torch.nn`'s other activation modules (Hardtanh, ReLU6, PReLU, Mish...), mixins that `engine.nn.module_classes.bind`
joins to a side's `Module` as it does `engine.nn.sequence`'s; each forward calls `engine.nn.functional`. Their
arguments, parameters (PReLU's `weight`, filled with `init`) and reprs are PyTorch's."""

from __future__ import annotations

from engine.nn import functional as F
from engine.nn.sequence import _Sided
from engine.user_warnings import warn


def _flag(inplace) -> str:
    return ", inplace=True" if inplace else ""


class Hardtanh(_Sided):
    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False, min_value=None, max_value=None):
        super().__init__()
        if min_value is not None:
            warn("keyword argument `min_value` is deprecated and rename to `min_val`", FutureWarning)
            min_val = min_value
        if max_value is not None:
            warn("keyword argument `max_value` is deprecated and rename to `max_val`", FutureWarning)
            max_val = max_value
        if max_val <= min_val:
            raise AssertionError
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + _flag(self.inplace)


class ReLU6(Hardtanh):
    def __init__(self, inplace=False):
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class _Inplace(_Sided):
    """An activation with only `inplace` (not in its repr, as PyTorch's Hardsigmoid and Hardswish)."""

    _function = staticmethod(F.hardsigmoid)

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return self._function(input, inplace=self.inplace)


class Hardsigmoid(_Inplace):
    pass


class Hardswish(_Inplace):
    _function = staticmethod(F.hardswish)


class Mish(_Inplace):
    _function = staticmethod(F.mish)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class SELU(Mish):
    _function = staticmethod(F.selu)


class _Plain(_Sided):
    """An activation without arguments."""

    _function = staticmethod(F.tanhshrink)

    def forward(self, input):
        return self._function(input)


class Tanhshrink(_Plain):
    pass


class Softsign(_Plain):
    _function = staticmethod(F.softsign)


class LogSigmoid(_Plain):
    _function = staticmethod(F.logsigmoid)


class Hardshrink(_Sided):
    _function = staticmethod(F.hardshrink)

    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return self._function(input, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    _function = staticmethod(F.softshrink)


class CELU(_Sided):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + _flag(self.inplace)


class GLU(_Sided):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmin(GLU):
    def __init__(self, dim=None):
        super().__init__(dim)

    def forward(self, input):
        return F.softmin(input, self.dim, _stacklevel=5)


class Softmax2d(_Sided):
    """softmax over the channels (dimension -3) of [N, C, H, W] or [C, H, W]."""

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead")
        return F.softmax(input, -3, _stacklevel=5)


class Threshold(_Sided):
    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + _flag(self.inplace)


class RReLU(_Sided):
    """leaky_relu with a slope drawn from U(lower, upper) per element in training, (lower + upper) / 2 in eval."""

    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}" + _flag(self.inplace)


class PReLU(_Sided):
    """leaky_relu with a learnt slope `weight` [num_parameters] (one, or one per channel), filled with `init`."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = self._parameter(self._ns.empty(num_parameters, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with self._ns.no_grad():
            self.weight.fill_(self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


ACTIVATIONS: tuple[type, ...] = (
    Hardtanh,
    ReLU6,
    Hardsigmoid,
    Hardswish,
    Mish,
    SELU,
    Tanhshrink,
    Softsign,
    LogSigmoid,
    Hardshrink,
)
ACTIVATIONS += (Softshrink, CELU, GLU, Softmin, Softmax2d, Threshold, RReLU, PReLU)
