"""PyTorch's training tutorials and recipes (tests/tutorial_training_programs.py: the quickstart's train/test loops,
"What is torch.nn really?", char-RNN classification and generation, seq2seq with attention, the n-gram model, the
LSTM tagger, the BiLSTM-CRF, DCGAN, FGSM, knowledge distillation, style transfer with LBFGS, REINFORCE, DQN,
transfer learning with frozen features, the examples' word language model with tied weights, spatial transformer
networks, and the recipes on zeroing gradients, saving several models in one file, warmstarting and schedulers) run
on the engine, the embedded client and a live server (`torch_like`) from the same weights and data as on PyTorch,
which they match: losses, gradients, outputs. Then what they needed fixed: assignments into a view reaching its base
on the client outside grad mode, `.data`'s methods of today's tutorials with nn.init on a `.data`, the margin
losses' keywords."""

from __future__ import annotations

import numpy as np
import pytest

from tests import tutorial_training_programs as programs
from tests.tutorial_training_programs import data

CLOSE = dict(rtol=2e-4, atol=2e-5)


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def plain(result):
    """`result` with every tensor a NumPy array, every mapping a sorted list of items, every tuple a list."""
    if hasattr(result, "detach") and hasattr(result, "shape"):
        return np.asarray(result.detach().numpy())
    if isinstance(result, dict):
        return [[plain(k), plain(v)] for k, v in sorted(result.items(), key=lambda kv: str(kv[0]))]
    if isinstance(result, (list, tuple)):
        return [plain(v) for v in result]
    return result


def assert_matches(ours, theirs, where="result"):
    ours, theirs = plain(ours), plain(theirs)
    if isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), f"{where}: {ours!r} != {theirs!r}"
        for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_matches(a, b, f"{where}[{k}]")
    elif isinstance(theirs, str) or theirs is None:
        assert ours == theirs, where
    else:
        np.testing.assert_allclose(
            np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float), **CLOSE, err_msg=where
        )


PROGRAMS = [
    "quickstart_loops",
    "nn_really_from_scratch",
    "nn_really_cnn",
    "char_rnn_classification",
    "char_rnn_generation",
    "seq2seq_attention",
    "ngram_language_model",
    "lstm_pos_tagger",
    "bilstm_crf",
    "dcgan",
    "fgsm",
    "knowledge_distillation",
    "style_transfer",
    "recipes",
    "dqn",
    "transfer_learning",
    "word_language_model",
    "spatial_transformer",
]


@pytest.mark.parametrize("name", PROGRAMS)
def test_tutorial_trains_as_torch(torch_like, oracle, name):
    program = getattr(programs, name)
    result = program(torch_like)
    want = program(oracle)
    if name == "dcgan":  # weights_init's N(0, 0.02) draws differ; their spread does not
        np.testing.assert_allclose(result.pop("drawn"), 0.02, rtol=0.5)
        want.pop("drawn")
    assert_matches(result, want, name)


def test_reinforce_as_torch(torch_like, oracle):
    """REINFORCE samples its own actions; then, replaying the actions torch sampled, the same losses."""
    sampled = programs.reinforce(torch_like)
    assert set(sampled["taken"]) <= {0, 1} and len(sampled["history"]) == 3
    want = programs.reinforce(oracle)
    assert_matches(programs.reinforce(torch_like, actions=want["taken"]), want, "reinforce")


def test_shuffled_loader_sees_every_example(torch_like):
    """With `shuffle=True` the order is gradserve's own; each epoch still has 3 batches and a finite loss."""
    result = programs.nn_really_cnn(torch_like, epochs=1, shuffle=True)
    assert result["batches"] == 3 and len(result["losses"]) == 4 and np.isfinite(result["losses"]).all()


# --- what the tutorials needed fixed ----------------------------------------------------------------------


def _written_through(m):
    """The char-RNN's one-hot lines (`t[i][0][j] = 1`), a base's change seen by a live view, a view's by its base,
    and a no_grad update of a view of a leaf that requires grad (its view keeps its grad_fn into the leaf)."""
    t = m.zeros(3, 1, 4)
    for i, j in enumerate((2, 0, 3)):
        t[i][0][j] = 1
    t[1].add_(0.5)
    column = t[:, 0, 3]
    t[0, 0, 3] = 7
    column[1] -= 2
    w = m.ones(4, requires_grad=True)
    head = w[0:2]
    with m.no_grad():
        w[0] -= 3
        head[1] = 7
    (head * m.tensor([1.0, 2.0])).sum().backward()
    versions = [t._version, column._version, w._version, head._version]
    return [t, column, w, head, w.grad], versions, head.grad_fn is not None


def test_assignments_into_views_reach_their_base_as_in_torch(torch_like, oracle):
    (got, got_versions, got_fn), (want, want_versions, want_fn) = _written_through(torch_like), _written_through(oracle)
    assert_matches(got, want, "written through")
    assert got_versions == want_versions and got_fn and want_fn


def _data_methods(m):
    """`.data`'s Tensor methods of today's tutorials, and nn.init on a `.data` (DCGAN's weights_init)."""
    p = m.tensor(np.linspace(-1, 1, 6).reshape(2, 3).astype(np.float32), requires_grad=True)
    g = m.tensor(np.full((2, 3), 0.25, dtype=np.float32))
    p.data.add_(g.data, alpha=-2)
    p.data.sub_(g, alpha=0.5)
    p.data.clamp_(-0.9, 0.4)
    signs = (p.data - 0.1).sign()
    w = m.nn.Linear(50, 40)
    m.nn.init.normal_(w.weight.data, 0.0, 0.02)
    m.nn.init.constant_(w.bias.data, 0.5)
    spread = float(w.weight.detach().std())
    w.weight.data.uniform_(-0.1, 0.1)
    widest, drawn = float(w.weight.detach().abs().max()), []
    for fill in (lambda: w.weight.data.normal_(0.0, 0.02), lambda: m.nn.init.normal_(w.weight, 0.0, 0.02)):
        m.manual_seed(3)  # `.data`'s draws come from its package's generator, as nn.init's do
        fill()
        drawn.append(w.weight.detach().numpy().copy())
    same = bool((drawn[0] == drawn[1]).all())
    return [p, signs, w.bias, same], spread, widest, w.weight.requires_grad


def test_data_methods_of_todays_tutorials(torch_like, oracle):
    got, want = _data_methods(torch_like), _data_methods(oracle)
    assert_matches(got[0], want[0], ".data")
    assert abs(got[1] - 0.02) < 0.002 and 0.09 < got[2] <= 0.1 and got[3]


def test_margin_losses_take_their_arguments_by_name(torch_like, oracle):
    def losses(m):
        nn, a, b = m.nn, m.tensor(data(1, 4, 3)), m.tensor(data(2, 4, 3))
        target = m.tensor([1.0, -1.0, 1.0, -1.0])
        return [
            nn.CosineEmbeddingLoss(margin=0.1)(a, b, target=target),
            nn.MarginRankingLoss()(input1=a[:, 0], input2=b[:, 0], target=target),
            nn.HingeEmbeddingLoss()(a[:, 1], target=target),
        ]

    assert_matches(losses(torch_like), losses(oracle), "margin losses")
