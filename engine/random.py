"""`torch.Generator`: a seedable source of random numbers, one class for the engine and the client.

Every random constructor and in-place fill (`rand`, `randn`, `randint`, `randperm`, `normal`,
`multinomial`, `bernoulli`, `x.uniform_()`, `dropout`, `nn.init`...) draws from the `generator=` it is
given, else from its package's default generator (`engine.default_generator`, `client.default_generator`,
reseeded by `manual_seed`). Draws are made on the host, so the same seed gives the same numbers on the
engine, the embedded client and the client against a server.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any

import numpy

from engine.devices import Device

DEFAULT_SEED = 67280421310721  # what a new torch.Generator() starts from
_SEEDS = 1 << 64


def _checked_seed(seed: Any) -> int:
    """`seed` as PyTorch takes it: an int in [-2**63, 2**64), a negative one wrapped around 2**64."""
    if isinstance(seed, bool) or not isinstance(seed, (int, numpy.integer)):
        raise RuntimeError(f"manual_seed expected a long, but got {type(seed).__name__}")
    seed = int(seed)
    if not -(1 << 63) <= seed < _SEEDS:
        raise ValueError(f"Overflow when unpacking long long: seed {seed} is outside [-2**63, 2**64)")
    return seed % _SEEDS


class Generator:
    """`torch.Generator(device='cpu')`: a stream of random numbers to pass as `generator=`.

    `manual_seed(s)` (returns the generator), `seed()` (a fresh non-deterministic seed, returned),
    `initial_seed()`, `get_state()` / `set_state(state)` and `device` behave as PyTorch's. A new
    generator starts from PyTorch's default seed (67280421310721), so two unseeded ones agree.

    The stream is NumPy's PCG64 (`numpy.random.Generator`), not PyTorch's Mersenne Twister or Philox:
    a seed gives the same numbers everywhere in gradserve (engine, embedded and remote client, CPU or
    GPU backend: draws are made on the host), but not the numbers PyTorch gives for that seed. The state
    of `get_state()` is NumPy's bit-generator state (a dict), not PyTorch's byte tensor.
    """

    def __init__(self, device: Any = "cpu") -> None:
        self.device = Device(device)
        self.manual_seed(DEFAULT_SEED)

    def manual_seed(self, seed: int) -> Generator:
        """Restart the stream from `seed` (an int, negative ones wrapped around 2**64); returns self."""
        self._initial_seed = _checked_seed(seed)
        self.bits = numpy.random.Generator(numpy.random.PCG64(self._initial_seed))
        return self

    def seed(self) -> int:
        """Reseed from the operating system's entropy; returns the new seed."""
        seed = secrets.randbits(64)
        self.manual_seed(seed)
        return seed

    def initial_seed(self) -> int:
        """The seed the stream last started from."""
        return self._initial_seed

    def get_state(self) -> dict[str, Any]:
        """A copy of the stream's position (NumPy's PCG64 state), for `set_state`."""
        return copy.deepcopy(dict(self.bits.bit_generator.state))

    def set_state(self, new_state: dict[str, Any]) -> Generator:
        """Move the stream to a position `get_state` returned; returns self."""
        if not isinstance(new_state, dict) or new_state.get("bit_generator") != "PCG64":
            raise TypeError(
                "set_state expects a state from Generator.get_state() (a dict of NumPy's PCG64 state), "
                f"got {type(new_state).__name__}"
            )
        self.bits.bit_generator.state = copy.deepcopy(new_state)
        return self

    def __repr__(self) -> str:
        return f"<gradserve Generator device={self.device} initial_seed={self._initial_seed}>"


def bits_of(generator: Generator | None, default: Generator) -> numpy.random.Generator:
    """The NumPy stream to draw from: `generator`'s, else `default`'s."""
    if generator is None:
        return default.bits
    if not isinstance(generator, Generator):
        raise TypeError(f"generator must be a Generator (torch.Generator()), got {type(generator).__name__}")
    return generator.bits
