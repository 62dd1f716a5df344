"""`engine.nn`'s modules against `torch.nn`'s with the same weights (session 24): each module is built with the
same arguments on both sides, torch's state_dict is loaded into the engine's (strict: the keys, shapes and dtypes
must agree), and the two are compared in training and in eval mode: the repr, the state_dict's keys and the
parameters' names in order, the outputs (values, dtypes, grad_fn names), the gradients of a random weighted sum
for the input and every parameter, and the buffers after the step (running statistics). The functions this
session added (`adaptive_avg_pool3d`, `adaptive_max_pool3d`) are also checked by float64 central differences."""

from __future__ import annotations

import numpy as np
import pytest

import engine
import engine.nn as enn
from engine import gradcheck, gradgradcheck


@pytest.fixture
def oracle():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    return torch


def _on_engine(value):
    if isinstance(value, tuple):
        return tuple(_on_engine(v) for v in value)
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        out = engine.tensor(value.detach().numpy().copy())
        return out.requires_grad_(bool(value.requires_grad))
    return value


def _flat(value):
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in _flat(v)]
    return [value]


def _same(want, got, what):
    got = np.asarray(got.detach().numpy())
    want = want.detach().numpy()
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9, err_msg=what)


def compare(torch, name, args, kwargs, make_inputs, modes=("train", "eval"), grad_of=None):
    """Module `name` built alike on both sides, with torch's weights, compared as the module docstring says;
    `make_inputs(torch, generator)` gives the inputs (floating ones require grad unless `grad_of` lists which)."""
    torch.set_default_dtype(torch.float64)
    try:
        theirs = getattr(torch.nn, name)(*args, **kwargs)
        ours = getattr(enn, name)(*args, **{k: _on_engine(v) for k, v in kwargs.items()})
        ours.double()
        assert repr(ours) == repr(theirs)
        assert list(ours.state_dict()) == list(theirs.state_dict())
        assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
        ours.load_state_dict({k: _on_engine(v) for k, v in theirs.state_dict().items()})
        generator = torch.Generator().manual_seed(1)
        for mode in modes:
            getattr(theirs, mode)()
            getattr(ours, mode)()
            inputs = [
                x.detach().clone().requires_grad_(x.is_floating_point() and (grad_of is None or i in grad_of))
                if isinstance(x, torch.Tensor)
                else x
                for i, x in enumerate(make_inputs(torch, generator))
            ]
            mine = [_on_engine(x) for x in inputs]
            want, got = _flat(theirs(*inputs)), _flat(ours(*mine))
            assert len(got) == len(want)
            loss_t = loss_e = 0.0
            for i, (w, g) in enumerate(zip(want, got)):
                _same(w, g, f"{mode} output {i}")
                if w.grad_fn is not None:
                    assert g.grad_fn is not None and g.grad_fn.name() == w.grad_fn.name(), (mode, i)
                    weights = torch.randn(w.shape, generator=generator)
                    loss_t, loss_e = loss_t + (w * weights).sum(), loss_e + (g * _on_engine(weights)).sum()
            if not isinstance(loss_t, float):
                loss_t.backward()
                loss_e.backward()
                for i, (x, y) in enumerate(zip(inputs, mine)):
                    if isinstance(x, torch.Tensor) and x.requires_grad:
                        _same(x.grad, y.grad, f"{mode} input {i}'s grad")
                for (n, p), (_, q) in zip(theirs.named_parameters(), ours.named_parameters()):
                    assert (p.grad is None) == (q.grad is None), n
                    if p.grad is not None:
                        _same(p.grad, q.grad, f"{mode} {n}'s grad")
                theirs.zero_grad()
                ours.zero_grad()
            mine_buffers = dict(ours.named_buffers())
            for n, b in theirs.named_buffers():
                _same(b, mine_buffers[n], f"{mode} buffer {n}")
    finally:
        torch.set_default_dtype(torch.float32)


def randn(*shape):
    return lambda t, g: (t.randn(*shape, generator=g),)


BAG_INPUT = (lambda t, g: (t.tensor([1, 2, 4, 5, 4, 3, 2, 9]), t.tensor([0, 4])),)


# (class, args, kwargs, inputs, modes): the modules this session fixed, then a sample of the others
SPECS = {
    # EmbeddingBag's max_norm (was refused) and its repr (max_norm, norm_type before mode, as torch's)
    **{
        f"EmbeddingBag {mode} max_norm": ("EmbeddingBag", (10, 3), {"mode": mode, "max_norm": 0.5}, *BAG_INPUT)
        for mode in ("sum", "mean", "max")
    },
    "EmbeddingBag max_norm norm_type": (
        "EmbeddingBag",
        (10, 3),
        {"max_norm": 1.0, "norm_type": 1.0, "padding_idx": 2},
        lambda t, g: (t.tensor([[1, 2, 4], [5, 2, 3]]),),
    ),
    # Embedding's scale_grad_by_freq (was refused): a row's gradient over its count in the input
    "Embedding scale_grad_by_freq": (
        "Embedding",
        (10, 4),
        {"scale_grad_by_freq": True, "padding_idx": 9},
        lambda t, g: (t.tensor([[2, 3, 2], [0, 2, 9], [9, 1, 1]]),),
    ),
    "Embedding scale_grad_by_freq max_norm": (
        "Embedding",
        (10, 4),
        {"scale_grad_by_freq": True, "max_norm": 1.0, "norm_type": 1.0},
        lambda t, g: (t.tensor([4, 4, 4, 7]),),
    ),
    # MultiheadAttention's per-head weights are a view (ViewBackward0), not the softmax's node
    "MultiheadAttention per-head weights": (
        "MultiheadAttention",
        (8, 2),
        {},
        lambda t, g: (
            (t.randn(3, 2, 8, generator=g), t.randn(4, 2, 8, generator=g), t.randn(4, 2, 8, generator=g))
            + (None, True, None, False)
        ),
    ),
    # MultiheadAttention's kdim/vdim (q/k/v_proj_weight), add_bias_kv and add_zero_attn (were refused), with masks
    **{
        f"MultiheadAttention {'+'.join(kwargs)} {masks}": (
            "MultiheadAttention",
            (8, 2),
            kwargs,
            lambda t, g, kwargs=kwargs, masks=masks: (
                (
                    t.randn(3, 2, 8, generator=g),
                    t.randn(4, 2, kwargs.get("kdim", 8), generator=g),
                    t.randn(4, 2, kwargs.get("vdim", 8), generator=g),
                )
                + (
                    ()
                    if masks == "no masks"
                    else (t.tensor([[False, False, True, True], [False] * 4]), True, t.randn(3, 4, generator=g), False)
                )
            ),
        )
        for kwargs in ({"kdim": 5, "vdim": 6}, {"add_bias_kv": True}, {"add_zero_attn": True, "kdim": 5})
        for masks in ("no masks", "masks")
    },
    "MultiheadAttention add_bias_kv add_zero_attn batch_first": (
        "MultiheadAttention",
        (8, 2),
        {"add_bias_kv": True, "add_zero_attn": True, "vdim": 3, "batch_first": True},
        lambda t, g: (t.randn(2, 3, 8, generator=g), t.randn(2, 4, 8, generator=g), t.randn(2, 4, 3, generator=g)),
    ),
    # unbatched convolutions: torch's result is a squeeze of the batched one (SqueezeBackward1)
    "Conv1d unbatched": ("Conv1d", (4, 6, 3), {}, randn(4, 9)),
    "Conv2d unbatched": ("Conv2d", (4, 6, 3), {"padding": 1}, randn(4, 5, 6)),
    "Conv3d unbatched": ("Conv3d", (4, 2, 2), {}, randn(4, 3, 3, 4)),
    "ConvTranspose2d unbatched": ("ConvTranspose2d", (4, 2, 3), {"stride": 2}, randn(4, 3, 3)),
    # RNN and GRU with batch_first transpose their output in place (TransposeBackward1); LSTM does not
    "RNN batch_first": ("RNN", (3, 4), {"batch_first": True, "num_layers": 2}, randn(2, 5, 3)),
    "GRU batch_first": ("GRU", (3, 4), {"batch_first": True, "bidirectional": True}, randn(2, 5, 3)),
    "LSTM batch_first": ("LSTM", (3, 4), {"batch_first": True}, randn(2, 5, 3)),
    # LSTM's proj_size (was refused): weight_hr per layer and direction, h of width proj_size
    "LSTM proj_size bidirectional": (
        "LSTM",
        (3, 4),
        {"proj_size": 2, "bidirectional": True, "num_layers": 2},
        randn(5, 2, 3),
    ),
    "LSTM proj_size batch_first no bias": (
        "LSTM",
        (3, 4),
        {"proj_size": 3, "batch_first": True, "bias": False},
        randn(2, 5, 3),
    ),
    "LSTM proj_size unbatched": ("LSTM", (3, 4), {"proj_size": 1, "num_layers": 3}, randn(5, 3)),
    "LSTM proj_size states": (
        "LSTM",
        (3, 4),
        {"proj_size": 2, "num_layers": 2},
        lambda t, g: (t.randn(5, 2, 3, generator=g), (t.randn(2, 2, 2, generator=g), t.randn(2, 2, 4, generator=g))),
    ),
    # the 3-d padding and adaptive pooling modules (were not provided)
    **{
        f"{cls}3d": (f"{cls}3d", args, {}, randn(1, 2, 3, 4, 5))
        for cls, args in (
            ("ZeroPad", ((1, 2, 0, 1, 2, 1),)),
            ("ConstantPad", (1, 3.5)),
            ("ReflectionPad", ((1, 2, 0, 1, 2, 1),)),
            ("ReplicationPad", (2,)),
            ("CircularPad", ((1, 2, 0, 1, 2, 1),)),
        )
    },
    "ReflectionPad3d unbatched": ("ReflectionPad3d", (1,), {}, randn(2, 3, 4, 5)),
    **{
        f"AdaptiveAvgPool3d {size}": ("AdaptiveAvgPool3d", (size,), {}, randn(2, 3, 5, 6, 7))
        for size in (1, 3, (2, None, 4), (1, 1, 1))
    },
    "AdaptiveAvgPool3d unbatched": ("AdaptiveAvgPool3d", ((2, 3, 4),), {}, randn(3, 5, 6, 7)),
    **{
        f"AdaptiveMaxPool3d {size} {indices}": (
            "AdaptiveMaxPool3d",
            (size,),
            {"return_indices": indices},
            randn(2, 3, 5, 6, 7),
        )
        for size in (1, 3, (2, None, 4))
        for indices in (False, True)
    },
    "AdaptiveMaxPool3d unbatched": ("AdaptiveMaxPool3d", ((2, 3, 4),), {"return_indices": True}, randn(3, 5, 6, 7)),
    "AdaptiveMaxPool2d indices": ("AdaptiveMaxPool2d", ((3, 4),), {"return_indices": True}, randn(2, 3, 7, 9)),
    "AdaptiveMaxPool1d indices": ("AdaptiveMaxPool1d", (4,), {"return_indices": True}, randn(2, 3, 9)),
    # the two losses that were not provided
    **{
        f"MultiLabelMarginLoss {reduction}": (
            "MultiLabelMarginLoss",
            (),
            {"reduction": reduction},
            lambda t, g: (t.randn(3, 5, generator=g), t.tensor([[3, 0, -1, 1, 2], [1, 1, -1, 0, 4], [0, 1, 2, 3, 4]])),
        )
        for reduction in ("none", "mean", "sum")
    },
    "MultiLabelMarginLoss unbatched": (
        "MultiLabelMarginLoss",
        (),
        {},
        lambda t, g: (t.randn(5, generator=g), t.tensor([4, 2, -1, 0, 1])),
    ),
    **{
        f"TripletMarginWithDistanceLoss {reduction}": (
            "TripletMarginWithDistanceLoss",
            (),
            {"reduction": reduction, "swap": reduction == "sum", "margin": 1.5},
            lambda t, g: (t.randn(5, 3, generator=g), t.randn(5, 3, generator=g), t.randn(5, 3, generator=g)),
        )
        for reduction in ("none", "mean", "sum")
    },
    # a sample of the modules that agreed, kept so that they go on agreeing
    "Linear": ("Linear", (4, 3), {}, randn(2, 5, 4)),
    "Bilinear": ("Bilinear", (3, 4, 2), {}, lambda t, g: (t.randn(5, 3, generator=g), t.randn(5, 4, generator=g))),
    "Conv2d groups dilation": ("Conv2d", (4, 6, 3), {"groups": 2, "dilation": 2, "padding": "same"}, randn(2, 4, 7, 8)),
    "Conv1d circular": ("Conv1d", (4, 6, 3), {"padding": 2, "padding_mode": "circular"}, randn(2, 4, 9)),
    "ConvTranspose3d": ("ConvTranspose3d", (4, 2, 3), {"stride": 2, "output_padding": 1}, randn(1, 4, 3, 3, 2)),
    "MaxPool2d ceil indices": (
        "MaxPool2d",
        (3,),
        {"stride": 2, "ceil_mode": True, "return_indices": True},
        randn(2, 3, 7, 8),
    ),
    "AvgPool2d": ("AvgPool2d", (3,), {"stride": 2, "padding": 1, "count_include_pad": False}, randn(2, 3, 7, 8)),
    "LPPool2d": ("LPPool2d", (2, 3), {"stride": 2}, lambda t, g: (t.rand(2, 3, 7, 8, generator=g) + 0.1,)),
    "BatchNorm2d momentum None": ("BatchNorm2d", (3,), {"momentum": None}, randn(4, 3, 4, 5)),
    "BatchNorm1d untracked": ("BatchNorm1d", (3,), {"track_running_stats": False}, randn(4, 3, 5)),
    "InstanceNorm2d tracked": (
        "InstanceNorm2d",
        (3,),
        {"affine": True, "track_running_stats": True},
        randn(4, 3, 4, 5),
    ),
    "LayerNorm no bias": ("LayerNorm", ((3, 5),), {"bias": False}, randn(2, 3, 5)),
    "GroupNorm": ("GroupNorm", (2, 4), {}, randn(3, 4, 5)),
    "LocalResponseNorm": ("LocalResponseNorm", (3,), {"alpha": 1e-2, "beta": 0.5, "k": 2.0}, randn(2, 5, 4, 3)),
    "RMSNorm": ("RMSNorm", ((3, 5),), {"eps": 1e-3}, randn(2, 3, 5)),
    "PReLU": ("PReLU", (3,), {"init": 0.1}, randn(4, 3, 6)),
    "GELU tanh": ("GELU", (), {"approximate": "tanh"}, randn(4, 3)),
    "Hardtanh": ("Hardtanh", (-0.5, 0.7), {}, randn(4, 3)),
    "Embedding max_norm padding": (
        "Embedding",
        (10, 4),
        {"max_norm": 1.0, "padding_idx": 2},
        lambda t, g: (t.tensor([[2, 3, 2], [0, 1, 9]]),),
    ),
    "LSTM bidirectional states": (
        "LSTM",
        (3, 4),
        {"num_layers": 2, "bidirectional": True},
        lambda t, g: (t.randn(5, 2, 3, generator=g), (t.randn(4, 2, 4, generator=g), t.randn(4, 2, 4, generator=g))),
    ),
    "GRUCell": ("GRUCell", (3, 4), {}, randn(2, 3)),
    "TransformerEncoderLayer norm_first gelu": (
        "TransformerEncoderLayer",
        (8, 2),
        {"dim_feedforward": 16, "dropout": 0.0, "norm_first": True, "activation": "gelu"},
        randn(5, 2, 8),
    ),
    "CrossEntropyLoss": (
        "CrossEntropyLoss",
        (),
        {"label_smoothing": 0.1, "ignore_index": 1, "reduction": "sum"},
        lambda t, g: (t.randn(6, 5, generator=g), t.randint(0, 5, (6,), generator=g)),
    ),
    "Upsample bicubic": ("Upsample", (), {"size": (5, 7), "mode": "bicubic"}, randn(2, 3, 4, 5)),
    "Fold": ("Fold", ((4, 5), 2), {}, randn(2, 12, 12)),
    "PixelShuffle": ("PixelShuffle", (2,), {}, randn(2, 8, 3, 4)),
}


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_module_matches_torchs_with_the_same_weights(spec, oracle):
    name, args, kwargs, make_inputs = SPECS[spec]
    compare(oracle, name, args, kwargs, make_inputs)


def test_embedding_bag_max_norm_renormalises_the_rows_it_names_in_place(oracle):
    weight = oracle.randn(6, 3, dtype=oracle.float64) * 2
    ours = engine.tensor(weight.numpy())
    indices, offsets = [0, 2, 2, 5], [0, 1]
    want = oracle.nn.functional.embedding_bag(oracle.tensor(indices), weight, oracle.tensor(offsets), max_norm=1.5)
    got = enn.functional.embedding_bag(engine.tensor(indices), ours, engine.tensor(offsets), max_norm=1.5)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    np.testing.assert_allclose(ours.numpy(), weight.numpy(), rtol=1e-12)  # rows 0, 2, 5 scaled, the rest kept


@pytest.mark.parametrize("size", [2, (3, 1, 2), (None, 2, 3)])
def test_adaptive_pooling_3d_gradients_by_central_differences(size):
    x = engine.randn(2, 3, 4, 5, dtype=engine.float64, requires_grad=True)
    assert gradcheck(lambda v: enn.functional.adaptive_avg_pool3d(v, size), (x,))
    assert gradgradcheck(lambda v: enn.functional.adaptive_avg_pool3d(v, size), (x,))
    assert gradcheck(lambda v: enn.functional.adaptive_max_pool3d(v, size), (x,))


def test_adaptive_pooling_3d_refuses_as_torch(oracle):
    for torch in (oracle, engine):
        F = torch.nn.functional
        with pytest.raises(
            RuntimeError, match=r"^adaptive_avg_pool3d\(\): Expected 4D or 5D tensor, but got \[3, 4, 5\]"
        ):
            F.adaptive_avg_pool3d(torch.randn(3, 4, 5), 2)
        with pytest.raises(RuntimeError, match="^adaptive_avg_pool3d: output_size must be 3$"):
            F.adaptive_avg_pool3d(torch.randn(1, 3, 4, 5), (2, 2))
        with pytest.raises(RuntimeError, match=r"adaptive_max_pool3d\(\): Expected 4D or 5D tensor"):
            F.adaptive_max_pool3d(torch.randn(3, 4, 5), 2)


def test_embedding_scale_grad_by_freq_leaves_the_rows_exact(oracle):
    weight = oracle.randn(5, 3) * 1e3
    ours = engine.tensor(weight.numpy(), requires_grad=True)
    indices = [[0, 0, 3], [3, 3, 3]]
    got = enn.functional.embedding(engine.tensor(indices), ours, scale_grad_by_freq=True)
    assert np.array_equal(got.detach().numpy(), weight.numpy()[indices]) and got.dtype == engine.float32
    assert got.grad_fn.name() == "EmbeddingBackward0"
    got.sum().backward()
    np.testing.assert_allclose(ours.grad.numpy()[[0, 1, 3]], [[1.0] * 3, [0.0] * 3, [1.0] * 3])


def test_lazy_linear_takes_its_in_features_at_the_first_call_and_becomes_a_linear(oracle):
    theirs, ours = oracle.nn.LazyLinear(3), enn.LazyLinear(3)
    assert repr(ours) == repr(theirs) == "LazyLinear(in_features=0, out_features=3, bias=True)"
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight", "bias"]
    weight, optimizer = ours.weight, engine.optim.SGD(ours.parameters(), lr=0.5)  # (made before the first call)
    x = oracle.randn(2, 5)
    theirs(x)
    out = ours(_on_engine(x))
    assert type(ours) is enn.Linear and repr(ours) == repr(theirs) == "Linear(in_features=5, out_features=3, bias=True)"
    assert ours.weight is weight and tuple(ours.weight.shape) == (3, 5) and out.grad_fn.name() == "AddmmBackward0"
    bound = 1 / 5**0.5  # (PyTorch's initialisation, now that in_features is known)
    assert 0 < float(ours.weight.detach().abs().max()) <= bound and 0 < float(ours.bias.detach().abs().max()) <= bound
    ours.load_state_dict({k: _on_engine(v) for k, v in theirs.state_dict().items()})
    before = ours.weight.detach().numpy().copy()
    theirs(x).sum().backward()
    ours(_on_engine(x)).sum().backward()
    _same(theirs.weight.grad, ours.weight.grad, "weight's grad")
    optimizer.step()
    np.testing.assert_allclose(ours.weight.detach().numpy(), before - 0.5 * theirs.weight.grad.numpy(), rtol=1e-6)
    no_bias = enn.LazyLinear(2, bias=False).double()
    assert list(no_bias.state_dict()) == ["weight"] and no_bias(engine.ones(4, 7, dtype=engine.float64)).shape == (4, 2)


@pytest.mark.parametrize("name", ["upsample", "upsample_nearest", "upsample_bilinear"])
def test_the_deprecated_upsample_functions_warn_and_interpolate_as_torch(name, oracle):
    x = oracle.randn(1, 2, 3, 4, dtype=oracle.float64)
    results = []
    for torch in (oracle, engine):
        with pytest.warns(
            UserWarning, match=rf"^`nn.functional.{name}` is deprecated. Use `nn.functional.interpolate`"
        ):
            results.append(getattr(torch.nn.functional, name)(x if torch is oracle else _on_engine(x), scale_factor=2))
    _same(results[0], results[1], name)


def test_the_new_losses_refuse_as_torch(oracle):
    for torch in (oracle, engine):
        F = torch.nn.functional
        with pytest.raises(RuntimeError, match="^expected scalar type Long but found Float$"):
            F.multilabel_margin_loss(torch.randn(3, 4), torch.ones(3, 4))
        with pytest.raises(RuntimeError, match=r"^inconsistent target size: \[3, 3\] for input of size: \[3, 4\]$"):
            F.multilabel_margin_loss(torch.randn(3, 4), torch.ones(3, 3, dtype=torch.int64))
        with pytest.raises(ValueError, match="^margin must be greater than 0, got -1$"):
            F.triplet_margin_with_distance_loss(torch.ones(2), torch.ones(2), torch.ones(2), margin=-1)
        with pytest.raises(ValueError, match="^TripletMarginWithDistanceLoss: expected margin to be greater than 0"):
            torch.nn.TripletMarginWithDistanceLoss(margin=0)
        anchor, positive, negative = (torch.tensor([[0.0, 1.0], [1.0, 0.0]]) * k for k in (1, 2, -1))
        cosine = torch.nn.TripletMarginWithDistanceLoss(distance_function=torch.nn.CosineSimilarity(), swap=True)
        assert repr(cosine) == "TripletMarginWithDistanceLoss(\n  (distance_function): CosineSimilarity()\n)"
        assert float(cosine(anchor, positive, negative)) == pytest.approx(3.0)


def test_a_projected_lstm_over_a_packed_sequence_matches_torchs(oracle):
    rnn = oracle.nn.utils.rnn
    sequences = [oracle.randn(n, 3, dtype=oracle.float64) for n in (4, 2, 3)]
    theirs = oracle.nn.LSTM(3, 4, proj_size=2, bidirectional=True).double()
    ours = enn.LSTM(3, 4, proj_size=2, bidirectional=True).double()
    ours.load_state_dict({k: _on_engine(v) for k, v in theirs.state_dict().items()})
    want_out, (want_h, want_c) = theirs(rnn.pack_sequence(sequences, enforce_sorted=False))
    packed = enn.utils.rnn.pack_sequence([_on_engine(s) for s in sequences], enforce_sorted=False)
    got_out, (got_h, got_c) = ours(packed)
    for want, got, what in ((want_out.data, got_out.data, "rows"), (want_h, got_h, "h_n"), (want_c, got_c, "c_n")):
        _same(want, got, what)


def test_nllloss2d_warns_and_is_nllloss_and_the_rnn_bases_answer_isinstance(oracle):
    x, target = oracle.randn(2, 3, 4, 5).log_softmax(1), oracle.randint(0, 3, (2, 4, 5))
    for torch, to in ((oracle, lambda v: v), (engine, _on_engine)):
        with pytest.warns(FutureWarning, match=r"^`NLLLoss2d` has been deprecated. Please use `NLLLoss` instead"):
            loss = torch.nn.NLLLoss2d(ignore_index=1)
        assert repr(loss) == "NLLLoss2d()"
        assert float(loss(to(x), to(target))) == pytest.approx(float(oracle.nn.NLLLoss(ignore_index=1)(x, target)))
        assert isinstance(torch.nn.LSTM(2, 3), torch.nn.RNNBase) and isinstance(torch.nn.GRU(2, 3), torch.nn.RNNBase)
        assert isinstance(torch.nn.GRUCell(2, 3), torch.nn.RNNCellBase)
        assert not isinstance(torch.nn.Linear(2, 3), (torch.nn.RNNBase, torch.nn.RNNCellBase))


REFUSED = {
    "BatchNorm1d of 4 features with 3": lambda t: t.nn.BatchNorm1d(3)(t.randn(2, 4)),
    "BatchNorm1d untracked, 4 features with 3": lambda t: t.nn.BatchNorm1d(3, track_running_stats=False)(t.randn(2, 4)),
    "batch_norm running_var of 3": lambda t: t.nn.functional.batch_norm(t.randn(2, 4), t.zeros(4), t.ones(3)),
    "BatchNorm1d of one value per channel": lambda t: t.nn.BatchNorm1d(3)(t.randn(1, 3)),
    "BCEWithLogitsLoss of other sizes": lambda t: t.nn.BCEWithLogitsLoss()(t.randn(3), t.rand(4)),
    "Upsample of 1-d": lambda t: t.nn.Upsample(scale_factor=2)(t.randn(3)),
    "interpolate linear of 2-d": lambda t: t.nn.functional.interpolate(t.randn(3, 4), scale_factor=2, mode="linear"),
    "interpolate of 6-d": lambda t: t.nn.functional.interpolate(t.randn(1, 1, 1, 1, 1, 2), scale_factor=2),
    "Unflatten to other sizes": lambda t: t.nn.Unflatten(1, (2, 3))(t.randn(2, 5)),
    "Bilinear of other batches": lambda t: t.nn.Bilinear(2, 3, 4)(t.randn(5, 2), t.randn(4, 3)),
    "bilinear of other ranks": lambda t: t.nn.functional.bilinear(t.randn(5, 2), t.randn(1, 5, 3), t.randn(4, 2, 3)),
    "AdaptiveAvgPool2d of 1-d": lambda t: t.nn.AdaptiveAvgPool2d(2)(t.randn(3)),
    "adaptive_avg_pool2d of 5-d": lambda t: t.nn.functional.adaptive_avg_pool2d(t.randn(1, 2, 3, 4, 5), 2),
    "init.uniform_ from 2 to 1": lambda t: t.nn.init.uniform_(t.empty(3), 2, 1),
    "init.normal_ of std -1": lambda t: t.nn.init.normal_(t.empty(3), 0, -1),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refusals_have_torchs_type_and_words(name, oracle):
    with pytest.raises(Exception) as want:
        REFUSED[name](oracle)
    with pytest.raises(type(want.value)) as got:
        REFUSED[name](engine)
    assert str(got.value) == str(want.value)


def test_a_state_dict_without_num_batches_tracked_loads_as_torchs(oracle):
    """Checkpoints written before torch 0.4.1 have no num_batches_tracked: torch keeps the module's own."""
    for nn in (oracle.nn, enn):
        model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.InstanceNorm1d(3, track_running_stats=True))
        model[1].num_batches_tracked += 3
        old = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
        assert repr(model.load_state_dict(old)) == "<All keys matched successfully>"
        assert int(model[1].num_batches_tracked) == 3 and int(model[2].num_batches_tracked) == 0
        partial = {k: v for k, v in old.items() if not k.endswith("running_mean")}
        with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "1.running_mean", "2.running_mean"'):
            model.load_state_dict(partial)


def test_the_deprecated_clip_grad_norm_warns_and_clips_and_fusion_is_at_nn_utils(oracle):
    for torch in (oracle, engine):
        weight = torch.nn.Parameter(torch.ones(3))
        (weight * 3).sum().backward()
        with pytest.warns(FutureWarning, match="^`torch.nn.utils.clip_grad_norm` is now deprecated in favor of"):
            total = torch.nn.utils.clip_grad_norm(weight, 1.0)
        assert float(total) == pytest.approx(27**0.5)
        np.testing.assert_allclose(weight.grad.numpy(), [3**-0.5] * 3, rtol=1e-5)
        assert torch.nn.utils.fuse_conv_bn_eval is torch.nn.utils.fusion.fuse_conv_bn_eval


@pytest.mark.parametrize("side", ["torch", "engine"])
def test_a_buffer_assigned_as_an_attribute_is_registered_as_torchs(side, oracle):
    torch = oracle if side == "torch" else engine
    nn = torch.nn

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(2, 2)
            self.scale = nn.Buffer(torch.ones(2) * 3)
            self.scratch = nn.Buffer(torch.zeros(2), persistent=False)
            self.empty = nn.Buffer()

    model = Scaled()
    assert list(model.state_dict()) == ["scale", "empty", "linear.weight", "linear.bias"]
    assert [name for name, _ in model.named_buffers()] == ["scale", "scratch", "empty"]
    assert float(model.scale.sum()) == 6.0 and not model.scale.requires_grad and tuple(model.empty.shape) == (0,)
    assert isinstance(model.scale, nn.Buffer) and model.scratch.persistent is False
    assert nn.Buffer(torch.ones(2, requires_grad=True)).requires_grad
