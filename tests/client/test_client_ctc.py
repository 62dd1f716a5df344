"""`F.ctc_loss` and `nn.CTCLoss` against torch on the engine, the embedded client and a live server: values and the
gradient of raw log_probs (torch's, which adds exp(log_probs) to the derivative) for padded and concatenated targets,
unbatched inputs, tensor and tuple lengths, each reduction, impossible alignments with and without zero_infinity, in
float32 and float64; torch's errors; a CTC model trained; and what a client reads (the lengths only). The
nn.functional table (tests/nn_functional_cases.py) gradchecks it through log_softmax."""

from __future__ import annotations

import numpy as np
import pytest

import client
import engine

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(24)
LOGITS = RNG.standard_normal((6, 3, 5))
LOG_PROBS = LOGITS - np.log(np.exp(LOGITS).sum(2, keepdims=True))
PADDED = np.array([[1, 2, 2], [3, 1, 0], [4, 4, 0]])
CONCATENATED = np.array([1, 2, 2, 3, 4, 4])
TOLERANCE = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=2e-5, atol=2e-5)}

# (targets, input lengths, target lengths, options); lengths as lists are passed as tuples of ints
SETTINGS = {
    "padded": (PADDED, [6, 5, 4], [3, 2, 2], {}),
    "padded-sum-blank4": (PADDED - 1, [6, 5, 4], [3, 2, 2], {"reduction": "sum", "blank": 4}),
    "concatenated-none": (CONCATENATED, [6, 5, 6], [3, 1, 2], {"reduction": "none"}),
    "tuple-lengths": (CONCATENATED, (6, 5, 6), (3, 1, 2), {"reduction": "none"}),
    "empty-targets-and-inputs": (PADDED, [0, 6, 0], [0, 0, 2], {"reduction": "none"}),
    "impossible": (PADDED, [6, 1, 2], [3, 2, 2], {"reduction": "none"}),  # [3, 1] in 1 step, [4, 4] in 2
    "impossible-mean": (PADDED, [6, 1, 2], [3, 2, 2], {}),
    "impossible-zeroed": (PADDED, [6, 1, 2], [3, 2, 2], {"reduction": "none", "zero_infinity": True}),
    "impossible-zeroed-mean": (PADDED, [6, 1, 2], [3, 2, 2], {"zero_infinity": True}),
}


def _ctc(m, dtype, targets, input_lengths, target_lengths, options, unbatched=False):
    log_probs = m.tensor(LOG_PROBS[:, 0] if unbatched else LOG_PROBS, dtype=getattr(m, np.dtype(dtype).name))
    log_probs.requires_grad_(True)
    lengths = [n if isinstance(n, tuple) else m.tensor(n) for n in (input_lengths, target_lengths)]
    loss = m.nn.functional.ctc_loss(log_probs, m.tensor(targets), *lengths, **options)
    weights = np.linspace(0.5, 1.5, loss.numel()).reshape(tuple(loss.shape)).astype(dtype)
    (loss * m.tensor(weights)).sum().backward()
    return np.asarray(loss.detach().numpy()), np.asarray(log_probs.grad.numpy())


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("setting", SETTINGS)
def test_values_and_gradients_of_raw_log_probs_are_torchs(torch_like, setting, dtype):
    (got, got_grad), (want, want_grad) = (_ctc(m, dtype, *SETTINGS[setting]) for m in (torch_like, torch))
    assert got.shape == want.shape and got.dtype == want.dtype == got_grad.dtype
    np.testing.assert_allclose(got, want, **TOLERANCE[dtype])  # inf where torch's is
    np.testing.assert_allclose(got_grad, want_grad, **TOLERANCE[dtype])  # nan where torch's is
    if setting.startswith("impossible"):
        assert np.isinf(got).any() != ("zeroed" in setting) and np.isnan(got_grad).any() != ("zeroed" in setting)


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_minus_infinity_log_probs_as_torch(torch_like, zero_infinity):
    """A class never emitted (log_probs -inf): finite losses where a path avoids it, nan gradients there as torch's;
    the second target needs the missing class (infinite, or zeroed)."""
    x = LOG_PROBS.copy()
    x[1, 0, 2] = x[4, 2, 1] = -np.inf
    x[:, 1, 3] = -np.inf
    results = []
    for m in (torch_like, torch):
        log_probs = m.tensor(x, requires_grad=True)
        loss = m.nn.functional.ctc_loss(
            log_probs, m.tensor(PADDED), m.tensor([6, 6, 4]), m.tensor([3, 2, 2]), reduction="none",
            zero_infinity=zero_infinity,
        )  # fmt: skip
        (loss * m.tensor([1.0, 2.0, 3.0])).sum().backward()
        results.append((np.asarray(loss.detach().numpy()), np.asarray(log_probs.grad.numpy())))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    assert np.isfinite(results[0][0][0]) and np.isnan(results[0][1][1, 0, 2])


@pytest.mark.parametrize("lengths", [(6, 3), ((6,), (3,)), ([6], [3])], ids=["0-d", "tuple", "1-d"])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_unbatched_input(torch_like, lengths, reduction):
    options = {"reduction": reduction}
    for targets in (PADDED[0], PADDED[:1]):
        setting = (targets, *(n if isinstance(n, tuple) else np.array(n) for n in lengths), options)
        (got, got_grad), (want, want_grad) = (
            _ctc(m, np.float64, *setting, unbatched=True) for m in (torch_like, torch)
        )
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12)
        np.testing.assert_allclose(got_grad, want_grad, rtol=1e-10, atol=1e-12)


X = np.zeros((5, 3, 4))
TARGETS, INPUTS, LENGTHS = [[1, 2, 2], [3, 1, 0], [1, 1, 0]], [5, 4, 2], [3, 1, 2]
ERRORS = {
    "reduction": ((X, TARGETS, INPUTS, LENGTHS), {"reduction": "avg"}, ValueError),
    "float input lengths": ((X, TARGETS, np.array(INPUTS, float), LENGTHS), {}, RuntimeError),
    "float target lengths": ((X, TARGETS, INPUTS, np.array(LENGTHS, float)), {}, RuntimeError),
    "int log_probs": ((X.astype(np.int32), TARGETS, INPUTS, LENGTHS), {}, NotImplementedError),
    "4-d log_probs": ((X[None], TARGETS, INPUTS, LENGTHS), {}, RuntimeError),
    "1-d log_probs": ((X[0, 0], TARGETS, INPUTS, LENGTHS), {}, RuntimeError),
    "3-d targets": ((X, [TARGETS], INPUTS, LENGTHS), {}, RuntimeError),
    "blank": ((X, TARGETS, INPUTS, LENGTHS), {"blank": 4}, RuntimeError),
    "input lengths size": ((X, TARGETS, INPUTS[:2], LENGTHS), {}, RuntimeError),
    "target lengths size": ((X, TARGETS, INPUTS, LENGTHS[:2]), {}, RuntimeError),
    "input length too long": ((X, TARGETS, [6, 4, 2], [-1, 1, 2]), {}, RuntimeError),  # the target's first
    "negative input length": ((X, TARGETS, [-1, 4, 2], LENGTHS), {}, RuntimeError),
    "too short targets": ((X, TARGETS, INPUTS, [4, 1, 2]), {}, RuntimeError),
    "too few targets": ((X, TARGETS[:2], INPUTS, LENGTHS), {}, RuntimeError),
    "concatenated, too long": ((X, [1, 2, 2, 3, 1, 1, 1], INPUTS, LENGTHS), {}, RuntimeError),
    "concatenated, too short": ((X, [1, 2, 2, 3, 1], INPUTS, LENGTHS), {}, RuntimeError),
    "int lengths": ((X, TARGETS, 5, 3), {}, TypeError),
    "tensor and tuple": ((X, TARGETS, INPUTS, tuple(LENGTHS)), {}, TypeError),
}


def _raised(m, args, options):
    x, targets, *lengths = args
    lengths = [n if isinstance(n, (int, tuple)) else m.tensor(np.asarray(n)) for n in lengths]
    with pytest.raises(Exception) as caught:
        m.nn.functional.ctc_loss(m.tensor(x), m.tensor(np.asarray(targets)), *lengths, **options)
    return caught.value


@pytest.mark.parametrize("name", ERRORS)
def test_torchs_errors(torch_like, name):
    args, options, kind = ERRORS[name]
    got, want = _raised(torch_like, args, options), _raised(torch, args, options)
    assert type(got) is kind and isinstance(want, kind)
    assert str(got).split("\n")[0] == str(want).split("\n")[0]


def _train(m):
    """A linear layer over 4 features to 5 classes, trained for 3 steps with nn.CTCLoss."""
    features = m.tensor(RNG_FEATURES)
    layer = m.nn.Linear(4, 5).double()
    with m.no_grad():
        layer.weight.copy_(m.tensor(np.linspace(-1, 1, 20).reshape(5, 4)))
        layer.bias.copy_(m.tensor(np.linspace(0.5, -0.5, 5)))
    criterion = m.nn.CTCLoss(blank=0, zero_infinity=True)
    optimizer = m.optim.SGD(layer.parameters(), lr=0.5)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = criterion(layer(features).log_softmax(2), m.tensor(PADDED), m.tensor([6, 5, 3]), m.tensor([3, 2, 2]))
        loss.backward()
        optimizer.step()
        losses.append(float(loss.item()))
    return losses, np.asarray(layer.weight.detach().numpy()).copy()


RNG_FEATURES = RNG.standard_normal((6, 3, 4))


def test_ctc_loss_module_trains_as_torch(torch_like):
    (losses, weight), (want_losses, want_weight) = _train(torch_like), _train(torch)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-10)
    np.testing.assert_allclose(weight, want_weight, rtol=1e-10, atol=1e-12)
    assert losses[-1] < losses[0]
    assert repr(torch_like.nn.CTCLoss(blank=1)) == repr(torch.nn.CTCLoss(blank=1)) == "CTCLoss()"


def test_a_client_reads_the_lengths_only(remote):
    from client_testkit import Recorder

    recorder = Recorder(remote)
    x = client.tensor(LOGITS, requires_grad=True)
    log_probs = x.log_softmax(2)
    F = client.nn.functional
    loss = F.ctc_loss(log_probs, client.tensor(PADDED), client.tensor([6, 5, 4]), client.tensor([3, 2, 2]))
    assert recorder.calls == []  # lengths given as data are read where they are; nothing else is read
    loss.backward()
    assert recorder.paths() == ["/backward"]
    computed = (x.detach().sum((0, 2)) * 0 + 6).long()  # lengths on the server: one read
    F.ctc_loss(log_probs, client.tensor(PADDED), computed, client.tensor([3, 2, 2]))
    assert recorder.paths() == ["/backward", "/forward"]


def test_gradcheck_through_log_softmax_and_torchs_extra_term():
    """The loss's derivative is the true one through log_softmax (whose backward cancels torch's exp(log_probs)
    term); for raw log_probs the gradient is torch's, the derivative plus exp(log_probs) within each input length."""
    F = engine.nn.functional
    targets, input_lengths, target_lengths = engine.tensor(PADDED), engine.tensor([6, 4, 3]), engine.tensor([3, 2, 2])
    logits = engine.tensor(LOGITS, requires_grad=True)
    assert engine.autograd.gradcheck(
        lambda z: F.ctc_loss(z.log_softmax(2), targets, input_lengths, target_lengths, reduction="none"), (logits,)
    )

    def loss(array):
        return F.ctc_loss(engine.tensor(array), targets, input_lengths, target_lengths, reduction="sum").item()

    true = np.zeros_like(LOG_PROBS)
    for at in np.ndindex(*LOG_PROBS.shape):
        step = np.zeros_like(LOG_PROBS)
        step[at] = 1e-6
        true[at] = (loss(LOG_PROBS + step) - loss(LOG_PROBS - step)) / 2e-6
    log_probs = engine.tensor(LOG_PROBS, requires_grad=True)
    (grad,) = engine.autograd.grad(
        F.ctc_loss(log_probs, targets, input_lengths, target_lengths, reduction="sum"), log_probs
    )
    within = (np.arange(6)[:, None] < np.array([6, 4, 3]))[..., None]
    np.testing.assert_allclose(grad.numpy(), true + np.exp(LOG_PROBS) * within, rtol=1e-6, atol=1e-8)
