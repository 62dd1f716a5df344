"""torch.nn's Transformer layers (TransformerEncoderLayer, TransformerDecoderLayer, their stacks and Transformer)
through the engine, the embedded client and a live server (`torch_like`), against PyTorch in float64: with
PyTorch's state_dict loaded, the outputs and the gradients of the inputs and of every parameter, in eval mode and
in train mode (dropout 0), post-norm and pre-norm, batch_first both ways, unbatched, with bool and float masks and
key padding masks and the is_causal hint; reprs and state_dict keys; the zeros PyTorch's nested-tensor inference
path gives at padded positions; the construction warnings and errors; dropout's statistics in training; and the
"Language Modeling with nn.Transformer" tutorial's model trained a few steps, printing PyTorch's losses."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest

from tests.client import test_client_nn_optim as base
from tests.client.test_client_nn_optim import values

oracle = base.oracle
CLOSE = dict(rtol=1e-9, atol=1e-12)
CAUSAL = ~np.tril(np.ones((5, 5), dtype=bool))  # True: left out
PADDING = np.array([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0], [0, 0, 1, 1, 1]], dtype=bool)


def causal_mask(m, size):
    return m.nn.Transformer.generate_square_subsequent_mask(size, dtype=m.float64)


# name: (class, constructor keyword arguments, input shapes, forward keyword arguments, train)
# values that are callables are made on each side: f(m)
CASES = {
    "encoder_post_norm": ("TransformerEncoderLayer", {}, [(5, 3, 8)], {}, False),
    "encoder_pre_norm_batch_first_bool_masks": (
        "TransformerEncoderLayer",
        {"norm_first": True, "batch_first": True},
        [(3, 5, 8)],
        {"src_mask": CAUSAL, "src_key_padding_mask": PADDING},
        True,
    ),
    "encoder_gelu_float_masks": (
        "TransformerEncoderLayer",
        {"activation": "gelu"},
        [(5, 3, 8)],
        {"src_mask": np.linspace(-1, 1, 25).reshape(5, 5), "src_key_padding_mask": np.where(PADDING, -1e9, 0.0)},
        True,
    ),
    "encoder_callable_activation_no_bias": (
        "TransformerEncoderLayer",
        {"activation": lambda m: m.nn.functional.silu, "bias": False, "norm_first": True},
        [(4, 2, 8)],
        {},
        True,
    ),
    "encoder_module_activation_causal_hint": (
        "TransformerEncoderLayer",
        {"activation": lambda m: m.nn.GELU(approximate="tanh"), "batch_first": True, "layer_norm_eps": 1e-3},
        [(3, 5, 8)],
        {"src_mask": lambda m: causal_mask(m, 5), "is_causal": True},
        False,
    ),
    "encoder_unbatched_3d_mask": (
        "TransformerEncoderLayer",
        {},
        [(5, 8)],
        {"src_mask": np.linspace(-2, 0, 50).reshape(2, 5, 5), "src_key_padding_mask": PADDING[0]},
        True,
    ),
    "decoder_post_norm_causal_memory_padding": (
        "TransformerDecoderLayer",
        {},
        [(5, 3, 8), (6, 3, 8)],
        {
            "tgt_mask": lambda m: causal_mask(m, 5),
            "memory_key_padding_mask": np.array([[0] * 6, [0, 0, 0, 0, 1, 1], [0, 1, 1, 1, 1, 1]], dtype=bool),
            "tgt_is_causal": True,
        },
        True,
    ),
    "decoder_pre_norm_batch_first_float_memory_mask": (
        "TransformerDecoderLayer",
        {"norm_first": True, "batch_first": True, "activation": "gelu"},
        [(3, 5, 8), (3, 6, 8)],
        {"memory_mask": np.linspace(-3, 1, 30).reshape(5, 6), "tgt_key_padding_mask": PADDING, "tgt_mask": CAUSAL},
        False,
    ),
    "decoder_unbatched_no_bias": (
        "TransformerDecoderLayer",
        {"bias": False},
        [(5, 8), (4, 8)],
        {"tgt_mask": CAUSAL, "memory_key_padding_mask": np.array([0, 0, 1, 0], dtype=bool)},
        False,
    ),
}


def made(m, value):
    if callable(value):
        return value(m)
    return m.tensor(value) if isinstance(value, np.ndarray) else value


def run(m, module, shapes, options, train, seed=7):
    """(output, {name: gradient} of every parameter and input) for a random cotangent."""
    module.train(train)
    rng = np.random.default_rng(seed)
    inputs = [m.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    out = module(*inputs, **{key: made(m, value) for key, value in options.items()})
    (out * m.tensor(rng.standard_normal(tuple(out.shape)))).sum().backward()
    grads = {name: values(p.grad) for name, p in module.named_parameters()}
    grads.update({f"input {i}": values(t.grad) for i, t in enumerate(inputs)})
    return values(out), grads


def twins(m, oracle, cls, args, kwargs):
    """PyTorch's module (seeded, float64) and ours with its state_dict loaded."""
    oracle.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # enable_nested_tensor's (checked below)
        theirs = getattr(oracle.nn, cls)(*args, **{k: made(oracle, v) for k, v in kwargs.items()}).double()
        ours = getattr(m.nn, cls)(*args, **{k: made(m, v) for k, v in kwargs.items()}).double()
    assert list(ours.state_dict()) == list(theirs.state_dict()) and repr(ours) == repr(theirs)
    ours.load_state_dict({k: m.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def assert_same(got, want):
    np.testing.assert_allclose(got[0], want[0], **CLOSE, err_msg="output")
    assert list(got[1]) == list(want[1])
    for key in got[1]:
        np.testing.assert_allclose(got[1][key], want[1][key], **CLOSE, err_msg=key)


@pytest.mark.parametrize("name", sorted(CASES))
def test_layers_match_torch(torch_like, oracle, name):
    cls, kwargs, shapes, options, train = CASES[name]
    ours, theirs = twins(torch_like, oracle, cls, (8, 2, 16), {"dropout": 0.0, **kwargs})
    assert_same(run(torch_like, ours, shapes, options, train), run(oracle, theirs, shapes, options, train))


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("batch_first", [False, True], ids=["seq_first", "batch_first"])
def test_transformer_matches_torch(torch_like, oracle, batch_first, norm_first, train):
    kwargs = {"dim_feedforward": 16, "dropout": 0.0, "batch_first": batch_first, "norm_first": norm_first}
    ours, theirs = twins(torch_like, oracle, "Transformer", (8, 2, 2, 2), kwargs)
    src, tgt = ((3, 6, 8), (3, 5, 8)) if batch_first else ((6, 3, 8), (5, 3, 8))
    options = {
        "tgt_mask": lambda m: causal_mask(m, 5),
        "src_key_padding_mask": np.array([[0] * 6, [0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1]], dtype=bool),
        "tgt_key_padding_mask": PADDING,
        "memory_key_padding_mask": np.array([[0] * 6, [0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1]], dtype=bool),
    }
    assert_same(run(torch_like, ours, [src, tgt], options, train), run(oracle, theirs, [src, tgt], options, train))


def stacks(m, nn_kind, batch_first, norm=True):
    layer = getattr(m.nn, f"Transformer{nn_kind}Layer")(8, 2, 16, dropout=0.0, batch_first=batch_first)
    return getattr(m.nn, f"Transformer{nn_kind}")(layer, 3, m.nn.LayerNorm(8) if norm else None)


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_stacks_deep_copy_the_layer_and_match_torch(torch_like, oracle, train):
    for kind, shapes, options in (
        ("Encoder", [(5, 3, 8)], {"mask": CAUSAL, "src_key_padding_mask": PADDING}),
        ("Decoder", [(5, 3, 8), (4, 3, 8)], {"tgt_mask": lambda m: causal_mask(m, 5), "memory_mask": CAUSAL[:, :4]}),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            oracle.manual_seed(0)
            theirs, ours = stacks(oracle, kind, False).double(), stacks(torch_like, kind, False).double()
        layers = list(ours.layers)
        assert len({id(layer.linear1.weight) for layer in layers}) == 3  # copies, not one layer three times
        np.testing.assert_array_equal(values(layers[0].linear1.weight), values(layers[2].linear1.weight))
        assert list(ours.state_dict()) == list(theirs.state_dict()) and repr(ours) == repr(theirs)
        ours.load_state_dict({k: torch_like.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
        assert_same(run(torch_like, ours, shapes, options, train), run(oracle, theirs, shapes, options, train))


@pytest.mark.parametrize(
    "padding",
    [PADDING, np.array([[0, 1, 0, 1, 1], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=bool)],
    ids=["left_aligned", "not_left_aligned"],
)
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_an_encoders_inference_gives_torchs_nested_tensor_zeros(torch_like, oracle, padding, grad):
    """In eval mode without gradients, PyTorch runs a left-aligned padded batch as a nested tensor: the padded
    positions come out as zeros (then the final norm); with gradients, or a mask not left-aligned, it does not."""
    x = np.random.default_rng(3).standard_normal((3, 5, 8))
    outs, state = [], None
    for m in (oracle, torch_like):
        oracle.manual_seed(0)
        encoder = stacks(m, "Encoder", True, norm=False).double().eval()
        if state is None:
            state = {k: v.numpy() for k, v in encoder.state_dict().items()}
        encoder.load_state_dict({k: m.tensor(v) for k, v in state.items()})
        with m.set_grad_enabled(grad):
            outs.append(values(encoder(m.tensor(x), src_key_padding_mask=m.tensor(padding))))
    np.testing.assert_allclose(outs[1], outs[0], **CLOSE)
    zeros = (outs[0] == 0).all(-1)
    np.testing.assert_array_equal(zeros, padding if (not grad and padding is PADDING) else np.zeros_like(padding))


def test_generate_square_subsequent_mask_as_torch(torch_like, oracle):
    for kwargs in ({}, {"dtype": "float64"}):
        got, want = (
            m.nn.Transformer.generate_square_subsequent_mask(4, **{k: getattr(m, v) for k, v in kwargs.items()})
            for m in (torch_like, oracle)
        )
        assert str(got.dtype) == str(want.dtype)
        np.testing.assert_array_equal(values(got), values(want))
    assert values(torch_like.nn.Transformer(8, 2, 1, 1, 16).generate_square_subsequent_mask(2)).tolist() == [
        [0.0, -math.inf],
        [0.0, 0.0],
    ]


def test_construction_warnings_as_torch(torch_like, oracle):
    def messages(m):
        made = []
        for kwargs in (
            {},
            {"batch_first": True},
            {"batch_first": True, "norm_first": True},
            {"batch_first": True, "bias": False},
        ):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                m.nn.TransformerEncoder(m.nn.TransformerEncoderLayer(8, 2, 16, **kwargs), 2)
                m.nn.TransformerEncoder(m.nn.TransformerEncoderLayer(6, 3, 16, batch_first=True), 1)
                m.nn.TransformerEncoder(m.nn.TransformerEncoderLayer(8, 2, 16, activation=m.tanh, batch_first=True), 1)
                m.nn.TransformerEncoder(m.nn.Linear(2, 2), 1, enable_nested_tensor=False)
                m.nn.Transformer(8, 2, 1, 1, 16)
                m.nn.TransformerEncoderLayer(8, 2, 16)(m.zeros(2, 3, 8), m.zeros(2, 2, dtype=m.bool), m.zeros(3, 2))
                decoder = m.nn.TransformerDecoderLayer(8, 2, 16)
                decoder(m.zeros(2, 3, 8), m.zeros(4, 3, 8), m.zeros(2, 2), tgt_key_padding_mask=m.zeros(3, 2) > 0)
            made.append([(w.category, str(w.message)) for w in caught])
        return made

    assert messages(torch_like) == messages(oracle)


def test_errors_as_torch(torch_like, oracle):
    def calls(m):
        z, nn = m.zeros, m.nn
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            transformer = nn.Transformer(8, 2, 1, 1, 16)
        layer = nn.TransformerEncoderLayer(8, 2, 16)
        return [
            lambda: nn.TransformerEncoderLayer(8, 2, activation="tanh"),
            lambda: nn.TransformerDecoderLayer(8, 2, activation="swish"),
            lambda: transformer(z(5, 2, 8), z(4, 3, 8)),
            lambda: transformer(z(5, 2, 8), z(4, 2, 6)),
            lambda: layer(z(5, 2, 8), is_causal=True),
            lambda: layer(z(5, 2, 8), src_key_padding_mask=z(2, 5, dtype=m.int64)),
            lambda: layer(z(5, 2, 6)),
            lambda: nn.TransformerEncoderLayer(6, 4),
        ]

    for ours, theirs in zip(calls(torch_like), calls(oracle), strict=True):
        with pytest.raises(Exception) as want:
            theirs()
        with pytest.raises(type(want.value), match=f"^{re.escape(str(want.value))}$"):
            ours()


@pytest.mark.parametrize("p", [0.25, 0.6])
def test_training_dropout_zeroes_a_fraction_p_and_scales_the_rest(torch_like, p):
    """A pre-norm layer whose attention gives out_proj.bias (zero projections) and whose feed-forward gives
    linear2.bias: the output minus the input is dropout1(1) + dropout2(10), each 0 or 1 / (1 - p)."""
    torch_like.manual_seed(1)
    layer = torch_like.nn.TransformerEncoderLayer(8, 2, 16, dropout=p, norm_first=True).double()
    with torch_like.no_grad():
        for name, param in layer.named_parameters():
            if not name.startswith("norm"):
                param.zero_()
        layer.self_attn.out_proj.bias.fill_(1.0)
        layer.linear2.bias.fill_(10.0)
    x = torch_like.tensor(np.random.default_rng(0).standard_normal((40, 50, 8)), requires_grad=True)
    change, scale = values(layer(x)) - values(x), 1 / (1 - p)
    feed_forward = change > 10 * scale - 1e-9
    attention = np.isclose(change - 10 * scale * feed_forward, scale)
    assert (attention | np.isclose(change - 10 * scale * feed_forward, 0.0)).all()
    for kept in (attention, feed_forward):
        assert abs(1 - kept.mean() - p) < 0.02  # 16,000 draws: 4.5 standard deviations
    layer.eval()
    np.testing.assert_allclose(values(layer(x)) - values(x), 11.0)


# --- the "Language Modeling with nn.Transformer" tutorial's model and training loop -------------------------


def language_model(m, ntoken=20, d_model=8, nhead=2, d_hid=16, nlayers=2, dropout=0.0):
    nn = m.nn

    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, dropout=0.1, max_len=50):
            super().__init__()
            self.dropout = nn.Dropout(p=dropout)
            position = m.arange(max_len).unsqueeze(1)
            div_term = m.exp(m.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            pe = m.zeros(max_len, 1, d_model)
            pe[:, 0, 0::2] = m.sin(position * div_term)
            pe[:, 0, 1::2] = m.cos(position * div_term)
            self.register_buffer("pe", pe)

        def forward(self, x):
            return self.dropout(x + self.pe[: x.size(0)])

    class TransformerModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.model_type = "Transformer"
            self.pos_encoder = PositionalEncoding(d_model, dropout)
            encoder_layers = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout)
            self.transformer_encoder = nn.TransformerEncoder(encoder_layers, nlayers)
            self.embedding = nn.Embedding(ntoken, d_model)
            self.d_model = d_model
            self.linear = nn.Linear(d_model, ntoken)

        def forward(self, src, src_mask=None):
            src = self.embedding(src) * math.sqrt(self.d_model)
            src = self.pos_encoder(src)
            output = self.transformer_encoder(src, src_mask)
            return self.linear(output)

    return TransformerModel()


def train_language_model(m, state, steps=4, bptt=6):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = language_model(m).double()
    model.load_state_dict({k: m.tensor(v) for k, v in state.items()})
    data = m.tensor((np.arange(bptt * steps + 1)[:, None] * 3 + np.arange(4)) % 20)  # a pattern to learn
    criterion = m.nn.CrossEntropyLoss()
    optimizer = m.optim.SGD(model.parameters(), lr=5.0)
    scheduler = m.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.95)
    model.train()
    losses = []
    for i in range(0, steps * bptt, bptt):
        source, targets = data[i : i + bptt], data[i + 1 : i + 1 + bptt].reshape(-1)
        src_mask = m.nn.Transformer.generate_square_subsequent_mask(bptt).double()
        output = model(source, src_mask)
        loss = criterion(output.view(-1, 20), targets)
        optimizer.zero_grad()
        loss.backward()
        m.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()
    model.eval()
    with m.no_grad():
        held_out = criterion(model(data[:bptt], src_mask).view(-1, 20), data[1 : bptt + 1].reshape(-1)).item()
    return losses, held_out


def test_the_language_model_tutorial_trains_with_torchs_losses(torch_like, oracle):
    oracle.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state = {k: v.numpy().copy() for k, v in language_model(oracle).double().state_dict().items()}
    losses, held_out = train_language_model(torch_like, state)
    want_losses, want_held_out = train_language_model(oracle, state)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-9)
    np.testing.assert_allclose(held_out, want_held_out, rtol=1e-9)
    assert losses[-1] < losses[0]
