"""PyTorch's random functions beyond the plain constructors, written once for both Variables:
`normal` (its four overloads), `randperm`, `multinomial`, `bernoulli`, `randint_like`, the default
generator's functions (`seed`, `initial_seed`, `get_rng_state`, `set_rng_state`, `default_generator`,
`Generator`), and the in-place fills `x.uniform_()`, `x.normal_()`, `x.bernoulli_()`, `x.random_()`,
`x.exponential_()` (plus `x.multinomial()`, `x.bernoulli()`).

Every draw is made on the host from the `generator=` given, else from the package's default generator
(`engine.factory.Constructors.default_generator`), and becomes a Variable of the package: so a seed gives the
same numbers on the engine, on the embedded client and on the client against a server. Sampling that
depends on a tensor's values (`multinomial`'s and `bernoulli`'s probabilities, `bernoulli_(p)` with a tensor
`p`, `normal`'s check that `std >= 0`) reads those values: on the client a computed (lazy) Variable is fetched
first (one /forward), which is what PyTorch's semantics need (the draw, and its errors, happen at the call).

Gradients are PyTorch's: `normal(mean, std)` with a `mean` or `std` that requires grad gives a result that
requires grad, and zero gradients to both (PyTorch does not reparameterise; write `mean + std *
randn_like(mean)` for that), as `bernoulli(p)` gives `p` a zero gradient. `engine.surface.install` puts the
functions in each package and the methods on each Variable.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy

from engine.factory import _size, as_dtype
from engine.random import Generator

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engine.factory import Constructors
    from engine.surface_types import DeviceLike, DTypeLike, V, VariableSurface

_NON_NEGATIVE = "probability tensor contains either `inf`, `nan` or element < 0"


class Sampling:
    """The random functions and methods of one side, drawing through its `Constructors`."""

    def __init__(self, constructors: Constructors) -> None:
        self.constructors = constructors
        self.variable = constructors.variable

    # --- helpers -----------------------------------------------------------------------------------
    def _is_tensor(self, x) -> bool:
        return isinstance(x, (self.variable, numpy.ndarray))

    def _values(self, x) -> numpy.ndarray:
        """x's values on the host (a lazy client Variable is fetched)."""
        return numpy.asarray(x.numpy(force=True)) if isinstance(x, self.variable) else numpy.asarray(x)

    def _leaf(self, array, dtype) -> VariableSurface:
        return self.constructors._new(numpy.asarray(array), dtype, None, False)

    def _as_variable(self, x):
        return self.constructors.as_tensor(x) if isinstance(x, numpy.ndarray) else x

    def _zero_grad_through(self, sample, sources):
        """`sample`, with a zero gradient to each of `sources` that requires grad (PyTorch's rule for a
        draw from tensor parameters): where(True, sample, sum of sources)."""
        needing = [s for s in sources if isinstance(s, self.variable) and s.requires_grad]
        if not needing:
            return sample
        other = needing[0]
        for s in needing[1:]:
            other = other + s
        return sample.where(self.constructors.tensor(True), other)

    # --- functions ---------------------------------------------------------------------------------
    def normal(
        self,
        mean: Any,
        std: Any = 1.0,
        size: int | Sequence[int] | None = None,
        *,
        generator: Generator | None = None,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
    ) -> VariableSurface:
        """Draws from N(mean, std**2): `normal(mean, std, size)` with float mean and std, or
        `normal(mean, std)` with a tensor mean and/or std (the result has their broadcast shape and dtype).

        With tensors the draw is `mean + std * eps`, eps ~ N(0, 1); a mean or std that requires grad gets
        a zero gradient, as in PyTorch (whose normal is not reparameterised)."""
        bits = self.constructors.bits(generator)
        if not self._is_tensor(mean) and not self._is_tensor(std):
            if size is None:
                raise TypeError("normal(): with a float mean and std, give a size: normal(mean, std, size)")
            _check_std(float(std))
            values = bits.normal(float(mean), float(std), _size((size,)))
            return self.constructors._floating(values, dtype, device, requires_grad)
        if size is not None or requires_grad:
            raise TypeError(
                "normal(): size= and requires_grad= are taken only with a float mean and std (with tensors, the "
                "result has their shape and requires grad when they do)"
            )
        self.constructors.placement.check(device)
        mean, std = self._as_variable(mean), self._as_variable(std)
        tensors = {name: t for name, t in (("mean", mean), ("std", std)) if isinstance(t, self.variable)}
        for name, t in tensors.items():
            if t.dtype.kind != "f":
                raise RuntimeError(f"normal(): {name} must be a floating point tensor, got {t.dtype}")
        if "std" in tensors:
            if (self._values(std) < 0).any():
                raise RuntimeError("normal(): normal expects all elements of std >= 0.0")
        else:
            _check_std(float(std))
        shape = numpy.broadcast_shapes(*(tuple(t.shape) for t in tensors.values()))
        result_dtype = numpy.result_type(*(t.dtype for t in tensors.values()))
        eps = self._leaf(bits.standard_normal(shape), result_dtype)
        detached = [t.detach() if isinstance(t, self.variable) else t for t in (mean, std)]
        sample = detached[0] + detached[1] * eps
        if dtype is not None and as_dtype(dtype) != sample.dtype:
            sample = sample.to(dtype)
        return self._zero_grad_through(sample, (mean, std))

    def randperm(
        self,
        n: int,
        *,
        generator: Generator | None = None,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
    ) -> VariableSurface:
        """A random permutation of 0..n-1 (int64 unless `dtype=` says otherwise)."""
        if n < 0:
            raise RuntimeError(f"randperm(): n must be non-negative, got {n}")
        values = self.constructors.bits(generator).permutation(int(n))
        return self.constructors._new(values, numpy.int64 if dtype is None else dtype, device, requires_grad)

    def multinomial(
        self, input: Any, num_samples: int, replacement: bool = False, *, generator: Generator | None = None
    ) -> VariableSurface:
        """`num_samples` category indices (int64) per row of `input`, a 1-D or 2-D tensor of non-negative
        weights (unnormalised ones too), drawn with or without replacement. A lazy client `input` is
        fetched first: the draw needs its values."""
        dtype = numpy.dtype(input.dtype) if hasattr(input, "dtype") else numpy.asarray(input).dtype
        if dtype.kind != "f":
            raise RuntimeError(f"multinomial(): input: multinomial only supports floating-point dtypes, got {dtype}")
        ndim = len(input.shape) if hasattr(input, "shape") else numpy.ndim(input)
        if ndim not in (1, 2):
            raise RuntimeError(f"multinomial(): input: prob_dist must be 1 or 2 dim, got {ndim} dimensions")
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, numpy.integer)):
            raise TypeError(f"multinomial(): num_samples must be an int, got {type(num_samples).__name__}")
        if num_samples <= 0:
            raise RuntimeError(f"multinomial(): num_samples: cannot sample n_sample <= 0 samples (got {num_samples})")
        categories = input.shape[-1]
        if not replacement and num_samples > categories:
            raise RuntimeError(
                "multinomial(): num_samples: cannot sample n_sample > prob_dist.size(-1) samples without "
                f"replacement ({num_samples} > {categories})"
            )
        weights = self._values(input).astype(numpy.float64).reshape(-1, categories)
        if not numpy.isfinite(weights).all() or (weights < 0).any():
            raise RuntimeError(f"multinomial(): input: {_NON_NEGATIVE}")
        totals = weights.sum(axis=1)
        if (totals <= 0).any():
            raise RuntimeError("multinomial(): input: invalid multinomial distribution (sum of probabilities <= 0)")
        bits = self.constructors.bits(generator)
        if replacement:
            indices = _with_replacement(weights, totals, num_samples, bits)
        else:  # the exponential race: the num_samples largest weight / Exp(1) win (Efraimidis & Spirakis)
            indices = _largest(weights / bits.standard_exponential(weights.shape), num_samples)
        return self._leaf(indices.reshape((*input.shape[:-1], num_samples)), numpy.int64)

    def bernoulli(self, input: Any, p: float | None = None, *, generator: Generator | None = None) -> VariableSurface:
        """0s and 1s of `input`'s shape and dtype, each 1 with probability `input`'s value there (`p`, when
        given, for all). Only with `p=None` are the input's values read (a lazy client input is fetched)."""
        dtype = numpy.dtype(input.dtype)
        if dtype.kind != "f":
            raise RuntimeError(f"bernoulli(): input must be a floating point tensor, got {dtype}")
        shape = tuple(input.shape)
        probabilities: Any
        if p is None:
            probabilities = self._values(input)
            if not ((probabilities >= 0) & (probabilities <= 1)).all():
                raise RuntimeError("bernoulli(): input: expected every probability in [0, 1] (p_in >= 0 && p_in <= 1)")
        else:
            probabilities = _checked_p("bernoulli", p)
        draws = self.constructors.bits(generator).random(shape) < probabilities
        return self._zero_grad_through(self._leaf(draws, dtype), (input,))

    def randint_like(
        self,
        input: VariableSurface,
        low: int = 0,
        high: int | None = None,
        *,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
        memory_format: Any = None,
    ) -> VariableSurface:
        """`randint_like(input, high)` or `randint_like(input, low, high)`: integers of input's shape and dtype."""
        if high is None:
            low, high = 0, low
        if low >= high:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
        values = self.constructors.bits().integers(low, high, tuple(input.shape))
        return self.constructors._new(values, input.dtype if dtype is None else dtype, device, requires_grad)

    def seed(self) -> int:
        """Reseed the default generator non-deterministically; returns the seed."""
        return self.constructors.default_generator.seed()

    def initial_seed(self) -> int:
        """The seed the default generator last started from."""
        return self.constructors.default_generator.initial_seed()

    def get_rng_state(self) -> dict[str, Any]:
        """The default generator's state (NumPy's PCG64 state, not PyTorch's byte tensor)."""
        return self.constructors.default_generator.get_state()

    def set_rng_state(self, new_state: dict[str, Any]) -> None:
        """Restore the default generator's state from `get_rng_state()`."""
        self.constructors.default_generator.set_state(new_state)

    @contextlib.contextmanager
    def fork_rng(self, devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices", device_type="cuda"):
        """`torch.random.fork_rng`: the default generator's state restored on exit (draws inside leave no trace)."""
        state = self.get_rng_state() if enabled else None
        try:
            yield
        finally:
            if enabled:
                self.set_rng_state(state)

    def names(self) -> dict:
        """The package-level names, and `random` (torch.random's)."""
        functions = (
            self.normal,
            self.randperm,
            self.multinomial,
            self.bernoulli,
            self.randint_like,
            self.seed,
            self.initial_seed,
            self.get_rng_state,
            self.set_rng_state,
        )
        names = {
            **{f.__name__: f for f in functions},
            "Generator": Generator,
            "default_generator": self.constructors.default_generator,
        }
        random = (self.seed, self.initial_seed, self.get_rng_state, self.set_rng_state, self.fork_rng)
        names["random"] = SimpleNamespace(**{f.__name__: f for f in random}, manual_seed=self.constructors.manual_seed,
                                          Generator=Generator, default_generator=names["default_generator"])  # fmt: skip
        return names

    # --- methods -----------------------------------------------------------------------------------
    def methods(self) -> dict:
        """The Variable methods: in-place fills (through `x[...] = draws`, so autograd's in-place rules
        apply) and `x.multinomial()`, `x.bernoulli()`."""
        bits_of = self.constructors.bits
        values_of = self._values

        def fill(self, values):
            self[...] = numpy.asarray(values).astype(self.dtype)
            return self

        def uniform_(self: V, low: float = 0.0, high: float = 1.0, *, generator: Generator | None = None) -> V:
            """Fill in place with draws from U[low, high)."""
            if low > high:
                raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={low} > to={high}")
            return fill(self, bits_of(generator).uniform(low, high, tuple(self.shape)))

        def normal_(self: V, mean: float = 0.0, std: float = 1.0, *, generator: Generator | None = None) -> V:
            """Fill in place with draws from N(mean, std**2)."""
            _check_std(std)
            return fill(self, bits_of(generator).normal(mean, std, tuple(self.shape)))

        def bernoulli_(self: V, p: Any = 0.5, *, generator: Generator | None = None) -> V:
            """Fill in place with 1s (probability `p`, a float or a tensor broadcast to this one) and 0s."""
            probabilities = values_of(p) if not isinstance(p, (int, float)) else _checked_p("bernoulli_", p)
            if not numpy.all((probabilities >= 0) & (probabilities <= 1)):
                raise RuntimeError("bernoulli_(): p: expected every probability in [0, 1]")
            return fill(self, bits_of(generator).random(tuple(self.shape)) < probabilities)

        def random_(self: V, low: int = 0, high: int | None = None, *, generator: Generator | None = None) -> V:
            """Fill in place with integers: `random_(high)` in [0, high), `random_(low, high)` in [low, high),
            `random_()` in [0, 2**mantissa] for a float dtype and [0, max] for an integer one."""
            if high is None and low != 0:
                low, high = 0, low
            if high is None:
                inclusive = _random_top(self.dtype)
            else:
                if low >= high:
                    raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
                inclusive = high - 1
            return fill(self, bits_of(generator).integers(low, inclusive, tuple(self.shape), endpoint=True))

        def exponential_(self: V, lambd: float = 1.0, *, generator: Generator | None = None) -> V:
            """Fill in place with draws from the exponential distribution of rate `lambd`."""
            if not lambd > 0:
                raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
            return fill(self, bits_of(generator).exponential(1.0 / lambd, tuple(self.shape)))

        multinomial, bernoulli = self.multinomial, self.bernoulli

        def multinomial_method(
            self, num_samples: int, replacement: bool = False, *, generator: Generator | None = None
        ) -> VariableSurface:
            """`multinomial(self, num_samples, replacement, generator=)`."""
            return multinomial(self, num_samples, replacement, generator=generator)

        def bernoulli_method(self, p: float | None = None, *, generator: Generator | None = None) -> VariableSurface:
            """`bernoulli(self, p, generator=)`."""
            return bernoulli(self, p, generator=generator)

        multinomial_method.__name__ = multinomial_method.__qualname__ = "multinomial"
        bernoulli_method.__name__ = bernoulli_method.__qualname__ = "bernoulli"
        fills = (uniform_, normal_, bernoulli_, random_, exponential_, multinomial_method, bernoulli_method)
        return {f.__name__: f for f in fills}


def _check_std(std: float) -> None:
    if not std >= 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")


def _checked_p(name: str, p: float) -> float:
    if not 0.0 <= p <= 1.0:
        raise RuntimeError(f"{name} expects p to be in [0, 1], but got p={p}")
    return float(p)


def _random_top(dtype) -> int:
    """The largest value `random_()` draws for `dtype` (PyTorch's: 2**mantissa bits for floats)."""
    dtype = numpy.dtype(dtype)
    if dtype.kind == "f":
        return 2 ** (numpy.finfo(dtype).nmant + 1)
    if dtype.kind == "b":
        return 1
    return int(numpy.iinfo(dtype).max)


def _largest(keys, count) -> numpy.ndarray:
    """Per row, the indices of the `count` largest keys, largest first."""
    if count < keys.shape[1]:
        top = numpy.argpartition(-keys, count - 1, axis=1)[:, :count]
    else:
        top = numpy.broadcast_to(numpy.arange(keys.shape[1]), keys.shape)
    order = numpy.argsort(-numpy.take_along_axis(keys, top, axis=1), axis=1, kind="stable")
    return numpy.take_along_axis(top, order, axis=1)


def _with_replacement(weights, totals, num_samples, bits) -> numpy.ndarray:
    """Per row, `num_samples` draws by inverting the cumulative distribution (zero weights are never drawn)."""
    uniforms = bits.random((weights.shape[0], num_samples))
    out = numpy.empty((weights.shape[0], num_samples), dtype=numpy.int64)
    for row, (w, total) in enumerate(zip(weights, totals)):
        cdf = numpy.cumsum(w / total)
        picked = numpy.searchsorted(cdf, uniforms[row], side="right")
        out[row] = numpy.minimum(picked, numpy.flatnonzero(w)[-1])  # rounding can leave cdf[-1] just below 1
    return out
