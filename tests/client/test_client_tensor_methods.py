"""The Tensor methods hand-written optimizers and training code call (`exp_avg_sq.mul_(b2).addcmul_(g, g, value=...)`,
`p.addcdiv_(m, denom, value=-lr)`, `x.clamp_min_(eps)`, `w.lerp_(target, 0.01)`, `x.var(dim, correction=0)`...),
against torch on the engine, the embedded client and a live server: values, dtypes and gradients (a table, one row a
method), finite differences in float64 on the engine, torch's in-place rules and errors."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

RANGES = {"any": (-0.9, 0.9), "pos": (0.5, 2.0), "big": (1.5, 3.0), "unit": (0.1, 0.9)}


def _inputs(spec, seed):
    rng = np.random.default_rng(seed)
    return [rng.uniform(*RANGES[kind], size=shape) for shape, kind in spec]


A, P, B, U = ((3, 4), "any"), ((3, 4), "pos"), ((3, 4), "big"), ((3, 4), "unit")
V3, V4, M33, M34, M43 = ((3,), "any"), ((4,), "any"), ((3, 3), "any"), ((3, 4), "any"), ((4, 3), "any")
BATCH1, BATCH2 = ((2, 3, 4), "any"), ((2, 4, 3), "any")

# name -> (function of (module, *inputs), inputs); an in-place method is called on a non-leaf copy (`a * 1`)
CASES = {
    "addcmul_": (lambda m, a, b, c: (a * 1).addcmul_(b, c, value=0.5), [A, A, A]),
    "addcdiv_": (lambda m, a, b, c: (a * 1).addcdiv_(b, c, value=-0.1), [A, A, P]),
    "adam_step": (lambda m, a, g: (a * 1).mul_(0.999).addcmul_(g, g, value=0.001).div_(g.abs() + 1), [P, A]),
    "clamp_min_": (lambda m, a: (a * 1).clamp_min_(0.1), [A]),
    "clamp_max_": (lambda m, a: (a * 1).clamp_max_(0.2), [A]),
    "clip_": (lambda m, a: (a * 1).clip_(-0.5, 0.5), [A]),
    "lerp_": (lambda m, a, b: (a * 1).lerp_(b, 0.3), [A, A]),
    "lerp_tensor_": (lambda m, a, b, w: (a * 1).lerp_(b, w), [A, A, U]),
    "acos_": (lambda m, a: (a * 1).acos_(), [A]),
    "arccos_": (lambda m, a: (a * 1).arccos_(), [A]),
    "asin_": (lambda m, a: (a * 1).asin_(), [A]),
    "arcsin_": (lambda m, a: (a * 1).arcsin_(), [A]),
    "atan_": (lambda m, a: (a * 1).atan_(), [A]),
    "arctan_": (lambda m, a: (a * 1).arctan_(), [A]),
    "acosh_": (lambda m, a: (a * 1).acosh_(), [B]),
    "arccosh_": (lambda m, a: (a * 1).arccosh_(), [B]),
    "asinh_": (lambda m, a: (a * 1).asinh_(), [A]),
    "arcsinh_": (lambda m, a: (a * 1).arcsinh_(), [A]),
    "atanh_": (lambda m, a: (a * 1).atanh_(), [A]),
    "arctanh_": (lambda m, a: (a * 1).arctanh_(), [A]),
    "cosh_": (lambda m, a: (a * 1).cosh_(), [A]),
    "sinh_": (lambda m, a: (a * 1).sinh_(), [A]),
    "tan_": (lambda m, a: (a * 1).tan_(), [A]),
    "rsqrt_": (lambda m, a: (a * 1).rsqrt_(), [P]),
    "reciprocal_": (lambda m, a: (a * 1).reciprocal_(), [P]),
    "square_": (lambda m, a: (a * 1).square_(), [A]),
    "expm1_": (lambda m, a: (a * 1).expm1_(), [A]),
    "log1p_": (lambda m, a: (a * 1).log1p_(), [A]),
    "erf_": (lambda m, a: (a * 1).erf_(), [A]),
    "erfc_": (lambda m, a: (a * 1).erfc_(), [A]),
    "erfinv_": (lambda m, a: (a * 1).erfinv_(), [A]),
    "lgamma_": (lambda m, a: (a * 1).lgamma_(), [P]),
    "digamma_": (lambda m, a: (a * 1).digamma_(), [P]),
    "frac_": (lambda m, a: (a * 1).frac_(), [B]),
    "fix_": (lambda m, a: (a * 1).fix_(), [B]),
    "sgn_": (lambda m, a: (a * 1).sgn_(), [A]),
    "sinc_": (lambda m, a: (a * 1).sinc_(), [A]),
    "logit_": (lambda m, a: (a * 1).logit_(), [U]),
    "logit_eps_": (lambda m, a: (a * 1).logit_(0.2), [U]),
    "nan_to_num_": (lambda m, a: (a.log() * 1).nan_to_num_(neginf=-5.0), [A]),
    "deg2rad_": (lambda m, a: (a * 1).deg2rad_(), [A]),
    "rad2deg_": (lambda m, a: (a * 1).rad2deg_(), [A]),
    "negative_": (lambda m, a: (a * 1).negative_(), [A]),
    "absolute_": (lambda m, a: (a * 1).absolute_(), [A]),
    "xlogy_": (lambda m, a, b: (a * 1).xlogy_(b), [A, P]),
    "hypot_": (lambda m, a, b: (a * 1).hypot_(b), [A, A]),
    "copysign_": (lambda m, a, b: (a * 1).copysign_(b), [A, A]),
    "atan2_": (lambda m, a, b: (a * 1).atan2_(b), [A, P]),
    "arctan2_": (lambda m, a, b: (a * 1).arctan2_(b), [A, P]),
    "float_power_": (lambda m, a, b: (a * 1).float_power_(b), [P, A]),
    "ldexp_": (lambda m, a: (a * 1).ldexp_(m.tensor([1, 2, 3, 0])), [A]),
    "subtract_": (lambda m, a, b: (a * 1).subtract_(b, alpha=2), [A, A]),
    "multiply_": (lambda m, a, b: (a * 1).multiply_(b), [A, A]),
    "divide_": (lambda m, a, b: (a * 1).divide_(b), [A, P]),
    "true_divide_": (lambda m, a, b: (a * 1).true_divide_(b), [A, P]),
    "eq_": (lambda m, a: (a * 1).eq_(a[0]), [A]),
    "ne_": (lambda m, a: (a * 1).ne_(a[0]), [A]),
    "lt_": (lambda m, a, b: (a * 1).lt_(b), [A, A]),
    "le_": (lambda m, a, b: (a * 1).le_(b), [A, A]),
    "gt_": (lambda m, a: (a * 1).gt_(0.0), [A]),
    "ge_": (lambda m, a: (a * 1).ge_(0.0), [A]),
    "greater_": (lambda m, a: (a * 1).greater_(0.1), [A]),
    "greater_equal_": (lambda m, a: (a * 1).greater_equal_(0.1), [A]),
    "less_": (lambda m, a: (a * 1).less_(0.1), [A]),
    "less_equal_": (lambda m, a: (a * 1).less_equal_(0.1), [A]),
    "not_equal_": (lambda m, a: (a * 1).not_equal_(a[1]), [A]),
    "logical_not_": (lambda m, a: (a * 1).gt(0).logical_not_(), [A]),
    "logical_and_": (lambda m, a, b: (a * 1).logical_and_(b.gt(0)), [A, A]),
    "logical_or_": (lambda m, a, b: (a.gt(0)).logical_or_(b.gt(0)), [A, A]),
    "logical_xor_": (lambda m, a, b: (a * 1).logical_xor_(b), [A, A]),
    "t_": (lambda m, a: (a * 1).t_(), [A]),
    "transpose_": (lambda m, a: (a * 1).transpose_(0, 1), [A]),
    "swapaxes_": (lambda m, a: (a * 1).swapaxes_(0, 1), [A]),
    "swapdims_": (lambda m, a: (a * 1).swapdims_(1, 0), [A]),
    "squeeze_": (lambda m, a: (a.reshape(3, 1, 4) * 1).squeeze_(1), [A]),
    "unsqueeze_": (lambda m, a: (a * 1).unsqueeze_(0), [A]),
    "addmm_": (lambda m, a, b, c: (a * 1).addmm_(b, c, beta=0.5, alpha=2), [M34, M33, M34]),
    "addmv_": (lambda m, a, b, c: (a * 1).addmv_(b, c, alpha=-1), [V3, M34, V4]),
    "addr_": (lambda m, a, b, c: (a * 1).addr_(b, c, beta=2), [M34, V3, V4]),
    "addbmm_": (lambda m, a, b, c: (a * 1).addbmm_(b, c), [M33, BATCH1, BATCH2]),
    "baddbmm_": (lambda m, a, b, c: (a * 1).baddbmm_(b, c, alpha=0.5), [((2, 3, 3), "any"), BATCH1, BATCH2]),
    "cumprod_": (lambda m, a: (a * 1).cumprod_(1), [P]),
    "polygamma_": (lambda m, a: (a * 1).polygamma_(1), [P]),
    "mvlgamma": (lambda m, a: m.mvlgamma(a, 3), [B]),
    "mvlgamma_poles": (lambda m, a: m.tensor([0.5, 2.0, 0.2, -0.3]).mvlgamma(2) * a.sum(), [V3]),
    "mvlgamma_": (lambda m, a: (a * 1).mvlgamma_(2), [B]),
    "renorm_": (lambda m, a: (a * 1).renorm_(2, 0, 1.0), [A]),
    "var_correction": (lambda m, a: a.var(1, correction=0), [A]),
    "var_correction_2": (lambda m, a: a.var(correction=2), [A]),
    "var_unbiased": (lambda m, a: a.var(0, unbiased=False, keepdim=True), [A]),
    "var_positional": (lambda m, a: a.var(1, True, True), [A]),
    "std_correction": (lambda m, a: a.std(dim=(0, 1), correction=3), [A]),
    "var_mean": (lambda m, a: m.var_mean(a, 1, correction=0), [A]),
    "std_mean": (lambda m, a: m.std_mean(a, dim=0, correction=2, keepdim=True), [A]),
    "sgn": (lambda m, a: a.sgn(), [A]),
    "signbit": (lambda m, a: m.signbit(a), [A]),
    "positive": (lambda m, a: a.positive(), [A]),
    "fix": (lambda m, a: m.fix(a * 3), [A]),
    "erfc": (lambda m, a: m.erfc(a), [A]),
    "sinc": (lambda m, a: a.sinc(), [A]),
    "logit": (lambda m, a: m.logit(a, eps=0.2), [U]),
    "logaddexp2": (lambda m, a, b: m.logaddexp2(a, b), [A, A]),
    "float_power": (lambda m, a: m.float_power(a, 3), [A]),
    "fmax": (lambda m, a, b: m.fmax(a, b), [A, A]),
    "fmin": (lambda m, a, b: a.fmin(b), [A, A]),
    "copysign": (lambda m, a, b: m.copysign(a, b), [A, A]),
    "copysign_number": (lambda m, a: a.copysign(-1.0), [A]),
    "ldexp": (lambda m, a: m.ldexp(a, m.tensor([2, 0, 3, 1])), [A]),
    "hardshrink": (lambda m, a: a.hardshrink(0.3), [A]),
    "prelu": (lambda m, a, w: m.prelu(a.reshape(1, 3, 4), w), [A, V3]),
    "prelu_method": (lambda m, a, w: a.prelu(w), [A, ((1,), "any")]),
    "renorm": (lambda m, a: m.renorm(a, 1, 1, 0.5), [A]),
    "vdot": (lambda m, a, b: m.vdot(a, b), [V4, V4]),
    "addcmul": (lambda m, a, b, c: m.addcmul(a, b, c, value=2), [A, A, A]),
    "addcdiv": (lambda m, a, b, c: a.addcdiv(b, c), [A, A, P]),
    "addr": (lambda m, a, b, c: m.addr(a, b, c, alpha=3), [M34, V3, V4]),
    "addbmm": (lambda m, a, b, c: m.addbmm(a, b, c, beta=0.5), [M33, BATCH1, BATCH2]),
    "aminmax": (lambda m, a: tuple(m.aminmax(a, dim=1)), [A]),
    "aminmax_all": (lambda m, a: tuple(a.aminmax()), [A]),
    "msort": (lambda m, a: m.msort(a), [A]),
    "nanmedian": (lambda m, a: tuple(m.nanmedian(a.masked_fill(a > 0.5, float("nan")), 1)), [A]),
    "nanmedian_all": (lambda m, a: a.masked_fill(a > 0.5, float("nan")).nanmedian(), [A]),
    "nanquantile": (lambda m, a: m.nanquantile(a.masked_fill(a > 0.5, float("nan")), 0.3, 1, keepdim=True), [A]),
    "nanquantile_qs": (
        lambda m, a: a.masked_fill(a < -0.6, float("nan")).nanquantile(m.tensor([0.2, 0.9], dtype=m.float64), 0),
        [A],
    ),
    "nanquantile_nearest": (
        lambda m, a: m.nanquantile(a.masked_fill(a > 0.5, float("nan")), 0.4, interpolation="nearest"),
        [A],
    ),
    "diagflat": (lambda m, a: m.diagflat(a, 1), [V3]),
    "cov": (lambda m, a: m.cov(a, correction=0), [A]),
    "cov_vector": (lambda m, a: a.cov(), [V4]),
    "corrcoef": (lambda m, a: m.corrcoef(a), [A]),
    "hsplit": (lambda m, a: m.hsplit(a, 2), [A]),
    "vsplit": (lambda m, a: a.vsplit([1]), [A]),
    "dsplit": (lambda m, a: m.dsplit(a.reshape(1, 3, 4), 2), [A]),
    "split_with_sizes": (lambda m, a: a.split_with_sizes([1, 3], 1), [A]),
    "sum_to_size": (lambda m, a: a.sum_to_size(1, 4), [A]),
    "slice_scatter": (lambda m, a, b: m.slice_scatter(a, b, 1, 0, 4, 2), [A, ((3, 2), "any")]),
    "select_scatter": (lambda m, a, b: a.select_scatter(b, 0, 1), [A, V4]),
    "diagonal_scatter": (lambda m, a, b: m.diagonal_scatter(a, b, 1), [A, V3]),
    "diagonal_scatter_dims": (lambda m, a, b: a.reshape(2, 3, 2).diagonal_scatter(b, -1, 2, 0), [A, ((3, 1), "any")]),
    "conj": (lambda m, a: a.conj().resolve_conj().resolve_neg(), [A]),
    "isreal": (lambda m, a: m.isreal(a), [A]),
}


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _run(m, name, arrays, grad=True):
    fn, _ = CASES[name]
    leaves = [m.tensor(a, requires_grad=True) for a in arrays]
    outs = _outputs(fn(m, *leaves))
    differentiable = [o for o in outs if o.requires_grad]
    grads = []
    if differentiable and grad:
        loss = sum((o * m.tensor(np.linspace(-1, 2, o.numel()).reshape(o.shape))).sum() for o in differentiable)
        grads = m.autograd.grad(loss, leaves, allow_unused=True)
    values = [(np.asarray(o.detach().numpy()), str(o.dtype).replace("torch.", "")) for o in outs]
    return values, [None if g is None else np.asarray((g + 0).tolist()) for g in grads]  # (+ 0: torch's ZeroTensor)


@pytest.mark.parametrize("name", sorted(CASES))
def test_method_is_torchs(torch_like, name):
    arrays = _inputs(CASES[name][1], seed=len(name))
    try:
        want = _run(torch, name, arrays)
    except NotImplementedError:  # torch has no derivative for acosh_ (the engine has): values only
        want = _run(torch, name, arrays, grad=False)
    got = _run(torch_like, name, arrays, grad=bool(want[1]))
    assert [dtype for _, dtype in got[0]] == [dtype for _, dtype in want[0]]
    for (g, _), (w, _) in zip(got[0], want[0]):
        np.testing.assert_allclose(g, w, rtol=1e-7, atol=1e-10)
    assert len(got[1]) == len(want[1])
    for g, w in zip(*got[1:], *want[1:]):
        if w is None or g is None:  # a leaf the output does not reach: torch's None or zeros
            assert w is g or np.all((w if g is None else g) == 0)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-7, atol=1e-10)


# not smooth, or (logical_*_) torch's: a non-differentiable in-place op keeps the Variable's grad_fn
NOT_SMOOTH = (
    "mvlgamma_poles",
    "logical_not_",
    "logical_and_",
    "logical_or_",
    "logical_xor_",
    "sgn",
    "signbit",
    "fix",
    "isreal",
    "frac_",
    "fix_",
    "sgn_",
    "hardshrink",
)
COMPARING = ("eq_", "ne_", "lt_", "le_", "gt_", "ge_", "greater_", "greater_equal_", "less_", "less_equal_")


@pytest.mark.parametrize("name", sorted(set(CASES) - set(NOT_SMOOTH) - set(COMPARING) - {"not_equal_"}))
def test_method_gradients_by_finite_differences(name):
    import engine

    fn, spec = CASES[name]
    leaves = [engine.tensor(a, requires_grad=True) for a in _inputs(spec, seed=len(name))]
    if not any(o.requires_grad for o in _outputs(fn(engine, *leaves))):
        return
    assert engine.autograd.gradcheck(lambda *xs: fn(engine, *xs), leaves, atol=1e-5)


@pytest.mark.parametrize(
    "call, dtype",
    [
        (lambda m: m.tensor([1, 2, 3]).sqrt_(), "int64"),
        (lambda m: m.tensor([1, 2, 3]).float_power_(2), "int64"),
        (lambda m: m.tensor([1.0, 2.0]).float_power_(2), "float32"),
        (lambda m: m.tensor([1, 2]).addcdiv_(m.tensor([1, 2]), m.tensor([3, 4])), "int64"),
        (lambda m: m.tensor([True, False]).add_(1), "bool"),
        (lambda m: m.ones(2, requires_grad=True).addcmul_(m.ones(2), m.ones(2)), "float32"),
        (lambda m: m.ones(2, 3, requires_grad=True).t_(), "float32"),
        (lambda m: m.ones(2, requires_grad=True).apply_(lambda v: v), "float32"),
        (lambda m: m.ones(3).lerp_(m.ones(2, 3), 0.5), "float32"),
        (lambda m: m.ones(2).is_nonzero(), "float32"),
        (lambda m: m.ones(4).hsplit(3), "float32"),
        (lambda m: m.tensor([1, 2]).nanquantile(0.5), "int64"),
        (lambda m: m.tensor([0.5, 2.0]).mvlgamma(0), "float32"),
        (lambda m: m.ones(3).nanquantile(1.5), "float32"),
    ],
)
def test_in_place_refusals_are_torchs(torch_like, call, dtype):
    with pytest.raises(RuntimeError) as want:
        call(torch)
    with pytest.raises(RuntimeError) as got:
        call(torch_like)
    assert str(got.value) == str(want.value)


def test_in_place_keeps_the_object_bumps_the_version_and_casts(torch_like):
    for m in (torch_like, torch):
        x = m.tensor([1.0, -2.0, 3.0])
        before = x._version
        assert x.clamp_min_(0.5) is x and x._version == before + 1
        ints = m.tensor([1, 5, 3])
        ints.lt_(m.tensor([2, 2, 4]))  # a bool result cast back to int64
        assert ints.tolist() == [1, 0, 1] and str(ints.dtype).endswith("int64")
        w = m.ones(2, 3, requires_grad=True)
        with m.no_grad():
            w.t_().mul_(2)
        assert w.is_leaf and w.requires_grad and tuple(w.shape) == (3, 2)


def test_gradient_through_a_comparison_in_place_is_zero(torch_like):
    results = []
    for m in (torch_like, torch):
        a = m.tensor([0.5, -1.0, 2.0], requires_grad=True)
        h = a * 3
        h.gt_(0)
        (g,) = m.autograd.grad((h * m.tensor([1.0, 2.0, 3.0])).sum(), [a])
        results.append((h.tolist(), g.tolist()))
    assert results[0] == results[1]


def test_properties_and_predicates(torch_like):
    for m in (torch_like, torch):
        x = m.tensor([[1.0, 0.0]])
        assert not x.is_complex() and x.is_cpu and not x.is_conj() and not x.is_neg() and not x.is_inference()
        assert x.is_signed() and m.tensor([1]).is_signed() and not m.tensor([True]).is_signed()
        assert x.is_same_size(m.zeros(1, 2)) and not x.is_same_size(m.zeros(2))
        assert m.tensor([2.0]).is_nonzero() and not m.tensor([0.0]).is_nonzero()
        assert m.is_nonzero(m.tensor([1])) and m.is_same_size(x, x) and m.is_signed(x) and not m.is_conj(x)
        assert not m.is_neg(x) and not m.is_inference(x)
        assert x.get_device() == -1 and x.output_nr == 0 and not x.is_pinned()
        assert isinstance(x.data_ptr(), int) and x.data_ptr() != 0
        assert x.conj() is x and x.positive() is x
        y = m.tensor([1.0, 2.0, 3.0])
        assert y.apply_(lambda v: v * v).tolist() == [1.0, 4.0, 9.0]
        assert y.map_(m.tensor([1.0, 1.0, 2.0]), lambda a, b: a - b).tolist() == [0.0, 3.0, 7.0]
        assert m.bincount(m.tensor([0, 2, 2, 5])).tolist() == [1, 0, 2, 0, 0, 1]
        weighted = m.bincount(m.tensor([0, 2, 2]), weights=m.tensor([0.5, 1.0, 2.0]), minlength=4)
        assert weighted.tolist() == [0.5, 0.0, 3.0, 0.0] and str(weighted.dtype).endswith("float32")
        assert m.gcd(m.tensor([12, -18, 0, 7]), m.tensor([8, 12, 5, 0])).tolist() == [4, 6, 5, 7]
        assert m.lcm(m.tensor([4, -6, 0]), m.tensor([6, 4, 3])).tolist() == [12, 12, 0]
        low, high = m.aminmax(m.tensor([[3, 1], [2, 5]]))
        assert (low.item(), high.item()) == (1, 5)
        assert m.tensor([0.0, -0.0, -1.0]).signbit().tolist() == [False, True, True]


def test_module_paths_and_total_norm(torch_like):
    results = []
    for m in (torch_like, torch):
        m.manual_seed(0)
        net = m.nn.Sequential(m.nn.Linear(2, 3), m.nn.Sequential(m.nn.BatchNorm1d(3)))
        assert net.get_submodule("1.0") is net[1][0] and net.get_submodule("") is net
        assert net.get_parameter("0.bias") is net[0].bias
        assert net.get_buffer("1.0.running_var") is net[1][0].running_var
        errors = []
        for method, target in [
            (net.get_submodule, "0.weight"),
            (net.get_submodule, "2"),
            (net.get_parameter, "1.0.running_mean"),
            (net.get_buffer, "0.weight"),
            (net.get_buffer, "0.nothing"),
        ]:
            with pytest.raises(AttributeError) as error:
                method(target)
            errors.append(str(error.value))
        p = m.tensor([3.0, 4.0], requires_grad=True)
        q = m.tensor([12.0], requires_grad=True)
        ((p * p).sum() / 2 + (q * q).sum() / 2).backward()
        total = m.nn.utils.get_total_norm([p.grad, q.grad])
        m.nn.utils.clip_grads_with_norm_([p, q], 6.5, total)
        results.append((errors, total.item(), p.grad.tolist(), q.grad.tolist()))
    assert results[0][0] == results[1][0]
    np.testing.assert_allclose(np.hstack(results[0][1:]), np.hstack(results[1][1:]), rtol=1e-6)


# What torch.Tensor has and a Variable does not, and why: a new torch method shows up here until it is added or listed.
NOT_PROVIDED = {
    "complex numbers (the engine is real-valued)": "angle imag real cdouble cfloat chalf conj_physical conj_physical_ "
    "H mH adjoint",
    "sparse layouts": "ccol_indices col_indices crow_indices row_indices coalesce is_coalesced dense_dim sparse_dim "
    "sparse_mask sparse_resize_ sparse_resize_and_clear_ resize_as_sparse_ indices values smm sspaddmm to_dense "
    "to_sparse to_sparse_bsc to_sparse_bsr to_sparse_coo to_sparse_csc to_sparse_csr is_sparse is_sparse_csr layout",
    "quantized tensors": "dequantize int_repr q_per_channel_axis q_per_channel_scales q_per_channel_zero_points "
    "q_scale q_zero_point qscheme is_quantized",
    "other devices and backends": "ipu mtia xpu is_ipu is_maia is_meta is_mkldnn is_mps is_mtia is_vulkan is_xla "
    "is_xpu to_mkldnn record_stream",
    "storage, strides and shared memory": "as_strided_ as_strided_scatter storage "
    "storage_type untyped_storage set_ is_set_to share_memory_ is_shared resize resize_ resize_as resize_as_ "
    "const_data_ptr dim_order new_empty_strided nonzero_static narrow_copy unsafe_chunk unsafe_split "
    "unsafe_split_with_sizes slice_inverse",
    "nested tensors, named tensors, subclasses, distributed": "is_nested to_padded_tensor name as_subclass "
    "is_distributed module_load hash_tensor grad_dtype",
    "linear algebra (helper linalg) and removed solvers": "svd qr lstsq eig symeig solve lu lu_solve geqrf orgqr "
    "ormqr pinverse cholesky_inverse cholesky_solve triangular_solve",
    "other helpers' ops (tensorfill)": "bitwise_left_shift bitwise_left_shift_ bitwise_right_shift "
    "bitwise_right_shift_ scatter_reduce scatter_reduce_ histc histogram cummax cummin heaviside heaviside_",
    "special functions with no composition here": "i0 i0_ igamma igamma_ igammac igammac_ nextafter nextafter_ frexp",
    "random fills not provided": "cauchy_ geometric_ log_normal_",
    "spectral": "stft istft",
    "legacy": "new reinforce index put put_ index_reduce index_reduce_ map2_",
    "dtypes the engine does not compute (uint8, int8, int16, bfloat16)": "byte char short bfloat16",
}


def test_every_public_tensor_method_is_provided_or_listed():
    import engine

    listed = {name for names in NOT_PROVIDED.values() for name in names.split()}
    missing = [
        n for n in dir(torch.Tensor) if not n.startswith("_") and n not in listed and not hasattr(engine.Variable, n)
    ]
    assert missing == []


def test_an_optimizer_step_in_place_under_no_grad(torch_like):
    results = []
    for m in (torch_like, torch):
        p = m.tensor([1.0, -2.0, 0.5], requires_grad=True)
        (p * p).sum().backward()
        exp_avg, exp_avg_sq = m.zeros(3), m.zeros(3)
        with m.no_grad():
            for _ in range(3):
                exp_avg.lerp_(p.grad, 0.1)
                exp_avg_sq.mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
                p.addcdiv_(exp_avg, exp_avg_sq.sqrt().clamp_min_(1e-8), value=-0.01)
        assert p.is_leaf and p.requires_grad
        results.append(p.tolist() + exp_avg.tolist() + exp_avg_sq.tolist())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)
