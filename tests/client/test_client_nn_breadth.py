"""The rest of `torch.nn`'s everyday modules (the other activations, losses and distances, normalisations,
dropouts, resampling and padding) through the engine, the embedded client and a live server (`torch_like`),
against PyTorch in float64: each module's output, its parameters' and input's gradients and its buffers after
a forward in train or eval mode (PyTorch's module given our state_dict), their reprs, their errors, and the
random ones' statistics. The functions' values and gradients are in tests/nn_functional_cases.py's table."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.client import test_client_nn_optim as base
from tests.client.test_client_nn_optim import EXACT, copy_into, values

oracle = base.oracle


def _floats(*shape, scale=1.0):
    return lambda rng: rng.standard_normal(shape) * scale


def _uniform(*shape):
    return lambda rng: rng.uniform(0.05, 0.95, shape)


def _signs(*shape):
    return lambda rng: rng.choice([-1.0, 1.0], shape)


def _then(layer):
    """A Linear(4, 6) then `layer`, so that an in-place layer writes into a result and its gradient reaches weights."""
    return lambda m: m.nn.Sequential(m.nn.Linear(4, 6), layer(m))


# name -> (module builder on a package, input makers (the first requires grad if floating), train mode)
MODULES = {
    "hardtanh in place": (_then(lambda m: m.nn.Hardtanh(-0.5, 0.7, inplace=True)), [_floats(5, 4)], True),
    "relu6": (_then(lambda m: m.nn.ReLU6()), [_floats(5, 4, scale=8.0)], True),
    "hardsigmoid": (_then(lambda m: m.nn.Hardsigmoid()), [_floats(5, 4, scale=4.0)], True),
    "hardswish in place": (_then(lambda m: m.nn.Hardswish(inplace=True)), [_floats(5, 4, scale=4.0)], True),
    "hardshrink": (_then(lambda m: m.nn.Hardshrink(0.3)), [_floats(5, 4)], True),
    "softshrink": (_then(lambda m: m.nn.Softshrink()), [_floats(5, 4)], True),
    "tanhshrink": (_then(lambda m: m.nn.Tanhshrink()), [_floats(5, 4)], True),
    "softsign": (_then(lambda m: m.nn.Softsign()), [_floats(5, 4)], True),
    "log sigmoid": (_then(lambda m: m.nn.LogSigmoid()), [_floats(5, 4, scale=5.0)], True),
    "mish in place": (_then(lambda m: m.nn.Mish(inplace=True)), [_floats(5, 4)], True),
    "selu in place": (_then(lambda m: m.nn.SELU(inplace=True)), [_floats(5, 4)], True),
    "celu": (_then(lambda m: m.nn.CELU(2.0)), [_floats(5, 4)], True),
    "glu": (_then(lambda m: m.nn.GLU()), [_floats(5, 4)], True),
    "softmin": (_then(lambda m: m.nn.Softmin(dim=1)), [_floats(5, 4)], True),
    "softmax2d": (lambda m: m.nn.Softmax2d(), [_floats(2, 3, 2, 2)], True),
    "threshold in place": (_then(lambda m: m.nn.Threshold(0.1, -2.0, inplace=True)), [_floats(5, 4)], True),
    "rrelu eval": (_then(lambda m: m.nn.RReLU(0.1, 0.4)), [_floats(5, 4)], False),
    "prelu": (lambda m: m.nn.PReLU(), [_floats(5, 4)], True),
    "prelu per channel": (lambda m: m.nn.PReLU(3, init=0.1), [_floats(2, 3, 4)], True),
    "cosine similarity": (lambda m: m.nn.CosineSimilarity(dim=1), [_floats(5, 3), _floats(5, 3)], True),
    "pairwise distance": (lambda m: m.nn.PairwiseDistance(1.0, keepdim=True), [_floats(5, 3), _floats(5, 3)], True),
    "kl div batchmean": (lambda m: m.nn.KLDivLoss(reduction="batchmean"), [_floats(4, 3), _uniform(4, 3)], True),
    "kl div log target": (lambda m: m.nn.KLDivLoss(reduction="sum", log_target=True), [_floats(4, 3)] * 2, True),
    "margin ranking": (lambda m: m.nn.MarginRankingLoss(0.2), [_floats(5), _floats(5), _signs(5)], True),
    "cosine embedding": (
        lambda m: m.nn.CosineEmbeddingLoss(0.1, reduction="none"),
        [_floats(5, 3), _floats(5, 3), _signs(5)],
        True,
    ),
    "hinge embedding": (lambda m: m.nn.HingeEmbeddingLoss(2.0), [_floats(5, 3), _signs(5, 3)], True),
    "soft margin": (lambda m: m.nn.SoftMarginLoss(reduction="sum"), [_floats(4, 3), _signs(4, 3)], True),
    "poisson nll full": (
        lambda m: m.nn.PoissonNLLLoss(log_input=False, full=True),
        [_uniform(4, 3), lambda rng: rng.integers(0, 5, (4, 3)).astype(float)],
        True,
    ),
    "gaussian nll": (lambda m: m.nn.GaussianNLLLoss(full=True), [_floats(4, 3), _floats(4, 3), _uniform(4, 1)], True),
    "triplet margin swap": (lambda m: m.nn.TripletMarginLoss(0.5, swap=True), [_floats(5, 3)] * 3, True),
    "multilabel soft margin": (
        lambda m: m.nn.MultiLabelSoftMarginLoss(weight=m.tensor(np.linspace(0.5, 2.0, 3))),
        [_floats(4, 3), lambda rng: rng.integers(0, 2, (4, 3)).astype(float)],
        True,
    ),
    "multi margin": (
        lambda m: m.nn.MultiMarginLoss(p=2, margin=0.7, weight=m.tensor(np.linspace(0.5, 2.0, 4))),
        [_floats(5, 4), lambda rng: rng.integers(0, 4, 5)],
        True,
    ),
}


def build(m, name):
    m.manual_seed(0)
    return MODULES[name][0](m).double()


def run(m, name, module):
    """(output, {parameter (and input): gradient}, {buffer: value}) of `module`, MODULES[name]'s, on package `m`."""
    _, makers, train = MODULES[name]
    rng = np.random.default_rng(1)
    arrays = [make(rng) for make in makers]
    module.train(train)
    inputs = [m.tensor(a, requires_grad=i == 0 and a.dtype.kind == "f") for i, a in enumerate(arrays)]
    out = module(*inputs)
    cotangent = np.random.default_rng(2).standard_normal(tuple(out.shape))
    (out * m.tensor(cotangent)).sum().backward()
    grads = {k: values(p.grad) for k, p in module.named_parameters()}
    if inputs[0].requires_grad:
        grads["input"] = values(inputs[0].grad)
    return values(out), grads, {k: values(b) for k, b in module.named_buffers()}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_matches_torch(torch_like, oracle, name):
    ours, theirs = build(torch_like, name), build(oracle, name)
    copy_into(theirs, ours, oracle)
    assert repr(ours) == repr(theirs)
    out, grads, buffers = run(torch_like, name, ours)
    want_out, want_grads, want_buffers = run(oracle, name, theirs)
    np.testing.assert_allclose(out, want_out, **EXACT)
    assert sorted(grads) == sorted(want_grads) and sorted(buffers) == sorted(want_buffers)
    for key in grads:
        np.testing.assert_allclose(grads[key], want_grads[key], **EXACT, err_msg=key)
    for key in buffers:
        np.testing.assert_allclose(buffers[key], want_buffers[key], **EXACT, err_msg=key)


def test_module_reprs_match_torch(torch_like, oracle):
    def every_module(m):
        nn = m.nn
        return nn.Sequential(
            *(nn.PReLU(), nn.RReLU(), nn.Hardtanh(), nn.ReLU6(inplace=True), nn.Threshold(0.1, 20), nn.GLU()),
            *(nn.Softmin(1), nn.CELU(2, True), nn.SELU(), nn.Mish(True), nn.Hardshrink(), nn.Softshrink(0.2)),
            *(nn.Softsign(), nn.Hardswish(True), nn.Hardsigmoid(), nn.LogSigmoid(), nn.Tanhshrink(), nn.Softmax2d()),
            *(nn.PReLU(3, init=0.1), nn.Hardtanh(-2, 3, True), nn.SELU(True), nn.RReLU(0.1, 0.3, True)),
            *(
                nn.CosineSimilarity(),
                nn.PairwiseDistance(),
                nn.KLDivLoss(),
                nn.MarginRankingLoss(),
                nn.SoftMarginLoss(),
            ),
            *(nn.CosineEmbeddingLoss(), nn.HingeEmbeddingLoss(), nn.PoissonNLLLoss(), nn.GaussianNLLLoss()),
            *(nn.TripletMarginLoss(), nn.MultiLabelSoftMarginLoss(), nn.MultiMarginLoss(weight=m.ones(2))),
        )

    assert repr(every_module(torch_like)) == repr(every_module(oracle))


ERRORS = [
    lambda m: m.nn.functional.hardtanh(m.zeros(3), 2.0, 1.0),
    lambda m: m.nn.functional.glu(m.zeros(3, 5)),
    lambda m: m.nn.functional.glu(m.zeros(())),
    lambda m: m.nn.functional.glu(m.zeros(3, 4), dim=2),
    lambda m: m.nn.functional.prelu(m.zeros(3, 4), m.ones(3)),
    lambda m: m.nn.functional.prelu(m.zeros(4), m.ones(4)),
    lambda m: m.nn.functional.rrelu(m.zeros(3), 0.5, 0.1, training=True),
    lambda m: m.nn.functional.celu(m.zeros(3), 0.0),
    lambda m: m.nn.Softmax2d()(m.zeros(3, 3)),
    lambda m: m.nn.functional.relu6(m.zeros(3, requires_grad=True), inplace=True),
    lambda m: m.nn.functional.margin_ranking_loss(m.zeros(3), m.zeros(3), m.ones(1, 3)),
    lambda m: m.nn.functional.cosine_embedding_loss(m.zeros(2, 3), m.zeros(3), m.ones(2)),
    lambda m: m.nn.functional.cosine_embedding_loss(m.zeros(2, 3), m.zeros(2, 3), m.ones(2, 1)),
    lambda m: m.nn.functional.triplet_margin_loss(m.zeros(2, 3), m.zeros(2, 3), m.zeros(3)),
    lambda m: m.nn.functional.multi_margin_loss(m.zeros(3, 4), m.tensor([0, 1])),
    lambda m: m.nn.functional.multi_margin_loss(m.zeros(3, 4), m.tensor([0, 1, 1]), p=3),
    lambda m: m.nn.functional.gaussian_nll_loss(m.zeros(2, 3), m.zeros(2, 3), m.ones(3, 2)),
    lambda m: m.nn.functional.gaussian_nll_loss(m.zeros(2, 3), m.zeros(2, 3), -m.ones(2, 3)),
    lambda m: m.nn.functional.gaussian_nll_loss(m.zeros(2, 3), m.zeros(2, 3), 1.0, reduction="max"),
    lambda m: m.nn.functional.kl_div(m.zeros(2, 3), m.zeros(2, 3), reduction="max"),
    lambda m: m.nn.functional.pdist(m.zeros(2, 3, 4)),
    lambda m: m.nn.TripletMarginLoss(margin=0.0),
    lambda m: m.nn.MultiMarginLoss(weight=m.ones(2, 2)),
]


@pytest.mark.parametrize("call", ERRORS, ids=range(len(ERRORS)))
def test_errors_match_torch(torch_like, oracle, call):
    with pytest.raises(Exception) as want:
        call(oracle)
    with pytest.raises(type(want.value), match=f"^{re.escape(str(want.value))}$"):
        call(torch_like)


def test_kl_div_warns_of_mean_and_takes_the_legacy_arguments_as_torch(torch_like, oracle):
    def program(m):
        x = m.tensor(np.log(np.full((2, 3), 0.2)))
        t = m.tensor(np.array([[0.2, 0.3, 0.5], [0.0, 0.5, 0.5]]))
        with pytest.warns(UserWarning, match="^reduction: 'mean' divides the total loss by both"):
            mean = m.nn.functional.kl_div(x, t)
        with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
            summed = m.nn.KLDivLoss(size_average=False)(x, t)
        return [float(mean), float(summed), float(m.nn.functional.kl_div(x, t, reduction="batchmean"))]

    np.testing.assert_allclose(program(torch_like), program(oracle), **EXACT)


def test_rrelu_in_training_draws_a_slope_per_negative_element(torch_like):
    torch_like.manual_seed(0)
    x = torch_like.tensor(-np.ones((200, 50)), requires_grad=True)
    y = torch_like.nn.RReLU(0.1, 0.4)(x)
    y.sum().backward()
    slopes = -values(y)
    assert 0.1 <= slopes.min() and slopes.max() <= 0.4 and abs(slopes.mean() - 0.25) < 0.01
    assert abs(slopes.std() - 0.3 / np.sqrt(12)) < 0.01  # uniform on [0.1, 0.4]
    np.testing.assert_array_equal(values(x.grad), slopes)  # the gradient is the slope drawn
    positive = torch_like.tensor(np.ones(5))
    assert np.array_equal(values(torch_like.nn.functional.rrelu(positive, training=True)), np.ones(5))
