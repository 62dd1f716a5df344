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
from tests.client.test_client_nn_optim import EXACT, values

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


def _then4(layer):
    """A 1x1 Conv2d(1, 2) then `layer`, for layers of [N, C, H, W] input."""
    return lambda m: m.nn.Sequential(m.nn.Conv2d(1, 2, 1), layer(m))


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
    "group norm": (lambda m: m.nn.GroupNorm(2, 4), [_floats(3, 4, 5)], True),
    "group norm without affine": (lambda m: m.nn.GroupNorm(3, 6, eps=1e-3, affine=False), [_floats(2, 6, 2, 2)], True),
    "instance norm 1d": (lambda m: m.nn.InstanceNorm1d(3), [_floats(2, 3, 5)], True),
    "instance norm 2d tracked": (
        lambda m: m.nn.InstanceNorm2d(3, momentum=0.3, affine=True, track_running_stats=True),
        [_floats(2, 3, 4, 4)],
        True,
    ),
    "instance norm 2d tracked eval": (
        lambda m: m.nn.InstanceNorm2d(3, track_running_stats=True),
        [_floats(2, 3, 4, 4)],
        False,
    ),
    "instance norm of one sample": (lambda m: m.nn.InstanceNorm1d(3, affine=True), [_floats(3, 5)], True),
    "instance norm 3d cumulative": (
        lambda m: m.nn.InstanceNorm3d(2, momentum=None, track_running_stats=True),
        [_floats(2, 2, 2, 3, 2)],
        True,
    ),
    "rms norm": (lambda m: m.nn.RMSNorm(4), [_floats(3, 4)], True),
    "rms norm of 2 dims": (lambda m: m.nn.RMSNorm((2, 4), eps=1e-2), [_floats(3, 2, 4)], True),
    "local response norm": (lambda m: m.nn.LocalResponseNorm(3, alpha=0.1), [_floats(2, 5, 3, 3)], True),
    "channel dropouts in eval": (
        lambda m: m.nn.Sequential(m.nn.Dropout1d(), m.nn.AlphaDropout(), m.nn.FeatureAlphaDropout()),
        [_floats(2, 3, 4)],
        False,
    ),
    "reflection pad 2d": (_then4(lambda m: m.nn.ReflectionPad2d((1, 2, 2, 0))), [_floats(2, 1, 3, 4)], True),
    "replication pad 1d": (lambda m: m.nn.ReplicationPad1d(2), [_floats(2, 3, 4)], True),
    "circular pad 2d": (lambda m: m.nn.CircularPad2d(1), [_floats(1, 2, 3, 3)], True),
    "constant and zero pads": (
        lambda m: m.nn.Sequential(m.nn.ConstantPad1d((1, 2), 2.5), m.nn.ZeroPad2d((0, 1, 1, 0))),
        [_floats(2, 3, 4)],
        True,
    ),
    "reflection pad 1d": (lambda m: m.nn.ReflectionPad1d(3), [_floats(2, 4)], True),
    "upsample nearest": (_then4(lambda m: m.nn.Upsample(scale_factor=2)), [_floats(2, 1, 3, 4)], True),
    "upsample bilinear": (
        _then4(lambda m: m.nn.Upsample(size=(5, 7), mode="bilinear")),
        [_floats(2, 1, 3, 4)],
        True,
    ),
    "upsampling bilinear 2d": (lambda m: m.nn.UpsamplingBilinear2d(scale_factor=2), [_floats(1, 2, 3, 3)], True),
    "upsampling nearest 2d": (lambda m: m.nn.UpsamplingNearest2d(size=(4, 5)), [_floats(1, 2, 3, 3)], True),
    "upsample linear corners": (
        lambda m: m.nn.Upsample(scale_factor=1.5, mode="linear", align_corners=True),
        [_floats(2, 3, 4)],
        True,
    ),
    "pixel shuffle round trip": (
        lambda m: m.nn.Sequential(m.nn.PixelShuffle(2), m.nn.Conv2d(2, 3, 3, padding=1), m.nn.PixelUnshuffle(2)),
        [_floats(2, 8, 3, 2)],
        True,
    ),
    "fold of unfold": (
        lambda m: m.nn.Sequential(m.nn.Unfold(2, padding=1), m.nn.Fold((4, 5), 2, padding=1)),
        [_floats(1, 2, 4, 5)],
        True,
    ),
    "bilinear": (lambda m: m.nn.Bilinear(3, 2, 4), [_floats(5, 3), _floats(5, 2)], True),
    "bilinear without bias": (lambda m: m.nn.Bilinear(3, 2, 4, bias=False), [_floats(2, 5, 3), _floats(2, 5, 2)], True),
    "adaptive max pool 2d": (_then4(lambda m: m.nn.AdaptiveMaxPool2d((2, 3))), [_floats(2, 1, 5, 4)], True),
    "adaptive max pool 1d": (lambda m: m.nn.AdaptiveMaxPool1d(3), [_floats(2, 3, 7)], True),
    "dropout 2d in eval": (lambda m: m.nn.Dropout2d(), [_floats(2, 3, 4, 4)], False),
    "dropout 3d in eval": (lambda m: m.nn.Dropout3d(), [_floats(2, 3, 4, 4, 2)], False),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_matches_torch(torch_like, oracle, name):
    base.module_matches_torch(torch_like, oracle, name, MODULES)


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
            *(nn.GroupNorm(2, 4), nn.InstanceNorm1d(3), nn.InstanceNorm2d(3, affine=True, track_running_stats=True)),
            *(nn.RMSNorm(4), nn.RMSNorm([2, 3], eps=1e-3, elementwise_affine=False), nn.LocalResponseNorm(2)),
            *(nn.Dropout1d(), nn.AlphaDropout(0.2), nn.FeatureAlphaDropout(), nn.Dropout2d(0.1, True), nn.Dropout3d()),
            *(nn.GroupNorm(3, 3, affine=False), nn.InstanceNorm3d(2, momentum=None), nn.ConstantPad1d((1, 2), 0.0)),
            *(nn.ConstantPad2d(1, 3.5), nn.ZeroPad1d(2), nn.ZeroPad2d((1, 1, 2, 0)), nn.ReflectionPad1d(2)),
            *(nn.ReflectionPad2d((1, 1, 2, 0)), nn.ReplicationPad1d(1), nn.ReplicationPad2d(2), nn.CircularPad1d(1)),
            *(nn.CircularPad2d(1), nn.Fold((4, 5), 2), nn.Unfold(2, padding=1), nn.Bilinear(2, 3, 4)),
            *(nn.AdaptiveMaxPool2d((2, 3)), nn.AdaptiveMaxPool1d(3, return_indices=True), nn.PixelShuffle(2)),
            *(nn.PixelUnshuffle(3), nn.Upsample(scale_factor=2), nn.Upsample(size=(3, 4), mode="bilinear")),
            *(
                nn.UpsamplingNearest2d(scale_factor=2),
                nn.UpsamplingBilinear2d(size=4),
                nn.Upsample(scale_factor=(2, 3)),
            ),
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
    lambda m: m.nn.functional.group_norm(m.zeros(2, 5, 3), 2),
    lambda m: m.nn.functional.group_norm(m.zeros(2), 1),
    lambda m: m.nn.GroupNorm(2, 5),
    lambda m: m.nn.functional.instance_norm(m.zeros(2, 3, 1)),
    lambda m: m.nn.InstanceNorm2d(3)(m.zeros(2, 3)),
    lambda m: m.nn.InstanceNorm1d(4, affine=True)(m.zeros(2, 3, 4)),
    lambda m: m.nn.functional.rms_norm(m.zeros(2, 3), (2,)),
    lambda m: m.nn.functional.local_response_norm(m.zeros(2, 3), 2),
    lambda m: m.nn.functional.dropout1d(m.zeros(2, 3, 4, 5)),
    lambda m: m.nn.Dropout1d(1.5),
    lambda m: m.nn.functional.alpha_dropout(m.zeros(3), -0.1),
    lambda m: m.nn.functional.pad(m.zeros(3), (1, 1), mode="reflect"),
    lambda m: m.nn.functional.pad(m.zeros(1, 2, 3), (3, 3), mode="reflect"),
    lambda m: m.nn.functional.pad(m.zeros(1, 2, 3), (4, 0), mode="circular"),
    lambda m: m.nn.functional.pad(m.zeros(1, 2, 3), (1, 1), mode="replicate", value=1.0),
    lambda m: m.nn.functional.pad(m.zeros(1, 2, 3), (1, 1), mode="bad"),
    lambda m: m.nn.functional.interpolate(m.zeros(1, 1, 2, 3), scale_factor=2, align_corners=True),
    lambda m: m.nn.functional.interpolate(m.zeros(1, 1, 2, 3), scale_factor=2, size=3),
    lambda m: m.nn.functional.interpolate(m.zeros(1, 1, 2, 3)),
    lambda m: m.nn.functional.interpolate(m.zeros(1, 1, 2, 3), size=(3,)),
    lambda m: m.nn.functional.interpolate(m.zeros(1, 1, 2, 3), scale_factor=2, mode="linear"),
    lambda m: m.nn.functional.pixel_shuffle(m.zeros(1, 3, 2, 2), 2),
    lambda m: m.nn.functional.pixel_unshuffle(m.zeros(1, 3, 3, 2), 2),
    lambda m: m.nn.functional.bilinear(m.zeros(2, 3), m.zeros(2, 2), m.zeros(4, 2, 2)),
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


@pytest.mark.parametrize("name", ["dropout1d", "dropout2d", "dropout3d", "feature_alpha_dropout"])
def test_channel_dropouts_drop_whole_channels_at_rate_p(torch_like, name):
    torch_like.manual_seed(0)
    shape = {"dropout1d": (50, 40, 3), "dropout2d": (50, 40, 2, 2), "dropout3d": (50, 40, 2, 1, 2)}.get(
        name, (50, 40, 3)
    )
    x = torch_like.tensor(np.ones(shape), requires_grad=True)
    y = getattr(torch_like.nn.functional, name)(x, 0.25, training=True)
    y.sum().backward()
    out = values(y).reshape(50, 40, -1)
    assert (out == out[..., :1]).all()  # one draw per channel
    kept = out[..., 0] != out.min() if name == "feature_alpha_dropout" else out[..., 0] != 0
    assert abs(kept.mean() - 0.75) < 0.03
    if name != "feature_alpha_dropout":
        np.testing.assert_allclose(out[kept], 1 / 0.75)
        np.testing.assert_allclose(values(x.grad), values(y))  # the gradient is the mask, scaled


def test_alpha_dropout_keeps_a_selu_unit_normal_and_backpropagates_its_scale(torch_like, oracle):
    def moments(m):
        m.manual_seed(0)
        x = m.tensor(np.random.default_rng(0).standard_normal(200_000), requires_grad=True)
        y = m.nn.functional.alpha_dropout(x, 0.2, training=True)
        y.sum().backward()
        kept = values(x.grad) != 0
        return values(y).mean(), values(y).std(), kept.mean(), np.unique(values(x.grad)[kept])

    mean, std, kept, scale = moments(torch_like)
    want_mean, want_std, want_kept, want_scale = moments(oracle)
    assert abs(mean - want_mean) < 0.01 and abs(std - want_std) < 0.01 and abs(kept - want_kept) < 0.005
    np.testing.assert_allclose(scale, want_scale, rtol=1e-12)


def test_a_one_sample_dropout1d_and_in_place_dropouts_as_torch(torch_like):
    torch_like.manual_seed(0)
    x = torch_like.tensor(np.ones((30, 4)), requires_grad=True)
    y = torch_like.nn.functional.dropout1d(x, 0.5)
    out = values(y)
    assert (out == out[:, :1]).all() and set(np.unique(out)) <= {0.0, 2.0}
    h = torch_like.tensor(np.ones((4, 3, 2, 2)), requires_grad=True) * 1.0
    same = torch_like.nn.Dropout2d(0.5, inplace=True)(h)
    assert same is h and h._version == 1
    h.sum().backward()


def test_bilinear_initialises_within_torchs_bound_and_adaptive_max_pool_returns_torchs_indices(torch_like, oracle):
    torch_like.manual_seed(0)
    layer = torch_like.nn.Bilinear(9, 2, 3)
    weights = np.concatenate([values(layer.weight).ravel(), values(layer.bias)])
    assert np.abs(weights).max() <= 1 / 3 and np.abs(weights).max() > 0.3 and weights.std() > 0.15
    x = np.random.default_rng(3).standard_normal((2, 3, 7, 5))
    for m in (torch_like, oracle):
        out, indices = m.nn.AdaptiveMaxPool2d((3, 2), return_indices=True)(m.tensor(x))
        flat = x.reshape(2, 3, -1)
        np.testing.assert_array_equal(
            np.take_along_axis(flat, values(indices).reshape(2, 3, -1), 2).ravel(), values(out).ravel()
        )
    want = oracle.nn.functional.adaptive_max_pool1d(oracle.tensor(x[0]), 3, return_indices=True)[1]
    got = torch_like.nn.functional.adaptive_max_pool1d(torch_like.tensor(x[0]), 3, return_indices=True)[1]
    np.testing.assert_array_equal(values(got), want.numpy())
    assert values(got).dtype == np.int64


def test_in_place_functions_of_a_result_backpropagate_as_torch(torch_like, oracle):
    def chain(m):
        x = m.tensor(np.linspace(-3, 3, 8), requires_grad=True)
        F, outs = m.nn.functional, []
        for step in (F.silu, F.elu, F.mish, F.hardswish, F.relu, F.selu):
            h = x * 1.5
            assert step(h, inplace=True) is h
            outs.append(h)
        (m.stack(outs) * m.tensor(np.arange(48.0).reshape(6, 8))).sum().backward()
        return values(m.stack(outs)), values(x.grad)

    for got, want in zip(chain(torch_like), chain(oracle)):
        np.testing.assert_allclose(got, want, **EXACT)
    torch_like.manual_seed(0)
    x = torch_like.tensor(np.ones(40), requires_grad=True)
    h = x * 1.0
    torch_like.nn.functional.dropout(h, 0.5, inplace=True)
    h.sum().backward()
    np.testing.assert_array_equal(values(x.grad), values(h))  # the kept elements' scale, 2, and zeros


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
