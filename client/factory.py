"""Constructors in PyTorch's spelling (float32 by default), on host arrays: `engine.factory`'s
implementation with the client's Variable (`manual_seed(s)` gives the same draws as the engine's)."""

from __future__ import annotations

from client.variable import Variable, as_host_array
from engine.factory import Constructors

_client = Constructors(Variable, as_host_array)
tensor, zeros, ones, full, randn, rand, arange, zeros_like, ones_like, manual_seed = (
    _client.tensor, _client.zeros, _client.ones, _client.full, _client.randn, _client.rand, _client.arange,
    _client.zeros_like, _client.ones_like, _client.manual_seed,
)
