"""The cases of the `nn.functional` tests: each a call of one function with its keyword options, on
fixed inputs, written against the module it runs on (`m`: real PyTorch, `engine` or `client`), so
one table serves the comparison with PyTorch in three modes (tests/client/test_client_nn_functional.py) and
the engine's gradient checks (tests/engine/test_nn_functional.py).

Floating inputs require grad unless their position is in `data` (targets, weights, running stats);
integer inputs are class indices."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

R = np.random.default_rng(20261125)


@dataclass(frozen=True)
class Case:
    id: str
    call: Callable  # (m, *tensors) -> a tensor, or a tuple whose first item is differentiated
    arrays: tuple
    data: tuple = ()
    gradcheck: bool = True  # False where finite differences straddle a boundary

    def __repr__(self):
        return self.id


def f(name, *args, **kwargs):
    """A call of m.nn.functional.<name>(*tensors, *args, **kwargs)."""
    return lambda m, *tensors: getattr(m.nn.functional, name)(*tensors, *args, **kwargs)


def normal(*shape, scale=1.0):
    return R.standard_normal(shape) * scale


def uniform(low, high, *shape):
    return R.uniform(low, high, shape)


def log_probs(*shape):
    x = normal(*shape)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def probabilities(*shape):
    p = uniform(0.1, 1.0, *shape)
    return p / p.sum(axis=1, keepdims=True)


LOGITS = normal(5, 4)
INDICES = np.array([0, 3, 1, 1, 2])
IGNORED = np.array([0, -100, 1, 3, -100])
CLASS_WEIGHT = uniform(0.5, 2.0, 4)
LOGITS_3D = normal(2, 4, 3)
INDICES_3D = np.array([[0, 3, -100], [2, 2, 1]])
WIDE = np.array([-60.0, -30.0, -3.0, -0.5, 0.0, 0.7, 4.0, 30.0, 60.0])
REDUCTIONS = ("mean", "sum", "none")
BOUNDS = np.array([-6.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0])  # the piecewise activations' joints
PIECEWISE = ("relu", "relu6", "hardtanh", "hardsigmoid", "hardswish", "hardshrink", "softshrink", "selu", "celu", "elu")

CASES: list[Case] = []


def case(id, call, *arrays, data=(), gradcheck=True):
    CASES.append(Case(id, call, tuple(np.asarray(a) for a in arrays), tuple(data), gradcheck))


# --- cross_entropy and nll_loss -----------------------------------------------------------------

for reduction in REDUCTIONS:
    for weighted in (False, True):
        for smoothing in (0.0, 0.1):
            for target, ignore in ((IGNORED, -100), (INDICES, 1)):
                options = dict(reduction=reduction, label_smoothing=smoothing, ignore_index=ignore)
                tag = f"cross_entropy-indices-{reduction}-w{int(weighted)}-ls{smoothing}-ignore{ignore}"
                if weighted:
                    case(
                        tag,
                        lambda m, x, t, w, o=options: m.nn.functional.cross_entropy(x, t, weight=w, **o),
                        LOGITS,
                        target,
                        CLASS_WEIGHT,
                        data=(2,),
                    )
                else:
                    case(tag, f("cross_entropy", **options), LOGITS, target)
        for smoothing in (0.0, 0.25):
            tag = f"cross_entropy-probabilities-{reduction}-w{int(weighted)}-ls{smoothing}"
            options = dict(reduction=reduction, label_smoothing=smoothing)
            if weighted:
                call = lambda m, x, t, w, o=options: m.nn.functional.cross_entropy(x, t, weight=w, **o)  # noqa: E731
                case(tag, call, LOGITS, probabilities(5, 4), CLASS_WEIGHT, data=(1, 2))
            else:
                case(tag, f("cross_entropy", **options), LOGITS, probabilities(5, 4), data=(1,))
    case(
        f"cross_entropy-3d-{reduction}",
        lambda m, x, t, w, r=reduction: m.nn.functional.cross_entropy(x, t, weight=w, reduction=r, label_smoothing=0.2),
        LOGITS_3D,
        INDICES_3D,
        CLASS_WEIGHT,
        data=(2,),
    )
    case(f"nll_loss-{reduction}", f("nll_loss", reduction=reduction), log_probs(5, 4), IGNORED)
    case(
        f"nll_loss-weighted-{reduction}",
        lambda m, x, t, w, r=reduction: m.nn.functional.nll_loss(x, t, w, reduction=r),
        log_probs(5, 4),
        IGNORED,
        CLASS_WEIGHT,
        data=(2,),
    )
    case(
        f"nll_loss-3d-{reduction}",
        f("nll_loss", reduction=reduction, ignore_index=2),
        log_probs(2, 4, 3),
        np.array([[0, 3, 2], [2, 2, 1]]),
    )

case("cross_entropy-unbatched", f("cross_entropy"), normal(4), np.array(2))
case("cross_entropy-unbatched-probabilities", f("cross_entropy"), normal(4), probabilities(1, 4)[0], data=(1,))
case(
    "cross_entropy-3d-probabilities",
    f("cross_entropy", label_smoothing=0.1),
    LOGITS_3D,
    probabilities(2, 4, 3),
    data=(1,),
)
case("cross_entropy-large-logits", f("cross_entropy"), normal(3, 4) * 1000, np.array([1, 0, 3]))

# --- regression losses --------------------------------------------------------------------------

for reduction in REDUCTIONS:
    for name in ("mse_loss", "l1_loss"):
        case(f"{name}-{reduction}", f(name, reduction=reduction), normal(4, 3), normal(4, 3), data=(1,))
        case(
            f"{name}-weighted-{reduction}",
            lambda m, x, t, w, n=name, r=reduction: getattr(m.nn.functional, n)(x, t, reduction=r, weight=w),
            normal(4, 3),
            normal(4, 3),
            uniform(0.5, 2.0, 4, 3),
            data=(1, 2),
        )
    for beta in (1.0, 0.5, 0.0):
        case(
            f"smooth_l1_loss-{reduction}-beta{beta}",
            f("smooth_l1_loss", reduction=reduction, beta=beta),
            normal(4, 3),
            normal(4, 3),
            data=(1,),
        )
    for delta in (1.0, 0.5):
        case(
            f"huber_loss-{reduction}-delta{delta}",
            f("huber_loss", reduction=reduction, delta=delta),
            normal(4, 3),
            normal(4, 3),
            data=(1,),
        )
    case(
        f"huber_loss-weighted-{reduction}",
        lambda m, x, t, w, r=reduction: m.nn.functional.huber_loss(x, t, reduction=r, delta=0.7, weight=w),
        normal(4, 3),
        normal(4, 3),
        uniform(0.5, 2.0, 4, 3),
        data=(1, 2),
    )
    case(
        f"binary_cross_entropy-{reduction}",
        f("binary_cross_entropy", reduction=reduction),
        uniform(0.05, 0.95, 4, 3),
        uniform(0, 1, 4, 3),
        data=(1,),
    )
    case(
        f"binary_cross_entropy-weighted-{reduction}",
        lambda m, x, t, w, r=reduction: m.nn.functional.binary_cross_entropy(x, t, w, reduction=r),
        uniform(0.05, 0.95, 4, 3),
        uniform(0, 1, 4, 3),
        uniform(0.5, 2.0, 3),
        data=(1, 2),
    )
    for weighted in (False, True):
        for positive in (False, True):

            def logits_loss(m, x, t, w, p, r=reduction, weighted=weighted, positive=positive):
                return m.nn.functional.binary_cross_entropy_with_logits(
                    x, t, weight=w if weighted else None, pos_weight=p if positive else None, reduction=r
                )

            case(
                f"binary_cross_entropy_with_logits-{reduction}-w{int(weighted)}-pos{int(positive)}",
                logits_loss,
                normal(4, 3, scale=3.0),
                uniform(0, 1, 4, 3),
                uniform(0.5, 2.0, 4, 3),
                uniform(0.5, 3.0, 3),
                data=(1, 2, 3),
            )

case("mse_loss-broadcast", f("mse_loss"), normal(4, 3), normal(3), data=(1,))
case(
    "binary_cross_entropy-at-0-and-1",
    f("binary_cross_entropy"),
    np.array([0.0, 1.0, 0.5, 1e-3]),
    np.array([0.0, 1.0, 1.0, 0.0]),
    data=(0, 1),  # values only: at exactly 0 or 1 PyTorch's gradient formula divides by max(x(1-x), 1e-12)
)
case(
    "binary_cross_entropy_with_logits-zero-logits",
    f("binary_cross_entropy_with_logits"),
    np.zeros((2, 3)),
    uniform(0, 1, 2, 3),
    data=(1,),
)
case(
    "binary_cross_entropy_with_logits-wide",
    f("binary_cross_entropy_with_logits", reduction="none"),
    WIDE,
    uniform(0, 1, WIDE.size),
    data=(1,),
)

# --- distances and the other losses ---------------------------------------------------------------

SIGNS = np.array([1.0, -1.0, -1.0, 1.0, 1.0])
for reduction in REDUCTIONS:
    case(
        f"margin_ranking_loss-{reduction}",
        f("margin_ranking_loss", margin=0.3, reduction=reduction),
        normal(5),
        normal(5),
        SIGNS,
        data=(2,),
    )
    case(
        f"hinge_embedding_loss-{reduction}",
        f("hinge_embedding_loss", margin=1.5, reduction=reduction),
        normal(5, 3),
        np.sign(normal(5, 3)),
        data=(1,),
    )
    case(
        f"soft_margin_loss-{reduction}",
        f("soft_margin_loss", reduction=reduction),
        normal(4, 3, scale=3.0),
        np.sign(normal(4, 3)),
        data=(1,),
    )
    case(
        f"cosine_embedding_loss-{reduction}",
        f("cosine_embedding_loss", margin=-0.2, reduction=reduction),
        normal(5, 3),
        normal(5, 3),
        SIGNS,
        data=(2,),
    )
    case(
        f"triplet_margin_loss-{reduction}",
        f("triplet_margin_loss", margin=2.0, reduction=reduction),
        normal(5, 3),
        normal(5, 3),
        normal(5, 3),
    )
    case(
        f"multilabel_soft_margin_loss-{reduction}",
        f("multilabel_soft_margin_loss", reduction=reduction),
        normal(4, 3, scale=3.0),
        uniform(0, 1, 4, 3).round(),
        data=(1,),
    )
    case(f"multi_margin_loss-{reduction}", f("multi_margin_loss", reduction=reduction), normal(5, 4), INDICES)
    case(
        f"poisson_nll_loss-{reduction}",
        f("poisson_nll_loss", reduction=reduction),
        normal(4, 3),
        uniform(0, 4, 4, 3).round(),
        data=(1,),
    )
    case(
        f"gaussian_nll_loss-{reduction}",
        f("gaussian_nll_loss", reduction=reduction),
        normal(4, 3),
        normal(4, 3),
        uniform(0.5, 2.0, 4, 3),
        data=(1,),
    )
for reduction in ("batchmean", "sum", "none", "mean"):
    case(
        f"kl_div-{reduction}",
        f("kl_div", reduction=reduction),
        log_probs(3, 4),
        np.concatenate([probabilities(3, 3), np.zeros((3, 1))], axis=1),
        data=(1,),
    )
    case(
        f"kl_div-log_target-{reduction}",
        f("kl_div", reduction=reduction, log_target=True),
        log_probs(3, 4),
        log_probs(3, 4),
    )
case("cosine_similarity", f("cosine_similarity"), normal(4, 3), normal(4, 3))
case("cosine_similarity-broadcast-dim0", f("cosine_similarity", dim=0, eps=1e-3), normal(3, 4), normal(3, 1))
case("cosine_similarity-zero-vector", f("cosine_similarity", dim=-1), np.zeros((2, 3)), normal(2, 3), data=(0,))
case("pairwise_distance", f("pairwise_distance"), normal(4, 3), normal(4, 3))
case("pairwise_distance-p1-keepdim", f("pairwise_distance", p=1.0, keepdim=True), normal(4, 3), normal(3))
case("pdist", f("pdist"), normal(5, 3))
case("pdist-p1", f("pdist", p=1), normal(4, 3))
case("triplet_margin_loss-swap-p1", f("triplet_margin_loss", p=1, swap=True), normal(5, 3), normal(5, 3), normal(5, 3))
case(
    "multi_margin_loss-p2-weighted",
    lambda m, x, t, w: m.nn.functional.multi_margin_loss(x, t, p=2, margin=0.5, weight=w),
    normal(5, 4),
    INDICES,
    CLASS_WEIGHT,
    data=(2,),
)
case("multi_margin_loss-unbatched", f("multi_margin_loss", reduction="none"), normal(4), np.array(2))
LABEL_LISTS = np.array([[3, 0, -1, 1], [1, 1, -1, 0], [-1, 2, 1, 0], [0, 1, 2, 3], [2, -1, 3, 3]])
for reduction in ("none", "mean", "sum"):
    case(
        f"multilabel_margin_loss-{reduction}",
        f("multilabel_margin_loss", reduction=reduction),
        normal(5, 4),
        LABEL_LISTS,
    )
case("multilabel_margin_loss-unbatched", f("multilabel_margin_loss"), normal(4), np.array([2, 0, -1, 1]))
case(
    "triplet_margin_with_distance_loss-cosine-swap",
    lambda m, a, p, n: m.nn.functional.triplet_margin_with_distance_loss(
        a, p, n, distance_function=lambda x, y: 1.0 - m.nn.functional.cosine_similarity(x, y), swap=True
    ),
    normal(5, 3),
    normal(5, 3),
    normal(5, 3),
)
case(
    "triplet_margin_with_distance_loss",
    f("triplet_margin_with_distance_loss", margin=2.0, reduction="none"),
    normal(5, 3),
    normal(5, 3),
    normal(5, 3),
)
case(
    "multilabel_soft_margin_loss-weighted",
    lambda m, x, t, w: m.nn.functional.multilabel_soft_margin_loss(x, t, w),
    normal(4, 3),
    uniform(0, 1, 4, 3).round(),
    uniform(0.5, 2, 3),
    data=(1, 2),
)
case(
    "poisson_nll_loss-full-not-log",
    f("poisson_nll_loss", log_input=False, full=True),
    uniform(0.5, 3, 4, 3),
    uniform(0, 4, 4, 3).round(),
    data=(1,),
)
case(
    "gaussian_nll_loss-shared-var-full",
    f("gaussian_nll_loss", full=True),
    normal(4, 3),
    normal(4, 3),
    uniform(0.5, 2.0, 4, 1),
)
case(
    "gaussian_nll_loss-short-var-clamped",
    f("gaussian_nll_loss", eps=0.1),
    normal(4, 3),
    normal(4, 3),
    np.array([0.05, 0.5, 1.0, 0.01]),
    data=(1,),
    gradcheck=False,  # the clamp to eps is not differentiated (PyTorch's no_grad clamp_)
)

# --- activations --------------------------------------------------------------------------------

for dim in (0, 1, -1):
    case(f"softmax-dim{dim}", f("softmax", dim=dim), normal(3, 4, 2))
    case(f"log_softmax-dim{dim}", f("log_softmax", dim=dim), normal(3, 4, 2))
case("softmax-dtype", lambda m, x: m.nn.functional.softmax(x, dim=1, dtype=m.float64), normal(3, 4))
case("log_softmax-implicit-dim", lambda m, x: m.nn.functional.log_softmax(x), normal(3, 4))
for name, options in (
    ("relu", {}),
    ("leaky_relu", {}),
    ("leaky_relu", {"negative_slope": 0.2}),
    ("elu", {}),
    ("elu", {"alpha": 0.5}),
    ("gelu", {}),
    ("gelu", {"approximate": "tanh"}),
    ("silu", {}),
    ("softplus", {}),
    ("softplus", {"beta": 2.0, "threshold": 1.0}),
    ("tanh", {}),
    ("sigmoid", {}),
    ("relu6", {}),
    ("hardtanh", {"min_val": -0.5, "max_val": 2.0}),
    ("hardsigmoid", {}),
    ("hardswish", {}),
    ("hardshrink", {}),
    ("softshrink", {"lambd": 0.3}),
    ("tanhshrink", {}),
    ("softsign", {}),
    ("logsigmoid", {}),
    ("mish", {}),
    ("selu", {}),
    ("celu", {"alpha": 0.5}),  # (a float32 alpha: PyTorch's derivative takes 1 / float32(alpha))
    ("threshold", {"threshold": 0.2, "value": -1.0}),
    ("rrelu", {"lower": 0.1, "upper": 0.5}),
):
    tag = "-".join([name, *(f"{k}{v}" for k, v in options.items())])
    case(tag, f(name, **options), normal(4, 5, scale=2.0))
    case(tag + "-wide", f(name, **options), WIDE, gradcheck=False)

case(
    "activations-at-their-joints",  # values and gradients only: finite differences straddle the kinks
    lambda m, x: m.stack([getattr(m.nn.functional, n)(x) for n in PIECEWISE]),
    BOUNDS,
    gradcheck=False,
)
for name, args in (("relu_", ()), ("elu_", (0.5,)), ("leaky_relu_", (0.2,)), ("hardtanh_", (-0.5, 0.5))):
    case(f"{name}-of-a-result", lambda m, x, n=name, a=args: getattr(m.nn.functional, n)(x * 1.0, *a), normal(3, 4))
for name, args in (("threshold_", (0.1, 2.0)), ("rrelu_", ()), ("celu_", (2.0,)), ("selu_", ())):
    case(f"{name}-of-a-result", lambda m, x, n=name, a=args: getattr(m.nn.functional, n)(x * 1.0, *a), normal(3, 4))
case("glu", f("glu"), normal(3, 6))
case("glu-dim0", f("glu", 0), normal(4, 3))
case("softmin-dim1", f("softmin", dim=1), normal(3, 4))
case("softmin-implicit-dim", lambda m, x: m.nn.functional.softmin(x, dtype=m.float64), normal(2, 3, 4))
case("prelu-per-channel", f("prelu"), normal(2, 3, 4), uniform(0.1, 0.5, 3))
case("prelu-one-slope", f("prelu"), normal(3, 4), uniform(0.1, 0.5, 1))

# --- encodings and layers -----------------------------------------------------------------------

case("one_hot", f("one_hot"), np.array([[0, 3], [1, 1]]))
case("one_hot-num_classes", f("one_hot", 6), np.array([2, 0, 5]))
EMBED_INDICES = np.array([[1, 4, 1], [0, 1, 3]])
for padding in (None, 1, -1):
    case(
        f"embedding-padding{padding}",
        lambda m, i, w, p=padding: m.nn.functional.embedding(i, w, p),
        EMBED_INDICES,
        normal(5, 3),
        gradcheck=padding is None,  # the padding row is read but gets no gradient, by definition
    )
BAG_INDICES, BAG_OFFSETS = np.array([1, 4, 1, 0, 2, 3]), np.array([0, 2, 2])
for mode in ("sum", "mean", "max"):
    case(f"embedding_bag-{mode}", f("embedding_bag", mode=mode), BAG_INDICES, normal(5, 3), BAG_OFFSETS)
case(
    "embedding_bag-per_sample_weights",
    lambda m, i, w, o, p: m.nn.functional.embedding_bag(i, w, o, mode="sum", per_sample_weights=p),
    BAG_INDICES,
    normal(5, 3),
    BAG_OFFSETS,
    normal(6),
)
case("embedding_bag-2d-padding", f("embedding_bag", mode="mean", padding_idx=1), EMBED_INDICES, normal(5, 3))
case("linear", f("linear"), normal(3, 4), normal(2, 4), normal(2))
case("linear-no-bias-3d", f("linear"), normal(2, 3, 4), normal(5, 4))
case("layer_norm", f("layer_norm", (4,)), normal(3, 4))
case(
    "layer_norm-affine",
    lambda m, x, w, b: m.nn.functional.layer_norm(x, (3, 4), w, b, eps=1e-3),
    normal(2, 3, 4),
    normal(3, 4),
    normal(3, 4),
)
for training in (True, False):
    for shape in ((6, 3), (4, 3, 2)):

        def batch_norm(m, x, mean, var, w, b, training=training):
            out = m.nn.functional.batch_norm(x, mean, var, w, b, training=training, momentum=0.3)
            return out, mean, var

        case(
            f"batch_norm-training{int(training)}-{len(shape)}d",
            batch_norm,
            normal(*shape),
            normal(3),
            uniform(0.5, 2.0, 3),
            normal(3),
            normal(3),
            data=(1, 2),
        )
case(
    "batch_norm-no-running-stats",
    lambda m, x: m.nn.functional.batch_norm(x, None, None, training=True),
    normal(5, 2),
)
case("normalize", f("normalize"), normal(3, 4))
case("normalize-p1-dim0", f("normalize", p=1.0, dim=0), normal(3, 4))
case("normalize-eps", f("normalize", dim=-1, eps=10.0), normal(3, 4))
for pads in ((1, 2), (1, -1, 2, 0), (-1, -1, -1, -1), (0, 0, 1, 1, 2, 0)):
    case(f"pad-{pads}", f("pad", pads), normal(2, 3, 4))
case("pad-value", f("pad", (2, 1), value=1.5), normal(3, 2))
for mode in ("reflect", "replicate", "circular"):
    for pads in ((1, 2), (3, 0), (-1, 2), (2, -1)):
        case(f"pad-{mode}-{pads}", f("pad", pads, mode=mode), normal(2, 3, 4))
    case(f"pad-{mode}-2d", f("pad", (1, 2, 2, 0), mode=mode), normal(1, 2, 3, 4))
    case(f"pad-{mode}-3d-of-4d", f("pad", (1, 0, 0, 1, 1, 1), mode=mode), normal(2, 3, 2, 3))

# --- resampling and rearranging --------------------------------------------------------------------
for mode, shape in (("nearest", (1, 2, 3, 4)), ("nearest-exact", (1, 2, 3, 4)), ("area", (1, 2, 5, 4))):
    case(f"interpolate-{mode}-scale", f("interpolate", scale_factor=(2, 1.5), mode=mode), normal(*shape))
    case(f"interpolate-{mode}-size", f("interpolate", size=(4, 3), mode=mode), normal(*shape))
    case(f"interpolate-{mode}-1d", f("interpolate", size=7, mode=mode), normal(2, 2, 5))
for corners in (False, True):
    case(
        f"interpolate-linear-size-corners{corners}",
        f("interpolate", size=7, mode="linear", align_corners=corners),
        normal(2, 2, 4),
    )
    case(
        f"interpolate-linear-down-corners{corners}",
        f("interpolate", scale_factor=0.6, mode="linear", align_corners=corners),
        normal(2, 2, 6),
    )
    case(
        f"interpolate-bilinear-scale-corners{corners}",
        f("interpolate", scale_factor=2.5, mode="bilinear", align_corners=corners),
        normal(1, 2, 3, 4),
    )
    case(
        f"interpolate-bilinear-size-corners{corners}",
        f("interpolate", size=(5, 2), mode="bilinear", align_corners=corners),
        normal(2, 1, 3, 4),
    )
case(
    "interpolate-bilinear-recompute",
    f("interpolate", scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
    normal(1, 1, 3, 4),
)
case("interpolate-nearest-5d", f("interpolate", scale_factor=2), normal(1, 1, 2, 2, 3))
for corners in (False, True):
    case(
        f"interpolate-bicubic-scale-corners{corners}",
        f("interpolate", scale_factor=(2.5, 1.5), mode="bicubic", align_corners=corners),
        normal(1, 2, 3, 4),
    )
    case(
        f"interpolate-bicubic-down-corners{corners}",
        f("interpolate", size=(2, 3), mode="bicubic", align_corners=corners),
        normal(2, 1, 5, 7),
    )
    for mode in ("bilinear", "bicubic"):
        case(
            f"interpolate-{mode}-antialias-corners{corners}",
            f("interpolate", size=(3, 2), mode=mode, antialias=True, align_corners=corners),
            normal(1, 2, 7, 5),
        )
case(
    "interpolate-bicubic-antialias-up",
    f("interpolate", scale_factor=1.6, mode="bicubic", antialias=True),
    normal(1, 1, 3, 4),
)
case("pixel_shuffle", f("pixel_shuffle", 2), normal(2, 8, 2, 3))
case("pixel_shuffle-3d", f("pixel_shuffle", 3), normal(9, 2, 2))
case("pixel_unshuffle", f("pixel_unshuffle", 2), normal(2, 2, 4, 6))
case("bilinear", f("bilinear"), normal(5, 3), normal(5, 2), normal(4, 3, 2), normal(4))
case("bilinear-no-bias-3d", f("bilinear"), normal(2, 5, 3), normal(2, 5, 2), normal(4, 3, 2))
case("adaptive_max_pool2d", f("adaptive_max_pool2d", (2, 3)), normal(2, 2, 5, 7))
case("adaptive_max_pool2d-indices", f("adaptive_max_pool2d", (3, None), return_indices=True), normal(2, 7, 4))
case("adaptive_max_pool1d", f("adaptive_max_pool1d", 3), normal(2, 2, 8))
case("adaptive_max_pool1d-indices", f("adaptive_max_pool1d", 4, return_indices=True), normal(3, 7))
case("adaptive_max_pool3d", f("adaptive_max_pool3d", (2, None, 3)), normal(2, 2, 3, 5, 7))
case("adaptive_max_pool3d-indices", f("adaptive_max_pool3d", 2, return_indices=True), normal(2, 3, 4, 5))
case("affine_grid", f("affine_grid", (2, 3, 4, 5), align_corners=False), normal(2, 2, 3))
case("affine_grid-corners", f("affine_grid", (1, 1, 3, 2), align_corners=True), normal(1, 2, 3))
case("grid_sample", f("grid_sample", align_corners=False), normal(1, 2, 4, 5), uniform(-1.1, 1.1, 1, 3, 3, 2))
case(
    "grid_sample-border-corners",
    f("grid_sample", padding_mode="border", align_corners=True),
    normal(2, 1, 3, 4),
    uniform(-1.2, 1.2, 2, 2, 3, 2),
)
case("grid_sample-nearest", f("grid_sample", mode="nearest", align_corners=False), normal(1, 2, 4, 5),
     uniform(-0.9, 0.9, 1, 3, 3, 2), data=(1,))  # fmt: skip
case("group_norm", f("group_norm", 2), normal(2, 4, 3))
case(
    "group_norm-affine-4d",
    lambda m, x, w, b: m.nn.functional.group_norm(x, 3, w, b, eps=1e-3),
    normal(2, 6, 2, 3),
    normal(6),
    normal(6),
)
for stats in (True, False):

    def instance_norm(m, x, mean, var, w, b, stats=stats):
        out = m.nn.functional.instance_norm(x, mean, var, w, b, use_input_stats=stats, momentum=0.2)
        return out, mean, var

    case(
        f"instance_norm-input-stats{int(stats)}",
        instance_norm,
        normal(2, 3, 4),
        normal(3),
        uniform(0.5, 2.0, 3),
        normal(3),
        normal(3),
        data=(1, 2),
    )
case("instance_norm-no-running-stats-4d", f("instance_norm"), normal(2, 3, 2, 3))
case("rms_norm", f("rms_norm", (4,)), normal(3, 4))
case(
    "rms_norm-weight-eps",
    lambda m, x, w: m.nn.functional.rms_norm(x, (2, 3), w, eps=0.1),
    normal(4, 2, 3),
    normal(2, 3),
)
case("local_response_norm-3d", f("local_response_norm", 3, alpha=0.1), normal(2, 5, 4))
case("local_response_norm-4d", f("local_response_norm", 2, alpha=0.2, beta=0.5, k=2.0), normal(2, 4, 3, 2))
for name, ndim in (("dropout1d", 3), ("dropout2d", 4), ("dropout3d", 5), ("alpha_dropout", 2)):
    case(f"{name}-eval", f(name, 0.5, training=False), normal(*(2, 3, 2, 2, 2)[:ndim]))
    case(f"{name}-p0", f(name, 0.0, training=True), normal(*(2, 3, 2, 2, 2)[:ndim]))
case("feature_alpha_dropout-eval", f("feature_alpha_dropout", 0.3), normal(2, 3, 2))
case("dropout-eval", f("dropout", 0.5, training=False), normal(3, 4))
case("dropout-p0", f("dropout", 0.0), normal(3, 4))

# --- convolution and pooling (issue 25; tests/engine/test_conv.py checks a larger grid) ------------
case("conv1d", f("conv1d", stride=2, padding=1), normal(2, 2, 7), normal(3, 2, 3), normal(3))
case("conv2d", f("conv2d", padding="same", groups=2), normal(1, 4, 5, 4), normal(2, 2, 2, 3))
case("conv3d", f("conv3d", stride=(1, 2, 1), padding=1), normal(1, 2, 3, 4, 3), normal(2, 2, 2, 2, 2), normal(2))
case(
    "conv_transpose3d", f("conv_transpose3d", stride=(2, 1, 1)), normal(1, 2, 2, 2, 3), normal(2, 1, 2, 2, 2), normal(1)
)
case("max_pool3d", f("max_pool3d", 2, 1, ceil_mode=True), normal(1, 2, 3, 3, 4))
case("avg_pool3d", f("avg_pool3d", 2, 1, 1, count_include_pad=False), normal(1, 2, 3, 3, 2))
case("conv_transpose1d", f("conv_transpose1d", stride=2), normal(1, 2, 4), normal(2, 3, 2), normal(3))
case("conv_transpose2d", f("conv_transpose2d", stride=(2, 1), padding=1), normal(1, 2, 3, 4), normal(2, 2, 3, 3))
case("max_pool1d", f("max_pool1d", 3, 2, 1, ceil_mode=True), normal(2, 2, 8))
case("max_pool2d-indices", f("max_pool2d", (2, 3), 2, return_indices=True), normal(1, 2, 5, 7))
case("avg_pool1d", f("avg_pool1d", 3, 2, 1, count_include_pad=False), normal(2, 2, 8))
case("avg_pool2d", f("avg_pool2d", 3, 2, 1, ceil_mode=True, divisor_override=4), normal(1, 2, 6, 5))
UNPOOL_2D = np.array([[[[5, 2], [12, 15]], [[0, 7], [13, 10]]]])  # one position in each 2 x 2 window of 4 x 4
case("max_unpool1d", f("max_unpool1d", 2), normal(2, 2, 3), np.array([[[1, 2, 5], [0, 3, 4]]] * 2))
case("max_unpool2d", f("max_unpool2d", 2), normal(1, 2, 2, 2), UNPOOL_2D)
case("max_unpool2d-output_size", f("max_unpool2d", 2, output_size=(5, 5)), normal(1, 2, 2, 2), UNPOOL_2D)
case("max_unpool3d", f("max_unpool3d", 2, 1), normal(1, 1, 1, 1, 2), np.array([[[[[3, 1]]]]]))
case("lp_pool1d", f("lp_pool1d", 2, 3, 2), uniform(0.5, 2, 2, 2, 7))
case("lp_pool2d", f("lp_pool2d", 1.5, (2, 3), ceil_mode=True), uniform(0.5, 2, 1, 2, 5, 7))
case("lp_pool3d", f("lp_pool3d", 3, 2), uniform(0.5, 2, 1, 2, 3, 4, 4))
case("lp_pool2d-inf", f("lp_pool2d", float("inf"), 2), normal(1, 2, 4, 4))
case("channel_shuffle", f("channel_shuffle", 3), normal(2, 6, 2, 3))
case("adaptive_avg_pool1d", f("adaptive_avg_pool1d", 3), normal(2, 2, 7))
case("adaptive_avg_pool2d", f("adaptive_avg_pool2d", (None, 2)), normal(1, 2, 4, 5))
case("upsample-bilinear", f("upsample", size=(5, 3), mode="bilinear"), normal(1, 2, 3, 4))
case("upsample_bilinear", f("upsample_bilinear", scale_factor=2), normal(1, 2, 3, 2))
case("upsample_nearest", f("upsample_nearest", size=(4, 5)), normal(1, 2, 3, 2))
case("adaptive_avg_pool3d", f("adaptive_avg_pool3d", (3, None, 2)), normal(1, 2, 4, 5, 3))
case("adaptive_avg_pool3d-global", f("adaptive_avg_pool3d", 1), normal(2, 3, 4, 5))
case("unfold", f("unfold", 2, padding=1, stride=2), normal(1, 2, 4, 5))
case("fold", f("fold", (4, 5), 2, stride=(2, 3)), normal(1, 8, 4))


def differentiable(c: Case) -> bool:
    return any(a.dtype.kind == "f" and i not in c.data for i, a in enumerate(c.arrays))


# --- attention ----------------------------------------------------------------------------------------

for causal in (False, True):
    case(
        f"scaled_dot_product_attention-causal{int(causal)}",
        f("scaled_dot_product_attention", is_causal=causal),
        normal(1, 2, 3, 4),
        normal(1, 2, 3, 4),
        normal(1, 2, 3, 4),
    )

# --- ctc_loss (after the others, so that their random inputs stay as they were) ------------------------
# of log_softmax (PyTorch's gradient for raw log_probs is not their derivative: tests/client/test_client_ctc.py)
CTC_PADDED = (np.array([[1, 2, 2], [3, 1, 0]]), np.array([5, 4]), np.array([3, 2]))  # targets, input and target lengths


def ctc(*args, **kwargs):
    return lambda m, x, *tensors: m.nn.functional.ctc_loss(x.log_softmax(-1), *tensors, *args, **kwargs)


for reduction in REDUCTIONS:
    case(f"ctc_loss-padded-{reduction}", ctc(reduction=reduction), normal(5, 2, 4), *CTC_PADDED)
case("ctc_loss-concatenated-tuple-lengths", ctc((5, 3), (3, 1), blank=3), normal(5, 2, 4), np.array([1, 2, 2, 0]))
case("ctc_loss-unbatched", ctc(reduction="sum"), normal(4, 3), np.array([1, 2]), np.array(4), np.array(2))
# the first target needs 4 steps: its loss is infinite, zeroed
case("ctc_loss-zero_infinity", ctc(zero_infinity=True), normal(3, 2, 4), CTC_PADDED[0], np.array([3, 3]), CTC_PADDED[2])

# --- grid_sample's bicubic mode and reflection padding (after the others, as ctc_loss's) ------------------
GRID_MODES = (("bicubic", "zeros", False), ("bicubic", "border", True), ("bilinear", "reflection", False))
for mode, padding, corners in GRID_MODES + (("bicubic", "reflection", True), ("bicubic", "reflection", False)):
    case(f"grid_sample-{mode}-{padding}-corners{corners}", f("grid_sample", mode, padding, corners), normal(2, 2, 3, 4),
         uniform(-2.5, 2.5, 2, 3, 2, 2))  # fmt: skip
case("grid_sample-nearest-reflection", f("grid_sample", "nearest", "reflection", True), normal(1, 2, 4, 5),
     uniform(-2.5, 2.5, 1, 3, 3, 2), data=(1,))  # fmt: skip
