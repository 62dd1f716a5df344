"""`torch.distributions` (Normal, Categorical, Bernoulli, Uniform, Independent, `kl_divergence`), written once
for both Variables: `bind(ns)` gives a package its classes, whose math calls the Variables' methods and the
package's functions, so on the client a policy's `log_prob` or a VAE's `rsample` is recorded like any op.

PyTorch's formulas, parameter conventions and shapes (`batch_shape`, `event_shape`, `sample(sample_shape)`);
draws come from the package's generator (NumPy's stream, not PyTorch's). Arguments are not validated
(`validate_args` is accepted, as PyTorch's default of checking is off under `python -O`).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy

_HALF_LOG_TWO_PI = 0.5 * math.log(2 * math.pi)


class Distribution:
    """What every distribution has: shapes, `sample` from `rsample` without a graph, `stddev`."""

    ns = None  # the package, set per side by `bind`
    has_rsample = False
    event_shape: tuple = ()

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Accepted: arguments are not validated here."""

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self.batch_shape, self.event_shape = tuple(batch_shape), tuple(event_shape)

    def _shape(self, sample_shape) -> tuple:
        return tuple(sample_shape) + self.batch_shape + self.event_shape

    def sample(self, sample_shape=()):
        with self.ns.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        raise NotImplementedError(f"{type(self).__name__} has no reparameterized sample (rsample)")

    @property
    def stddev(self):
        return self.variance.sqrt()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _tensor(ns, value, like=None):
    if ns.is_tensor(value):
        return value
    dtype = like.dtype if like is not None and ns.is_tensor(like) else ns.get_default_dtype()
    return ns.tensor(value, dtype=dtype)


class Normal(Distribution):
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        loc = _tensor(self.ns, loc, scale)
        self.loc, self.scale = self.ns.broadcast_tensors(loc, _tensor(self.ns, scale, loc))
        super().__init__(self.loc.shape)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale.pow(2)

    def rsample(self, sample_shape=()):
        eps = self.ns.randn(self._shape(sample_shape), dtype=self.loc.dtype)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        return -((value - self.loc) ** 2) / (2 * self.variance) - self.scale.log() - _HALF_LOG_TWO_PI

    def cdf(self, value):
        return 0.5 * (1 + self.ns.erf((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)))

    def entropy(self):
        return 0.5 + _HALF_LOG_TWO_PI + self.scale.log()


class Uniform(Distribution):
    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        low = _tensor(self.ns, low, high)
        self.low, self.high = self.ns.broadcast_tensors(low, _tensor(self.ns, high, low))
        super().__init__(self.low.shape)

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def variance(self):
        return (self.high - self.low).pow(2) / 12

    def rsample(self, sample_shape=()):
        u = self.ns.rand(self._shape(sample_shape), dtype=self.low.dtype)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value):
        inside = ((self.low <= value) & (value < self.high)).type_as(self.low)
        return inside.log() - (self.high - self.low).log()

    def cdf(self, value):
        return ((value - self.low) / (self.high - self.low)).clamp(0, 1)

    def entropy(self):
        return (self.high - self.low).log()


def _clamped(ns, probs):
    eps = float(numpy.finfo(numpy.dtype(probs.dtype)).eps)
    return probs.clamp(min=eps, max=1 - eps)


class Categorical(Distribution):
    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        param = probs if probs is not None else logits
        if param.dim() < 1:
            raise ValueError(
                f"`{'probs' if probs is not None else 'logits'}` parameter must be at least one-dimensional."
            )
        if probs is not None:
            self.probs = probs / probs.sum(-1, keepdim=True)
            self.logits = _clamped(self.ns, self.probs).log()
        else:
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
            self.probs = self.logits.softmax(-1)
        self._num_events = param.shape[-1]
        super().__init__(tuple(param.shape[:-1]))

    @property
    def param_shape(self):
        return tuple(self.probs.shape)

    @property
    def mean(self):
        return self.ns.full(self.batch_shape, math.nan, dtype=self.probs.dtype)

    variance = mean

    @property
    def mode(self):
        return self.probs.argmax(-1)

    def sample(self, sample_shape=()):
        count = int(numpy.prod(sample_shape, dtype=numpy.int64)) if sample_shape else 1
        with self.ns.no_grad():
            rows = self.probs.reshape(-1, self._num_events)
            drawn = self.ns.multinomial(rows, count, True).t()
        return drawn.reshape(tuple(sample_shape) + self.batch_shape)

    def log_prob(self, value):
        value = value.long().unsqueeze(-1)
        shape = numpy.broadcast_shapes(tuple(value.shape[:-1]), self.batch_shape)
        log_pmf = self.logits.expand((*shape, self._num_events))
        return log_pmf.gather(-1, value.expand((*shape, 1))).squeeze(-1)

    def entropy(self):
        lowest = float(numpy.finfo(numpy.dtype(self.logits.dtype)).min)
        return -(self.logits.clamp(min=lowest) * self.probs).sum(-1)


class Bernoulli(Distribution):
    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            self.probs = _tensor(self.ns, probs)
            clamped = _clamped(self.ns, self.probs)
            self.logits = clamped.log() - (-clamped).log1p()
        else:
            self.logits = _tensor(self.ns, logits)
            self.probs = self.logits.sigmoid()
        super().__init__(tuple(self.probs.shape))

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        return (self.probs >= 0.5).type_as(self.probs)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        with self.ns.no_grad():
            return self.ns.bernoulli(self.probs.expand(self._shape(sample_shape)))

    def log_prob(self, value):
        logits, value = self.ns.broadcast_tensors(self.logits, value)
        return -self.ns.nn.functional.binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        return self.ns.nn.functional.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")


class Independent(Distribution):
    """`base` with its last `reinterpreted_batch_ndims` batch dimensions taken as one event."""

    def __init__(self, base_distribution, reinterpreted_batch_ndims, validate_args=None):
        n = reinterpreted_batch_ndims
        if n > len(base_distribution.batch_shape):
            raise ValueError(
                "Expected reinterpreted_batch_ndims <= len(base_distribution.batch_shape), "
                f"actual {n} vs {len(base_distribution.batch_shape)}"
            )
        self.base_dist, self.reinterpreted_batch_ndims = base_distribution, n
        shape = base_distribution.batch_shape + base_distribution.event_shape
        cut = len(base_distribution.batch_shape) - n
        super().__init__(shape[:cut], shape[cut:])
        self.has_rsample = base_distribution.has_rsample

    def _summed(self, value):
        dims = tuple(range(-self.reinterpreted_batch_ndims, 0))
        return value.sum(dims) if dims else value

    mean = property(lambda self: self.base_dist.mean)
    variance = property(lambda self: self.base_dist.variance)

    def sample(self, sample_shape=()):
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()):
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value):
        return self._summed(self.base_dist.log_prob(value))

    def entropy(self):
        return self._summed(self.base_dist.entropy())


def kl_divergence(p, q):
    """KL(p || q) for two distributions of one family (Normal, Categorical, Bernoulli, Independent)."""
    family = next((c for c in FAMILIES[1:] if isinstance(p, c)), None)
    if family is None or not isinstance(q, family):
        raise NotImplementedError(f"No KL(p || q) is implemented for p {type(p).__name__}, q {type(q).__name__}")
    if isinstance(p, Normal):
        var_ratio = (p.scale / q.scale).pow(2)
        t1 = ((p.loc - q.loc) / q.scale).pow(2)
        return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())
    if isinstance(p, Categorical):
        terms = p.probs * (p.logits - q.logits)
        return p.ns.where(p.probs == 0, 0.0, terms).sum(-1)
    if isinstance(p, Bernoulli):
        softplus = p.ns.nn.functional.softplus
        t1 = p.probs * (softplus(-q.logits) - softplus(-p.logits))
        t2 = (1 - p.probs) * (softplus(q.logits) - softplus(p.logits))
        return t1 + t2
    if isinstance(p, Independent) and p.reinterpreted_batch_ndims == q.reinterpreted_batch_ndims:
        return p._summed(kl_divergence(p.base_dist, q.base_dist))
    raise NotImplementedError(f"No KL(p || q) is implemented for p {type(p).__name__}, q {type(q).__name__}")


FAMILIES = (Distribution, Normal, Uniform, Categorical, Bernoulli, Independent)


def bind(ns) -> SimpleNamespace:
    """`torch.distributions` for package `ns`: each class subclassed with `ns` as its package."""
    classes = {cls.__name__: type(cls.__name__, (cls,), {"ns": ns}) for cls in FAMILIES}
    return SimpleNamespace(
        **classes,
        kl_divergence=kl_divergence,
        kl=SimpleNamespace(kl_divergence=kl_divergence),
    )
