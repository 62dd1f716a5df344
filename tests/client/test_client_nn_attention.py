"""`F.scaled_dot_product_attention` and `nn.MultiheadAttention` through the engine, the embedded client and a
live server (`torch_like`), against PyTorch in float64: outputs, attention weights and the gradients of the
inputs and parameters across masks (bool, float, causal, key padding), scale, grouped-query heads,
batch_first and unbatched input; reprs, names, initialisation and the errors for bad input."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.client import test_client_nn_optim as base
from tests.client.test_client_nn_optim import values

oracle = base.oracle
CLOSE = dict(rtol=1e-9, atol=1e-12)
CAUSAL_WIDE = np.tril(np.ones((4, 6), dtype=bool), 1)
CAUSAL_WIDE[2] = False  # a row with nothing to attend: zeros, as PyTorch's math kernel gives

# name: (query, key, value shapes, keyword arguments (numpy arrays become tensors))
SDPA = {
    "plain": ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7), {}),
    "bool_mask_with_empty_row": ((2, 4, 5), (2, 6, 5), (2, 6, 3), {"attn_mask": CAUSAL_WIDE}),
    "float_mask_and_scale": (
        (3, 4, 5),
        (3, 6, 5),
        (3, 6, 2),
        {"attn_mask": np.linspace(-2, 1, 24).reshape(4, 6), "scale": 0.3},
    ),
    "causal": ((2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 4), {"is_causal": True}),
    "causal_rectangular": ((1, 3, 4), (1, 6, 4), (1, 6, 4), {"is_causal": True}),
    "grouped_query_heads": ((2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 5), {"enable_gqa": True}),
}


def attend(m, name):
    rng = np.random.default_rng(3)
    *shapes, options = SDPA[name]
    q, k, v = (m.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes)
    options = {key: m.tensor(o) if isinstance(o, np.ndarray) else o for key, o in options.items()}
    out = m.nn.functional.scaled_dot_product_attention(q, k, v, **options)
    (out * m.tensor(np.random.default_rng(4).standard_normal(tuple(out.shape)))).sum().backward()
    return [values(t) for t in (out, q.grad, k.grad, v.grad)]


@pytest.mark.parametrize("name", sorted(SDPA))
def test_scaled_dot_product_attention_matches_torch(torch_like, oracle, name):
    for got, want in zip(attend(torch_like, name), attend(oracle, name), strict=True):
        np.testing.assert_allclose(got, want, **CLOSE)


def test_scaled_dot_product_attention_errors_and_dropout(torch_like, oracle):
    def calls(m):
        z = m.zeros
        return [
            lambda: m.nn.functional.scaled_dot_product_attention(
                z(2, 3, 4), z(2, 3, 4), z(2, 3, 4), attn_mask=z(3, 3, dtype=m.bool), is_causal=True
            ),
        ]

    for ours, theirs in zip(calls(torch_like), calls(oracle), strict=True):
        with pytest.raises(Exception) as want:
            theirs()
        with pytest.raises(type(want.value), match=f"^{re.escape(str(want.value))}$"):
            ours()
    torch_like.manual_seed(0)
    q, k = torch_like.ones(1, 50, 3), torch_like.ones(1, 4, 3)
    dropped = values(torch_like.nn.functional.scaled_dot_product_attention(q, k, k * 2, dropout_p=0.5))
    assert set(dropped.ravel()) <= {0.0, 1.0, 2.0, 3.0, 4.0} and len(set(dropped.ravel())) > 2  # 2 undropped
    assert torch_like.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=1.0).abs().sum().item() == 0


# name: (module arguments, query, key shapes (value as key), forward keyword arguments, train)
MHA = {
    "self_attention": ((8, 2), (5, 3, 8), (5, 3, 8), {}, False),
    "cross_batch_first_unaveraged": (
        (8, 4),
        (3, 5, 8),
        (3, 6, 8),
        {"average_attn_weights": False},
        False,
        {"batch_first": True},
    ),
    "bool_masks_and_padding": (
        (6, 3),
        (4, 2, 6),
        (5, 2, 6),
        {
            "attn_mask": ~np.tril(np.ones((4, 5), dtype=bool), 1),
            "key_padding_mask": np.array([[0, 0, 0, 0, 1], [0, 0, 1, 1, 1]], bool),
        },
        False,
    ),
    "float_3d_mask_no_bias": (
        (4, 2),
        (3, 2, 4),
        (3, 2, 4),
        {"attn_mask": np.linspace(-1, 1, 36).reshape(4, 3, 3)},
        False,
        {"bias": False},
    ),
    "no_weights_causal_hint": (
        (8, 2),
        (4, 3, 8),
        (4, 3, 8),
        {"need_weights": False, "attn_mask": ~np.tril(np.ones((4, 4), dtype=bool)), "is_causal": True},
        False,
    ),
    "unbatched": ((6, 2), (4, 6), (3, 6), {"attn_mask": np.linspace(-1, 0, 24).reshape(2, 4, 3)}, False),
    "dropout_1_training": ((4, 2), (3, 2, 4), (3, 2, 4), {}, True, {"dropout": 1.0}),
}


def run_attention(m, name, module):
    args, q_shape, k_shape, options, train, *_ = MHA[name]
    rng = np.random.default_rng(5)
    module.train(train)
    q, k, v = (m.tensor(rng.standard_normal(s), requires_grad=True) for s in (q_shape, k_shape, k_shape))
    options = {key: m.tensor(o) if isinstance(o, np.ndarray) else o for key, o in options.items()}
    out, weights = module(q, k, v, **options)
    (out * m.tensor(np.random.default_rng(6).standard_normal(tuple(out.shape)))).sum().backward()
    grads = {key: values(p.grad) for key, p in module.named_parameters()}
    grads.update(query=values(q.grad), key=values(k.grad), value=values(v.grad))
    return values(out), None if weights is None else values(weights), grads


@pytest.mark.parametrize("name", sorted(MHA))
def test_multihead_attention_matches_torch(torch_like, oracle, name):
    args, kwargs = MHA[name][0], (MHA[name][5:] or [{}])[0]
    theirs = oracle.nn.MultiheadAttention(*args, **kwargs).double()
    ours = torch_like.nn.MultiheadAttention(*args, **kwargs).double()
    assert list(ours.state_dict()) == list(theirs.state_dict()) and repr(ours) == repr(theirs)
    ours.load_state_dict({k: torch_like.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    out, weights, grads = run_attention(torch_like, name, ours)
    want_out, want_weights, want_grads = run_attention(oracle, name, theirs)
    np.testing.assert_allclose(out, want_out, **CLOSE)
    assert (weights is None) == (want_weights is None)
    if weights is not None:
        np.testing.assert_allclose(weights, want_weights, **CLOSE)
    assert list(grads) == list(want_grads)
    for key in grads:
        np.testing.assert_allclose(grads[key], want_grads[key], **CLOSE, err_msg=key)


def test_multihead_attention_initialisation_and_errors_as_torch(torch_like, oracle):
    mha = torch_like.nn.MultiheadAttention(8, 2)
    assert not values(mha.in_proj_bias).any() and not values(mha.out_proj.bias).any()
    bound = (6 / (8 + 24)) ** 0.5  # xavier_uniform_ of [24, 8]
    assert 0.5 * bound < np.abs(values(mha.in_proj_weight)).max() <= bound
    assert mha.head_dim == 4 and mha.batch_first is False and mha._qkv_same_embed_dim

    def calls(m):
        z, nn = m.zeros, m.nn
        mha = nn.MultiheadAttention(4, 2)
        return [
            lambda: nn.MultiheadAttention(0, 2),
            lambda: nn.MultiheadAttention(6, 4),
            lambda: mha(z(2, 3, 4, 4), z(2, 3, 4), z(2, 3, 4)),
            lambda: mha(z(2, 3, 4), z(2, 4), z(2, 3, 4)),
            lambda: mha(z(2, 3, 4), z(2, 3, 4), z(2, 3, 4), key_padding_mask=z(3)),
            lambda: mha(z(2, 3, 4), z(2, 3, 4), z(2, 3, 4), attn_mask=z(2)),
            lambda: mha(z(2, 3, 4), z(2, 3, 4), z(2, 3, 4), attn_mask=z(2, 3)),
            lambda: mha(z(2, 3, 4), z(2, 3, 4), z(2, 3, 4), attn_mask=z(2, 2, 2)),
            lambda: mha(z(2, 4), z(2, 4), z(2, 4), attn_mask=z(3, 2, 2)),
            lambda: mha(z(2, 3, 4), z(2, 3, 4), z(2, 3, 4), is_causal=True),
            lambda: mha(z(2, 3, 5), z(2, 3, 5), z(2, 3, 5)),
            lambda: mha(z(2, 3, 4), z(2, 3, 4), z(3, 3, 4)),
        ]

    for ours, theirs in zip(calls(torch_like), calls(oracle), strict=True):
        with pytest.raises(Exception) as want:
            theirs()
        with pytest.raises(type(want.value), match=f"^{re.escape(str(want.value))}$"):
            ours()
    separate = torch_like.nn.MultiheadAttention(4, 2, kdim=3)  # (kdim is provided: separate projections, as torch's)
    assert [name for name, _ in separate.named_parameters()][:3] == ["q_proj_weight", "k_proj_weight", "v_proj_weight"]
    with pytest.raises(AssertionError, match=r"^key's sequence and batch dims torch.Size\(\[2, 3\]\) do not match"):
        separate(*(torch_like.zeros(*shape) for shape in ((2, 3, 4), (2, 3, 3), (1, 3, 4))))
