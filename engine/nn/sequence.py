"""`torch.nn`'s recurrent modules (`RNN`, `LSTM`, `GRU` and their cells), written once for every side.

Each class here is a mixin that `engine.nn.module_classes.bind` joins to a side's `Module` (this file does not
import `modules`, which lists these classes in its `GENERIC`), so `self._ns` and `self._parameter` are
the side's. The forward is a Python loop over the time steps composing registry ops: the input's
projection for every step at once (`F.linear`), then per step the hidden projection and PyTorch's gate
equations in its gate order (LSTM i, f, g, o; GRU r, z, n with n = tanh(W_in x + b_in + r * (W_hn h + b_hn))).
Parameter names, shapes, initialisation (U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))), reprs and input
checks are PyTorch's, and a PackedSequence input runs as PyTorch's (`_packed_direction`); an LSTM's `proj_size`
projects h by `weight_hr` after each step (`_projected_step`).
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
from typing import Any

from engine.grad_fn_names import renamed
from engine.nn import functional as F
from engine.nn import init
from engine.nn.packing import PackedSequence
from engine.nn.sides import _ns
from engine.user_warnings import warn


class _Sided:
    """What these mixins use of the side's `Module` they are bound to (declared for type checkers)."""

    _ns: Any
    _parameter: Any
    training: bool
    register_parameter: Any
    register_buffer: Any
    parameters: Any


def _tanh_step(projected, state, w_hh, b_hh):
    return ((projected + F.linear(state[0], w_hh, b_hh)).tanh(),)


def _relu_step(projected, state, w_hh, b_hh):
    return ((projected + F.linear(state[0], w_hh, b_hh)).relu(),)


def _lstm_step(projected, state, w_hh, b_hh):
    hidden, cell = state
    gates = projected + F.linear(hidden, w_hh, b_hh)
    size = cell.shape[-1]
    i, f, g, o = (gates[..., k * size : (k + 1) * size] for k in range(4))
    cell = f.sigmoid() * cell + i.sigmoid() * g.tanh()
    return o.sigmoid() * cell.tanh(), cell


def _projected_step(projected, state, w_hh, b_hh, w_hr):
    hidden, cell = _lstm_step(projected, state, w_hh, b_hh)
    return F.linear(hidden, w_hr), cell


def _gru_step(projected, state, w_hh, b_hh):
    hidden = state[0]
    recurrent = F.linear(hidden, w_hh, b_hh)
    size = hidden.shape[-1]
    r = (projected[..., :size] + recurrent[..., :size]).sigmoid()
    z = (projected[..., size : 2 * size] + recurrent[..., size : 2 * size]).sigmoid()
    n = (projected[..., 2 * size :] + r * recurrent[..., 2 * size :]).tanh()
    return (n + z * (hidden - n),)


_STEPS = {"RNN_TANH": _tanh_step, "RNN_RELU": _relu_step, "LSTM": _lstm_step, "GRU": _gru_step}
_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _packed_direction(step, projected, initial, weights, sizes, reverse):
    """(output rows, final state) of one direction over the packed rows `projected` with `sizes[t]` of the
    batch at step t (PyTorch's order: longest first). Forward, a sequence's state leaves the batch after its
    last step; reversed, it joins the batch, from `initial`, at its last step."""
    offsets = [0, *itertools.accumulate(sizes)]
    per_step, ended = [None] * len(sizes), []
    state = tuple(s[: sizes[-1]] for s in initial) if reverse else initial
    for t in reversed(range(len(sizes))) if reverse else range(len(sizes)):
        size, held = sizes[t], state[0].shape[0]
        if size < held:
            ended.append(tuple(s[size:] for s in state))
            state = tuple(s[:size] for s in state)
        elif size > held:
            state = tuple(_ns(s).cat([s, s0[held:size]]) for s, s0 in zip(state, initial))
        state = step(projected[offsets[t] : offsets[t + 1]], state, *weights)
        per_step[t] = state[0]
    if ended:
        state = tuple(_ns(s).cat([s, *(e[k] for e in reversed(ended))]) for k, s in enumerate(state))
    return _ns(per_step[0]).cat(per_step), state


def _uniform_init(module) -> None:
    bound = 1.0 / math.sqrt(module.hidden_size) if module.hidden_size > 0 else 0
    for weight in module.parameters():
        init.uniform_(weight, -bound, bound)


class RNNBase(_Sided):
    """The stacked (and bidirectional) recurrent layers of `mode` over [T, B, input_size] input (or
    [B, T, ...] with batch_first; [T, input_size] unbatched), returning the last layer's outputs and each
    layer's final state."""

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.bidirectional, self.proj_size = bias, batch_first, bidirectional, proj_size
        if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError(
                "dropout should be a number in range [0, 1] representing the probability of an element being zeroed"
            )
        self.dropout = float(dropout)
        if dropout > 0 and num_layers == 1:
            warn(
                "dropout option adds dropout after all but last recurrent layer, so non-zero dropout expects "
                f"num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}"
            )
        for name, flag in (("bias", bias), ("batch_first", batch_first)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} should be of type bool, got: {type(flag).__name__}")
        for name, size in (("input_size", input_size), ("hidden_size", hidden_size)):
            if not isinstance(size, int):
                raise TypeError(f"{name} should be of type int, got: {type(size).__name__}")
            if size <= 0:
                raise ValueError(f"{name} must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        directions, width = 2 if bidirectional else 1, proj_size or hidden_size  # (width: h's, LSTM's projected)
        gates = _GATES[mode] * hidden_size
        self._flat_weights_names: list[str] = []
        self._all_weights: list[list[str]] = []
        for layer in range(num_layers):
            for direction in range(directions):
                columns = input_size if layer == 0 else width * directions
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes: dict[str, tuple[int, ...]] = {"weight_ih": (gates, columns), "weight_hh": (gates, width)}
                if bias:
                    shapes.update({"bias_ih": (gates,), "bias_hh": (gates,)})
                if proj_size:
                    shapes["weight_hr"] = (proj_size, hidden_size)
                for name, shape in shapes.items():
                    setattr(self, name + suffix, self._parameter(self._ns.empty(shape, device=device, dtype=dtype)))
                self._all_weights.append([name + suffix for name in shapes])
                self._flat_weights_names.extend(self._all_weights[-1])
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _uniform_init(self)

    def flatten_parameters(self) -> None:
        """A no-op, as PyTorch's is off cuDNN."""

    @property
    def all_weights(self):
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def _check(self, input, hidden, batch: int) -> None:
        weight = getattr(self, self._flat_weights_names[0])
        if input.dtype != weight.dtype:
            raise ValueError(
                f"RNN input dtype ({input.dtype}) does not match weight dtype ({weight.dtype}). "
                f"Convert input: input.to({weight.dtype}), or convert model: model.to({input.dtype})"
            )
        if input.shape[-1] != self.input_size:
            raise RuntimeError(
                f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got {input.shape[-1]}"
            )
        for k, state in enumerate(hidden):
            expected = self._state_shape(batch, k)
            if tuple(state.shape) != expected:
                which = "hidden" if len(hidden) == 1 else f"hidden[{k}]"
                raise RuntimeError(f"Expected {which} size {expected}, got {list(state.shape)}")

    def _state_shape(self, batch: int, k: int) -> tuple:
        """The shape of the initial state k: h's (k 0) of width proj_size in a projected LSTM, else hidden_size."""
        width = self.proj_size if k == 0 and self.proj_size else self.hidden_size
        return (self.num_layers * (2 if self.bidirectional else 1), batch, width)

    def _forward(self, input, hx, name: str, states: int):
        """(output, final states) for input and the initial states `hx` (a tuple of `states` tensors or None)."""
        if isinstance(input, PackedSequence):
            return self._packed(input, hx, states)
        if input.ndim not in (2, 3):
            tensor = " tensor" if name == "RNN" else ""
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D{tensor} instead")
        batched = input.ndim == 3
        batch_dim = 0 if self.batch_first else 1
        if not batched:
            input = input.unsqueeze(batch_dim)
        if hx is not None:
            want = 3 if batched else 2
            if any(state.ndim != want for state in hx):
                got = ", ".join(f"{state.ndim}-D" for state in hx)
                what, tensors = ("hx and cx", f"({got}) tensors") if states == 2 else ("hx", f"{got} tensor")
                raise RuntimeError(
                    f"For {'batched 3-D' if batched else 'unbatched 2-D'} input, {what} should also be {want}-D "
                    f"but got {tensors}"
                )
            if not batched:
                hx = tuple(state.unsqueeze(1) for state in hx)
        else:
            hx = tuple(
                self._ns.zeros(self._state_shape(input.shape[batch_dim], k), dtype=input.dtype) for k in range(states)
            )
        self._check(input, hx, input.shape[batch_dim])
        output, final = self._layers(input.transpose(0, 1) if self.batch_first else input, hx)
        if self.batch_first:  # (torch's RNN and GRU transpose theirs in place: TransposeBackward1)
            output = (
                output.transpose(0, 1) if self.mode == "LSTM" else renamed(output.transpose(0, 1), "TransposeBackward1")
            )
        if not batched:
            output, final = output.squeeze(batch_dim), tuple(state.squeeze(1) for state in final)
        return output, final

    def _packed(self, input, hx, states: int):
        """(PackedSequence output, final states) of a PackedSequence input, as PyTorch: the initial states
        and the final ones are in the batch's own order (`sorted_indices` permutes them)."""
        data, batch_sizes, sorted_indices, unsorted_indices = input
        sizes = [int(size) for size in batch_sizes.tolist()]
        if data.ndim != 2:
            raise RuntimeError(f"input must have 2 dimensions, got {data.ndim}")
        if hx is None:
            hx = tuple(self._ns.zeros(self._state_shape(sizes[0], k), dtype=data.dtype) for k in range(states))
        elif sorted_indices is not None:
            hx = tuple(state.index_select(1, sorted_indices) for state in hx)
        self._check(data, hx, sizes[0])
        output, final = self._layers(data, hx, sizes)
        if unsorted_indices is not None:
            final = tuple(state.index_select(1, unsorted_indices) for state in final)
        return PackedSequence(output, batch_sizes, sorted_indices, unsorted_indices), final

    def _layers(self, sequence, hx, sizes=None):
        """The layers over [T, B, features] (or the rows of a packed sequence with batch `sizes`): (last
        layer's outputs [T, B, H * directions] (or packed rows), final states)."""
        step, ns = _STEPS[self.mode], self._ns
        directions = 2 if self.bidirectional else 1
        steps = sequence.shape[0]
        finals = []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                index = layer * directions + direction
                named = {name.split("_l")[0]: getattr(self, name) for name in self._all_weights[index]}
                w_ih, w_hh, b_ih, b_hh = (named.get(k) for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
                if "weight_hr" in named:  # (a projected LSTM: h = (o * tanh(c)) @ weight_hr.T)
                    step = functools.partial(_projected_step, w_hr=named["weight_hr"])
                projected = F.linear(sequence, w_ih, b_ih)
                state = tuple(initial[index] for initial in hx)
                if sizes is not None:
                    output, state = _packed_direction(step, projected, state, (w_hh, b_hh), sizes, direction)
                    outputs.append(output)
                    finals.append(state)
                    continue
                per_step = [None] * steps
                for t in reversed(range(steps)) if direction else range(steps):
                    state = step(projected[t], state, w_hh, b_hh)
                    per_step[t] = state[0]
                outputs.append(ns.stack(per_step))
                finals.append(state)
            sequence = outputs[0] if directions == 1 else ns.cat(outputs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                sequence = F.dropout(sequence, self.dropout, True)
        return sequence, tuple(ns.stack([final[k] for final in finals]) for k in range(len(hx)))

    def extra_repr(self) -> str:
        defaults = {
            "proj_size": 0,
            "num_layers": 1,
            "bias": True,
            "batch_first": False,
            "dropout": 0.0,
            "bidirectional": False,
        }
        changed = "".join(f", {k}={getattr(self, k)}" for k, v in defaults.items() if getattr(self, k) != v)
        return f"{self.input_size}, {self.hidden_size}{changed}"


def _nonlinearity(nonlinearity) -> str:
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
    return "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"


class RNN(RNNBase):
    """Elman RNN layers: h_t = tanh (or relu)(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh). Returns (output, h_n)."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            nonlinearity, args = args[3], args[:3] + args[4:]
        else:
            nonlinearity = kwargs.pop("nonlinearity", "tanh")
        super().__init__(_nonlinearity(nonlinearity), *args, **kwargs)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        output, (hidden,) = self._forward(input, None if hx is None else (hx,), "RNN", 1)
        return output, hidden


class LSTM(RNNBase):
    """LSTM layers (gates i, f, g, o). Returns (output, (h_n, c_n))."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)

    def forward(self, input, hx=None):
        output, hidden = self._forward(input, None if hx is None else tuple(hx), "LSTM", 2)
        return output, hidden


class GRU(RNNBase):
    """GRU layers (gates r, z, n). Returns (output, h_n)."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)

    def forward(self, input, hx=None):
        output, (hidden,) = self._forward(input, None if hx is None else (hx,), "GRU", 1)
        return output, hidden


class RNNCellBase(_Sided):
    """One step of a recurrent layer on [B, input_size] (or [input_size]) input: weight_ih, weight_hh,
    bias_ih, bias_hh as PyTorch's cells name them."""

    _mode = "LSTM"
    bias_ih: Any
    bias_hh: Any

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        rows = _GATES[self._mode] * hidden_size
        self.weight_ih = self._parameter(self._ns.empty((rows, input_size), device=device, dtype=dtype))
        self.weight_hh = self._parameter(self._ns.empty((rows, hidden_size), device=device, dtype=dtype))
        for name in ("bias_ih", "bias_hh"):
            if bias:
                setattr(self, name, self._parameter(self._ns.empty(rows, device=device, dtype=dtype)))
            else:
                self.register_parameter(name, None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _uniform_init(self)

    def _step(self, input, hx, states: int, mode: str):
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        for k, state in enumerate(hx or ()):
            if state.ndim not in (1, 2):
                which = f"hx[{k}]" if states == 2 else "hidden"
                raise ValueError(f"{name}: Expected {which} to be 1D or 2D, got {state.ndim}D instead")
        batched = input.ndim == 2
        if not batched:
            input = input.unsqueeze(0)
            hx = None if hx is None else tuple(state.unsqueeze(0) for state in hx)
        if hx is None:
            hx = (self._ns.zeros((input.shape[0], self.hidden_size), dtype=input.dtype),) * states
        if input.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[1]} expected {self.input_size}")
        for k, state in enumerate(hx):
            if state.shape[0] != input.shape[0]:
                raise RuntimeError(
                    f"Input batch size {input.shape[0]} doesn't match hidden{k} batch size {state.shape[0]}"
                )
            if state.shape[1] != self.hidden_size:
                raise RuntimeError(
                    f"hidden{k} has inconsistent hidden_size: got {state.shape[1]}, expected {self.hidden_size}"
                )
        projected = F.linear(input, self.weight_ih, self.bias_ih)
        out = _STEPS[mode](projected, tuple(hx), self.weight_hh, self.bias_hh)
        return out if batched else tuple(state.squeeze(0) for state in out)

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            text += f", bias={self.bias}"
        nonlinearity = getattr(self, "nonlinearity", "tanh")
        if nonlinearity != "tanh":
            text += f", nonlinearity={nonlinearity}"
        return text


class RNNCell(RNNCellBase):
    """h' = tanh (or relu)(x W_ih^T + b_ih + h W_hh^T + b_hh)."""

    _mode = "RNN_TANH"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh", **kwargs):
        super().__init__(input_size, hidden_size, bias, **kwargs)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        return self._step(input, None if hx is None else (hx,), 1, _nonlinearity(self.nonlinearity))[0]


class LSTMCell(RNNCellBase):
    """(h', c') of one LSTM step (gates i, f, g, o)."""

    def forward(self, input, hx=None):
        return self._step(input, None if hx is None else tuple(hx), 2, "LSTM")


class GRUCell(RNNCellBase):
    """h' of one GRU step (gates r, z, n)."""

    _mode = "GRU"

    def forward(self, input, hx=None):
        return self._step(input, None if hx is None else (hx,), 1, "GRU")[0]


def _float_mask(mask, name: str, dtype, other=None, other_name: str = ""):
    """PyTorch's `_canonical_mask`: a bool mask as -inf where True (0 elsewhere); a float mask as it is; a mask
    of another type than the `other` mask given with it warned about."""
    if mask is not None and other is not None and mask.dtype != other.dtype:
        warn(f"Support for mismatched {name} and {other_name} is deprecated. Use same type for both instead.")
    if mask is None or mask.dtype.kind == "f":
        return mask
    if mask.dtype.kind != "b":
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return F._ns(mask).where(mask, -math.inf, 0.0).to(dtype)


_QUANTIZABLE: dict = {}


class MultiheadAttention(_Sided):
    """Attention over num_heads heads: query, key and value projected by the rows of in_proj_weight
    [3 * embed_dim, embed_dim] (xavier_uniform_; in_proj_bias zeros), attended per head (scaled by
    1/sqrt(head_dim), masks added as PyTorch's `multi_head_attention_forward` does: a bool mask's True entries
    are left out), then `out_proj`. With kdim/vdim other than embed_dim the projections are q_proj_weight,
    k_proj_weight and v_proj_weight; add_bias_kv appends bias_k/bias_v (xavier_normal_) to the projected keys and
    values, add_zero_attn a zero key and value to each head's, as PyTorch's (the masks let them through)."""

    def __init__(
        self,
        embed_dim,
        num_heads,
        dropout=0.0,
        bias=True,
        add_bias_kv=False,
        add_zero_attn=False,
        kdim=None,
        vdim=None,
        batch_first=False,
        device=None,
        dtype=None,
    ):
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                f"num_heads={num_heads} instead"
            )
        super().__init__()
        self.embed_dim, self.kdim, self.vdim = embed_dim, kdim or embed_dim, vdim or embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads, self.dropout, self.batch_first = num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        ns = self._ns
        same = self._qkv_same_embed_dim
        if same:
            self.in_proj_weight = self._parameter(ns.empty((3 * embed_dim, embed_dim), device=device, dtype=dtype))
        for name, size in zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), (embed_dim, self.kdim, self.vdim)):
            separate = None if same else self._parameter(ns.empty((embed_dim, size), device=device, dtype=dtype))
            self.register_parameter(name, separate)  # (None where in_proj_weight holds them, as PyTorch's)
        if not same:
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = self._parameter(ns.empty(3 * embed_dim, device=device, dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        linear = ns.nn.Linear
        if linear not in _QUANTIZABLE:  # the class name PyTorch's repr shows
            _QUANTIZABLE[linear] = type("NonDynamicallyQuantizableLinear", (linear,), {"__module__": linear.__module__})
        self.out_proj = _QUANTIZABLE[linear](embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        self.bias_k = self.bias_v = None
        if add_bias_kv:
            self.bias_k, self.bias_v = (
                self._parameter(ns.empty((1, 1, embed_dim), device=device, dtype=dtype)) for _ in "kv"
            )
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        for name in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"):
            if getattr(self, name) is not None:
                init.xavier_uniform_(getattr(self, name))
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        for bias in (self.bias_k, self.bias_v) if self.bias_k is not None else ():
            init.xavier_normal_(bias)

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights=True,
        attn_mask=None,
        average_attn_weights=True,
        is_causal=False,
    ):
        batched = _check_shapes(query, key, value, key_padding_mask, attn_mask, self.num_heads)
        if self.batch_first and batched:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        if not batched:
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
            key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
        if is_causal and attn_mask is None:
            raise RuntimeError(
                "Need attn_mask if specifying the is_causal hint. You may use the Transformer module method "
                "`generate_square_subsequent_mask` to create this mask."
            )
        (length, batch, embed), source = query.shape, key.shape[0]
        heads, size = self.num_heads, self.head_dim
        if embed != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but got {embed}")
        if not self._qkv_same_embed_dim and tuple(key.shape[:2]) != tuple(value.shape[:2]):
            raise AssertionError(
                f"key's sequence and batch dims torch.Size({list(key.shape[:2])}) do not match value's "
                f"torch.Size({list(value.shape[:2])})"
            )
        if self._qkv_same_embed_dim and tuple(key.shape) != tuple(value.shape):
            raise AssertionError(f"key shape {_shape(key)} does not match value shape {_shape(value)}")
        w, b, ns = self.in_proj_weight, self.in_proj_bias, self._ns
        separate = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        projected = []
        for i, t in enumerate((query, key, value)):
            weight = separate[i] if w is None else w[i * embed : (i + 1) * embed]
            t = F.linear(t, weight, None if b is None else b[i * embed : (i + 1) * embed])
            if i and self.bias_k is not None:
                t = ns.cat([t, (self.bias_k, self.bias_v)[i - 1].repeat(1, batch, 1)])
            t = t.reshape((t.shape[0], batch, heads, size)).permute((1, 2, 0, 3))
            if i and self.add_zero_attn:
                t = ns.cat([t, ns.zeros((batch, heads, 1, size), dtype=t.dtype)], 2)
            projected.append(t)
        q, k, v = projected
        bias = _float_mask(attn_mask, "attn_mask", query.dtype)
        if bias is not None:
            want = (length, source) if bias.ndim == 2 else (batch * heads, length, source)
            if tuple(bias.shape) != want:
                raise RuntimeError(f"The shape of the {bias.ndim}D attn_mask is {_shape(bias)}, but should be {want}.")
            bias = bias if bias.ndim == 2 else bias.reshape((batch, heads, length, source))
        padding = _float_mask(key_padding_mask, "key_padding_mask", query.dtype, attn_mask, "attn_mask")
        if padding is not None:
            padding = padding.reshape((batch, 1, 1, source))
            bias = padding if bias is None else bias + padding
        added = (self.bias_k is not None) + bool(self.add_zero_attn)  # (keys appended: never masked)
        if added and bias is not None:
            bias = F.pad(bias, (0, added))
        p = self.dropout if self.training else 0.0
        if need_weights:
            scores = q.matmul(k.transpose(-2, -1)) * (1.0 / math.sqrt(size))
            weights = F.dropout((scores if bias is None else scores + bias).softmax(-1), p)
            out = weights.matmul(v)
        else:
            out, weights = F.scaled_dot_product_attention(q, k, v, bias, p), None
        out = self.out_proj(out.permute((2, 0, 1, 3)).reshape((length, batch, embed)))
        if weights is not None:  # (torch's per-head weights are a view: ViewBackward0)
            weights = weights.mean(1) if average_attn_weights else weights.view(tuple(weights.shape))
        if self.batch_first and batched:
            out = out.transpose(0, 1)
        if not batched:
            out, weights = out.squeeze(1), None if weights is None else weights.squeeze(0)
        return out, weights


def _shape(t) -> str:
    return f"torch.Size({list(t.shape)})"


def _check_shapes(query, key, value, key_padding_mask, attn_mask, num_heads) -> bool:
    """PyTorch's `_mha_shape_check`: whether the input is batched, or its AssertionError."""
    if query.ndim not in (2, 3):
        raise AssertionError(
            f"query should be unbatched 2D or batched 3D tensor but received {query.ndim}-D query tensor"
        )
    batched = query.ndim == 3
    kind = "batched (3-D)" if batched else "unbatched (2-D)"
    if key.ndim != query.ndim or value.ndim != query.ndim:
        raise AssertionError(
            f"For {kind} `query`, expected `key` and `value` to be {query.ndim}-D but found {key.ndim}-D and "
            f"{value.ndim}-D tensors respectively"
        )
    if key_padding_mask is not None and key_padding_mask.ndim != query.ndim - 1:
        raise AssertionError(
            f"For {kind} `query`, expected `key_padding_mask` to be `None` or {query.ndim - 1}-D but found "
            f"{key_padding_mask.ndim}-D tensor instead"
        )
    if attn_mask is not None and attn_mask.ndim not in (2, 3):
        raise AssertionError(
            f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found {attn_mask.ndim}-D "
            "tensor instead"
        )
    if not batched and attn_mask is not None and attn_mask.ndim == 3:
        want = (num_heads, query.shape[0], key.shape[0])
        if tuple(attn_mask.shape) != want:
            raise AssertionError(f"Expected `attn_mask` shape to be {want} but got {_shape(attn_mask)}")
    return batched
