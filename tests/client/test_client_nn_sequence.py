"""torch.nn's recurrent modules (RNN, LSTM, GRU and their cells) through the engine, the embedded client and a
live server (`torch_like`), against PyTorch in float64: with PyTorch's weights loaded, the outputs, final
states and the gradients of the inputs, initial states and parameters (stacked, bidirectional, batch_first,
unbatched, dropout 1 between layers); reprs, parameter names, initialisation bounds and the errors for bad
input; gradcheck; and an LSTM sequence model trained with Adam printing PyTorch's losses."""

from __future__ import annotations

import contextlib
import io
import math
import re

import numpy as np
import pytest

from tests.client import test_client_nn_optim as base
from tests.client.test_client_nn_optim import values

oracle = base.oracle
CLOSE = dict(rtol=1e-9, atol=1e-12)

# name: (module maker, input shape, initial state shapes (None: no initial state), train mode)
CASES = {
    "rnn_tanh": (lambda nn: nn.RNN(3, 4), (5, 2, 3), None, False),
    "rnn_relu_stacked_batch_first": (
        lambda nn: nn.RNN(3, 4, 2, nonlinearity="relu", batch_first=True),
        (2, 5, 3),
        [(2, 2, 4)],
        False,
    ),
    "rnn_bidirectional_unbatched": (lambda nn: nn.RNN(3, 4, bidirectional=True), (5, 3), [(2, 4)], False),
    "lstm": (lambda nn: nn.LSTM(3, 4), (6, 2, 3), None, False),
    "lstm_stacked_bidirectional": (
        lambda nn: nn.LSTM(3, 4, num_layers=2, bidirectional=True),
        (5, 3, 3),
        [(4, 3, 4), (4, 3, 4)],
        False,
    ),
    "lstm_batch_first_no_bias_unbatched": (
        lambda nn: nn.LSTM(3, 4, batch_first=True, bias=False),
        (5, 3),
        [(1, 4), (1, 4)],
        False,
    ),
    "lstm_dropout_1_between_layers": (lambda nn: nn.LSTM(3, 4, num_layers=3, dropout=1.0), (4, 2, 3), None, True),
    "gru": (lambda nn: nn.GRU(3, 4), (5, 2, 3), [(1, 2, 4)], False),
    "gru_stacked_bidirectional_batch_first": (
        lambda nn: nn.GRU(3, 5, num_layers=2, batch_first=True, bidirectional=True, dropout=0.3),
        (2, 4, 3),
        [(4, 2, 5)],
        False,
    ),
    "rnn_cell": (lambda nn: nn.RNNCell(3, 4), (2, 3), [(2, 4)], True),
    "rnn_cell_relu_unbatched": (lambda nn: nn.RNNCell(3, 4, nonlinearity="relu"), (3,), None, True),
    "lstm_cell": (lambda nn: nn.LSTMCell(3, 4), (2, 3), [(2, 4), (2, 4)], True),
    "lstm_cell_unbatched_no_bias": (lambda nn: nn.LSTMCell(3, 4, bias=False), (3,), [(4,), (4,)], True),
    "gru_cell": (lambda nn: nn.GRUCell(3, 4), (2, 3), [(2, 4)], True),
    "gru_cell_unbatched": (lambda nn: nn.GRUCell(3, 4), (3,), None, True),
}


def _flat(result):
    return [t for part in result for t in _flat(part)] if isinstance(result, (tuple, list)) else [result]


def run_case(m, name, module):
    """(outputs, {input/state/parameter: gradient}) of CASES[name] on package `m` with `module`."""
    _, shape, states, train = CASES[name]
    rng = np.random.default_rng(1)
    module.train(train)
    x = m.tensor(rng.standard_normal(shape), requires_grad=True)
    initial = [m.tensor(rng.standard_normal(s) * 0.5, requires_grad=True) for s in states or ()]
    hx = None if not initial else initial[0] if len(initial) == 1 else tuple(initial)
    outs = _flat(module(x) if hx is None else module(x, hx))
    cotangents = np.random.default_rng(2)
    loss = sum((out * m.tensor(cotangents.standard_normal(tuple(out.shape)))).sum() for out in outs)
    loss.backward()
    grads = {k: values(p.grad) for k, p in module.named_parameters()}
    grads.update({f"input{k}": values(v.grad) for k, v in enumerate([x, *initial])})
    return [values(out) for out in outs], grads


@pytest.mark.parametrize("name", sorted(CASES))
def test_recurrent_module_matches_torch(torch_like, oracle, name):
    theirs = CASES[name][0](oracle.nn).double()
    ours = CASES[name][0](torch_like.nn).double()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: torch_like.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    outs, grads = run_case(torch_like, name, ours)
    want_outs, want_grads = run_case(oracle, name, theirs)
    assert [o.shape for o in outs] == [o.shape for o in want_outs]
    for got, want in zip(outs, want_outs, strict=True):
        np.testing.assert_allclose(got, want, **CLOSE)
    assert list(grads) == list(want_grads)
    for key in grads:
        np.testing.assert_allclose(grads[key], want_grads[key], **CLOSE, err_msg=key)


def test_recurrent_reprs_names_and_initialisation_as_torch(torch_like, oracle):
    def every(nn):
        return [
            nn.RNN(2, 3, nonlinearity="relu"),
            nn.RNN(2, 3, 2, "relu", False, True, 0.5, True),
            nn.LSTM(2, 3, num_layers=2, dropout=0.25, bidirectional=True, batch_first=True),
            nn.GRU(2, 3, bias=False),
            nn.RNNCell(2, 3, bias=False, nonlinearity="relu"),
            nn.LSTMCell(2, 3),
            nn.GRUCell(2, 3, bias=False),
        ]

    for ours, theirs in zip(every(torch_like.nn), every(oracle.nn), strict=True):
        assert repr(ours) == repr(theirs)
        assert isinstance(ours, torch_like.nn.Module)
        shapes = [(k, tuple(v.shape)) for k, v in ours.named_parameters()]
        assert shapes == [(k, tuple(v.shape)) for k, v in theirs.named_parameters()]
        for _, p in ours.named_parameters():
            drawn = values(p)
            assert np.abs(drawn).max() <= 1 / math.sqrt(3) and len(np.unique(drawn)) == drawn.size
    lstm = torch_like.nn.LSTM(2, 3, 2)
    assert [[tuple(w.shape) for w in layer] for layer in lstm.all_weights] == [
        [tuple(w.shape) for w in layer] for layer in oracle.nn.LSTM(2, 3, 2).all_weights
    ]
    lstm.flatten_parameters()


def _raises_like(ours, theirs):
    """Calling `theirs` raises; `ours` raises the same type with the same message."""
    with pytest.raises(Exception) as want:
        theirs()
    with pytest.raises(type(want.value), match=f"^{re.escape(str(want.value))}$"):
        ours()


def test_recurrent_errors_as_torch(torch_like, oracle):
    def bad_calls(m):
        nn, z = m.nn, m.zeros
        lstm, gru, rnn = nn.LSTM(3, 4).double(), nn.GRU(3, 4, batch_first=True), nn.RNN(3, 4)
        cell, lstm_cell = nn.GRUCell(3, 4), nn.LSTMCell(3, 4)
        return [
            lambda: nn.LSTM(3, 4, dropout=2),
            lambda: nn.GRU(3, 4, proj_size=2),
            lambda: nn.RNN(3, 4, nonlinearity="gelu"),
            lambda: nn.RNN(3, 0),
            lambda: nn.LSTM(3.0, 4),
            lambda: rnn(z(2, 3, 4, 3)),
            lambda: lstm(z(1, 2, 3, 3)),
            lambda: gru(
                z(
                    3,
                )
            ),
            lambda: lstm(z(5, 2, 3)),
            lambda: lstm(z(5, 2, 4, dtype=m.float64)),
            lambda: lstm(z(5, 2, 3, dtype=m.float64), (z(1, 3, 4, dtype=m.float64), z(1, 2, 4, dtype=m.float64))),
            lambda: lstm(z(5, 2, 3, dtype=m.float64), (z(1, 2, 4, dtype=m.float64), z(1, 2, 5, dtype=m.float64))),
            lambda: lstm(z(5, 3, dtype=m.float64), (z(1, 1, 4, dtype=m.float64), z(1, 4, dtype=m.float64))),
            lambda: gru(z(2, 5, 3), z(1, 4)),
            lambda: gru(z(2, 5, 3), z(1, 3, 4)),
            lambda: rnn(z(5, 3), z(1, 1, 4)),
            lambda: cell(z(2, 3, 3)),
            lambda: cell(z(2, 5)),
            lambda: cell(z(2, 3), z(3, 4)),
            lambda: cell(z(2, 3), z(1, 2, 4)),
            lambda: lstm_cell(z(2, 3), (z(2, 4), z(2, 5))),
            lambda: nn.RNNCell(3, 4, nonlinearity="gelu")(z(2, 3)),
            lambda: nn.LSTM(3, 4, proj_size=2)(z(5, 2, 3), (z(1, 2, 4), z(1, 2, 4))),  # (h's width is proj_size)
            lambda: nn.LSTM(3, 4, proj_size=4),
        ]

    for ours, theirs in zip(bad_calls(torch_like), bad_calls(oracle), strict=True):
        _raises_like(ours, theirs)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        torch_like.nn.GRU(3, 4, dropout=0.5)


def test_dropout_between_layers_only_in_training(torch_like):
    torch_like.manual_seed(0)
    model = torch_like.nn.GRU(3, 4, num_layers=2, dropout=0.5).double()
    x = torch_like.randn(6, 2, 3, dtype=torch_like.float64)
    model.eval()
    first, second = values(model(x)[0]), values(model(x)[0])
    np.testing.assert_array_equal(first, second)
    model.train()
    assert not np.allclose(values(model(x)[0]), first)


def test_lstm_passes_gradcheck(torch_like):
    torch_like.manual_seed(0)
    lstm = torch_like.nn.LSTM(2, 3, num_layers=2, bidirectional=True).double()
    x = torch_like.randn(3, 2, 2, dtype=torch_like.float64, requires_grad=True)
    h0 = torch_like.randn(4, 2, 3, dtype=torch_like.float64, requires_grad=True)
    c0 = torch_like.randn(4, 2, 3, dtype=torch_like.float64, requires_grad=True)

    def fn(x, h0, c0, weight):
        with torch_like.no_grad():
            lstm.weight_hh_l1.copy_(weight)
        out, (h, c) = lstm(x, (h0, c0))
        return out.sum() + (h * c).sum()

    assert torch_like.autograd.gradcheck(lambda x, h0, c0: fn(x, h0, c0, lstm.weight_hh_l1.detach()), (x, h0, c0))


def sequence_model_program(torch):
    """A sequence classifier (LSTM + Linear on the last step), 3 Adam steps printing the loss; weights from
    NumPy draws loaded through load_state_dict so PyTorch starts from them too."""
    rng = np.random.default_rng(0)

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(4, 8, num_layers=2, batch_first=True)
            self.head = torch.nn.Linear(8, 3)

        def forward(self, x):
            out, (h, c) = self.lstm(x)
            return self.head(out[:, -1])

    model = Tagger().double()
    model.load_state_dict(
        {k: torch.tensor(rng.uniform(-0.4, 0.4, tuple(v.shape))) for k, v in model.state_dict().items()}
    )
    x = torch.tensor(rng.standard_normal((6, 5, 4)))
    y = torch.tensor(rng.integers(0, 3, 6))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for step in range(3):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"step {step}  loss {loss.item():.10f}")


def printed(program, torch) -> str:
    """What `program(torch)` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        program(torch)
    return out.getvalue()


def test_lstm_sequence_model_trains_with_torch_losses(torch_like, oracle):
    got = printed(sequence_model_program, torch_like)
    assert got == printed(sequence_model_program, oracle) and got.count("loss") == 3
