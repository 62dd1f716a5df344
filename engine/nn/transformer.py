"""`torch.nn`'s Transformer layers (`TransformerEncoderLayer`, `TransformerEncoder`, `TransformerDecoderLayer`,
`TransformerDecoder`, `Transformer`), written once for every side as `engine.nn.sequence`'s modules are.

A layer composes the side's `MultiheadAttention`, `Linear`, `LayerNorm` and `Dropout` under PyTorch's attribute
names (so its state_dict keys are PyTorch's: `self_attn.in_proj_weight`, `linear1.weight`, `norm2.bias`...), as
PyTorch's reference path computes it: each block added to its input and then normalised, or (`norm_first`)
added to its input after normalising it. A bool mask leaves out the True pairs, a float mask is added.

PyTorch's fast path (inference) computes the same values, but for one difference the user sees, kept here: where
`TransformerEncoder` would run on a nested tensor (eval mode, batched input, a left-aligned
`src_key_padding_mask` and no `mask`, no gradient wanted, and a layer the nested path takes), the padded
positions come out as zeros before the final norm. An `is_causal` hint is not needed: the mask it stands for is
used (PyTorch checks the same hint, and uses the mask when it has to).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy

from engine.nn import functional as F
from engine.nn import init
from engine.nn.sequence import _float_mask, _Sided
from engine.user_warnings import warn


class _Layer(_Sided):
    """What the encoder and decoder layers share: PyTorch's constructor and sublayers in PyTorch's order (`_cross`:
    the decoder's, with `multihead_attn` attending to the memory), the residual blocks and the feed-forward."""

    _cross = False
    self_attn: Any
    norm1: Any
    norm2: Any

    def __init__(
        self,
        d_model,
        nhead,
        dim_feedforward=2048,
        dropout=0.1,
        activation=F.relu,
        layer_norm_eps=1e-5,
        batch_first=False,
        norm_first=False,
        bias=True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        nn, factory, norms = self._ns.nn, {"device": device, "dtype": dtype}, range(1, 4 if self._cross else 3)
        for name in ("self_attn", "multihead_attn") if self._cross else ("self_attn",):
            attention = nn.MultiheadAttention(d_model, nhead, dropout, bias, batch_first=batch_first, **factory)
            setattr(self, name, attention)
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm_first = norm_first
        for k in norms:
            setattr(self, f"norm{k}", nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        for k in norms:
            setattr(self, f"dropout{k}", nn.Dropout(dropout))
        if isinstance(activation, str):
            if activation not in ("relu", "gelu"):
                raise RuntimeError(f"activation should be relu/gelu, not {activation}")
            activation = F.relu if activation == "relu" else F.gelu
        self.activation = activation
        if not self._cross:  # the encoder's: PyTorch's nested-tensor path takes relu (1) and gelu (2)
            kinds = ((F.relu, nn.ReLU, 1), (F.gelu, nn.GELU, 2))
            kind = (k for f, c, k in kinds if activation is f or isinstance(activation, c))
            self.activation_relu_or_gelu = next(kind, 0)

    def _residual(self, x, norm, block):
        return x + block(norm(x)) if self.norm_first else norm(x + block(x))

    @staticmethod
    def _attend(attention, dropout, memory, mask, padding, is_causal):
        def block(x):
            keys = x if memory is None else memory
            options = {"attn_mask": mask, "key_padding_mask": padding, "is_causal": is_causal}
            return dropout(attention(x, keys, keys, need_weights=False, **options)[0])

        return block

    def _feed_forward(self, dropout):
        return lambda x: dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoderLayer(_Layer):
    """Self-attention and a feed-forward network (linear1, activation, linear2), each a residual block."""

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        padding = _float_mask(src_key_padding_mask, "src_key_padding_mask", src.dtype, src_mask, "src_mask")
        mask = _float_mask(src_mask, "src_mask", src.dtype)
        x = self._residual(src, self.norm1, self._attend(self.self_attn, self.dropout1, None, mask, padding, is_causal))
        return self._residual(x, self.norm2, self._feed_forward(self.dropout2))


class TransformerDecoderLayer(_Layer):
    """Self-attention over the target, attention to the memory (`multihead_attn`) and a feed-forward network."""

    _cross = True

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=False,
        memory_is_causal=False,
    ):
        own = self._attend(self.self_attn, self.dropout1, None, tgt_mask, tgt_key_padding_mask, tgt_is_causal)
        x = self._residual(tgt, self.norm1, own)
        attend = self._attend(
            self.multihead_attn, self.dropout2, memory, memory_mask, memory_key_padding_mask, memory_is_causal
        )
        x = self._residual(x, self.norm2, attend)
        return self._residual(x, self.norm3, self._feed_forward(self.dropout3))


def _clones(ns, module, n: int):
    return ns.nn.ModuleList([copy.deepcopy(module) for _ in range(n)])


_BATCH_FIRST = "(use batch_first for better inference performance)"


def _why_not_nested(layer) -> str:
    """Why PyTorch's TransformerEncoder will not run `layer`s on nested tensors ("" when it will)."""
    if not isinstance(layer, TransformerEncoderLayer):
        return "encoder_layer was not TransformerEncoderLayer"
    attention = layer.self_attn
    for refused, why in (
        (layer.norm_first, "norm_first was True"),
        (not attention.batch_first, f"self_attn.batch_first was not True{_BATCH_FIRST}"),
        (not attention._qkv_same_embed_dim, "self_attn._qkv_same_embed_dim was not True"),
        (attention.in_proj_bias is None, "self_attn was passed bias=False"),
        (not layer.activation_relu_or_gelu, "activation_relu_or_gelu was not True"),
        (layer.norm1.eps != layer.norm2.eps, "norm1.eps was not equal to encoder_layer.norm2.eps"),
        (attention.num_heads % 2 == 1, "self_attn.num_heads is odd"),
    ):
        if refused:
            return f"encoder_layer.{why}"
    return ""


class TransformerEncoder(_Sided):
    """`num_layers` deep copies of `encoder_layer`, applied in turn, then `norm` (when given)."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        self.layers = _clones(self._ns, encoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm
        self.enable_nested_tensor = self.use_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check
        why = _why_not_nested(encoder_layer)
        if enable_nested_tensor and why:
            warn(f"enable_nested_tensor is True, but self.use_nested_tensor is False because {why}")
            self.use_nested_tensor = False

    def _kept(self, src, mask, padding):
        """The positions [B, S] PyTorch keeps when it runs the layers on a nested tensor (the others' outputs are
        zeros), or None when it does not."""
        first = self.layers[0]
        if not self.use_nested_tensor or first.training or src.ndim != 3 or padding is None or mask is not None:
            return None
        if self._ns.is_grad_enabled() and (src.requires_grad or any(p.requires_grad for p in first.parameters())):
            return None
        kept = numpy.asarray(padding.numpy(force=True))
        kept = ~kept if kept.dtype == bool else kept == 0
        return kept if not self.mask_check or (kept[:, 1:] <= kept[:, :-1]).all() else None  # left-aligned

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        kept = self._kept(src, mask, src_key_padding_mask)
        padding = _float_mask(src_key_padding_mask, "src_key_padding_mask", src.dtype, mask, "mask")
        mask = _float_mask(mask, "mask", src.dtype)
        output = src
        for layer in self.layers:
            output = layer(output, src_mask=mask, is_causal=is_causal is True, src_key_padding_mask=padding)
        if kept is not None:  # (batch first)
            output = self._ns.where(self._ns.tensor(kept[..., None]), output, 0.0)
        return output if self.norm is None else self.norm(output)


class TransformerDecoder(_Sided):
    """`num_layers` deep copies of `decoder_layer`, each attending to `memory`, then `norm` (when given)."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _clones(self._ns, decoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal=False,
    ):
        output = tgt
        for layer in self.layers:
            output = layer(
                output,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=tgt_is_causal is True,
                memory_is_causal=memory_is_causal,
            )
        return output if self.norm is None else self.norm(output)


class Transformer(_Sided):
    """An encoder and a decoder of Transformer layers, each ending in a LayerNorm; every parameter of two or more
    dimensions xavier_uniform_-initialised (PyTorch's `_reset_parameters`)."""

    def __init__(
        self,
        d_model=512,
        nhead=8,
        num_encoder_layers=6,
        num_decoder_layers=6,
        dim_feedforward=2048,
        dropout=0.1,
        activation=F.relu,
        custom_encoder=None,
        custom_decoder=None,
        layer_norm_eps=1e-5,
        batch_first=False,
        norm_first=False,
        bias=True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        nn, factory = self._ns.nn, {"device": device, "dtype": dtype}
        args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first, bias)
        for name, custom, stack, layer, count in (
            ("encoder", custom_encoder, nn.TransformerEncoder, nn.TransformerEncoderLayer, num_encoder_layers),
            ("decoder", custom_decoder, nn.TransformerDecoder, nn.TransformerDecoderLayer, num_decoder_layers),
        ):
            if custom is None:
                norm = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
                custom = stack(layer(*args, **factory), count, norm)
            setattr(self, name, custom)
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(
        self,
        src,
        tgt,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal=None,
        tgt_is_causal=None,
        memory_is_causal=False,
    ):
        batch = 0 if self.batch_first else 1
        if src.ndim == 3 and src.shape[batch] != tgt.shape[batch]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    @classmethod
    def generate_square_subsequent_mask(cls, sz, device=None, dtype=None):
        """[sz, sz]: -inf above the diagonal (a position attends to itself and those before it), 0 elsewhere."""
        full = cls._ns.full((sz, sz), -math.inf, dtype=dtype, device=device)
        return cls._ns.tensor(numpy.triu(numpy.asarray(full.numpy()), 1), dtype=full.dtype, device=device)
