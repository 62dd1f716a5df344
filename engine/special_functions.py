"""`torch.special`, the functions of it that compose from the registry's ops, written once for both Variables
(`bind(ns)`), each differentiable where PyTorch's is: expit/logit, erf/erfc/ndtr/log_ndtr, exp2/expm1/log1p,
sinc, entr, xlogy/xlog1py, logsumexp, softmax/log_softmax, round."""

from __future__ import annotations

import math
from types import SimpleNamespace


def bind(ns) -> SimpleNamespace:
    F = ns.nn.functional

    def ndtr(input):
        return 0.5 * (1 + ns.erf(input / math.sqrt(2)))

    def log_ndtr(input):
        return ndtr(input).log()

    def entr(input):
        """-x log x for x > 0, 0 at 0, -inf below (NaN stays NaN)."""
        positive = ns.where(input > 0, input, 1.0)
        value = ns.where(input > 0, -input * positive.log(), 0.0)
        return ns.where(input.isnan(), input, ns.where(input < 0, -math.inf, value))

    def _x_times(input, other, log):
        """input * log(other), 0 where input is 0 and other is not NaN, as PyTorch's xlogy; where the log is
        finite the product is kept, so d/dinput is log(other) at input == 0 too, as PyTorch's."""
        other = other if ns.is_tensor(other) else ns.tensor(other, dtype=input.dtype)
        logged = log(other)
        return input * ns.where((input == 0) & ~other.isnan() & ~logged.isfinite(), 0.0, logged)

    def xlogy(input, other):
        return _x_times(input, other, lambda v: v.log())

    def xlog1py(input, other):
        return _x_times(input, other, lambda v: v.log1p())

    return SimpleNamespace(
        expit=ns.sigmoid,
        logit=ns.logit,
        erf=ns.erf,
        erfc=ns.erfc,
        ndtr=ndtr,
        log_ndtr=log_ndtr,
        exp2=ns.exp2,
        expm1=ns.expm1,
        log1p=ns.log1p,
        sinc=ns.sinc,
        entr=entr,
        xlogy=xlogy,
        xlog1py=xlog1py,
        logsumexp=ns.logsumexp,
        softmax=lambda input, dim, dtype=None: F.softmax(input, dim, dtype=dtype),
        log_softmax=lambda input, dim, dtype=None: F.log_softmax(input, dim, dtype=dtype),
        round=ns.round,
    )
