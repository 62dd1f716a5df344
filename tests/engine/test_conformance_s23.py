"""Programs a user writes from the PyTorch tutorials and docs, run on the engine and on PyTorch 2.13 (the
oracle): where session 23 found them diverging (each test names the program and what PyTorch does), and the
new gradients by finite differences in float64."""

from __future__ import annotations

import numpy as np
import pytest

import engine
import engine.api


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def _rng(seed=0):
    return np.random.default_rng(seed)


def _leaves(torch, *arrays):
    return [torch.tensor(a, requires_grad=True) for a in arrays]


# --- softmax(dtype=): attention code's `torch.softmax(scores, -1, dtype=torch.float32)` --------------------


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_dtype_keyword_casts_first_as_torch(name, oracle):
    x = _rng().standard_normal((3, 4)).astype(np.float32)
    got, want = [], []
    for torch, out in ((engine, got), (oracle, want)):
        (v,) = _leaves(torch, x)
        a = getattr(torch, name)(v, 1, dtype=torch.float64)
        b = getattr(v, name)(dim=0, dtype=torch.float64)
        (a * a).sum().backward()
        b.sum().backward()
        out.append(
            (a.detach().numpy(), b.detach().numpy(), str(a.dtype), str(b.dtype), a.grad_fn.name(), v.grad.numpy())
        )
    for g, w in zip(got[0], want[0]):
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
        else:
            assert g == w


# --- load_state_dict's result prints as PyTorch's ------------------------------------------------------


def test_load_state_dict_result_prints_as_torch(oracle):
    shown = []
    for torch in (engine, oracle):
        a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
        matched = a.load_state_dict(b.state_dict())
        partial = a.load_state_dict({"weight": b.weight.detach()}, strict=False)
        shown.append((repr(matched), str(matched), repr(partial), partial.missing_keys, list(matched)))
    assert shown[0] == shown[1]
    assert shown[0][0] == "<All keys matched successfully>"


# --- bmm's node, inner of n-d tensors, tile(int) ------------------------------------------------------------


def test_bmm_node_is_bmm_backward_as_torch(oracle):
    names = []
    for torch in (engine, oracle):
        a, b = _leaves(torch, np.ones((2, 3, 4)), np.ones((2, 4, 5)))
        out = [torch.bmm(a, b), a.bmm(b.detach()), torch.bmm(a.detach(), b)]
        names.append([o.grad_fn.name() for o in out] + [type(out[0].grad_fn).__name__])
    assert names[0] == names[1] == ["BmmBackward0"] * 4


INNER_SHAPES = [((4,), (4,)), ((3, 4), (4,)), ((4,), (5, 4)), ((2, 3, 4), (5, 4)), ((), (3,)), ((3, 2), ())]


@pytest.mark.parametrize(("sa", "sb"), INNER_SHAPES)
def test_inner_of_any_ranks_as_torch(sa, sb, oracle):
    r = _rng(1)
    arrays = r.standard_normal(sa), r.standard_normal(sb)
    runs = []
    for torch in (engine, oracle):
        a, b = _leaves(torch, *arrays)
        out = torch.inner(a, b)
        (out * out).sum().backward()
        runs.append((out.detach().numpy(), a.grad.numpy(), b.grad.numpy(), out.grad_fn.name(), str(out.dtype)))
    for g, w in zip(*runs):
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g, w, rtol=1e-10)
        else:
            assert g == w
    a, b = (engine.tensor(v, requires_grad=True) for v in arrays)
    assert engine.autograd.gradcheck(engine.inner, (a, b)) and engine.autograd.gradgradcheck(engine.inner, (a, b))


def test_inner_refusal_and_integers_as_torch(oracle):
    for torch in (engine, oracle):
        with pytest.raises(RuntimeError, match=r"inner\(\) the last dimension must match .* \[3, 4\] and \[5\]"):
            torch.inner(torch.ones(3, 4), torch.ones(5))
        out = torch.inner(torch.arange(4), torch.arange(4))
        assert out.item() == 14 and str(out.dtype) == "torch.int64"


def test_tile_takes_sizes_as_repeat_does(oracle):
    shapes = []
    for torch in (engine, oracle):
        m = torch.arange(12.0).reshape(3, 4)
        shapes.append([tuple(t.shape) for t in (m.tile(2), m.tile(2, 3), m.tile((2,)), torch.tile(m, (2, 1, 1)))])
        np.testing.assert_array_equal(m.tile(2).numpy(), np.tile(np.arange(12.0).reshape(3, 4), 2))
    assert shapes[0] == shapes[1] == [(3, 8), (6, 12), (3, 8), (2, 3, 4)]


# --- autograd.grad's refusals word for word as PyTorch's -------------------------------------------------


def _grad_messages(torch):
    x, z = torch.ones(3, requires_grad=True), torch.ones(3)
    messages = []
    for call in (
        lambda: torch.autograd.grad((x * 2).sum(), z),
        lambda: torch.autograd.grad(z.sum(), x),
        lambda: torch.autograd.grad((x * 2).sum(), [x, torch.ones(2, requires_grad=True)]),
    ):
        with pytest.raises(RuntimeError) as caught:
            call()
        messages.append(str(caught.value))
    return messages


def test_grad_refusals_are_torch_messages(oracle):
    assert _grad_messages(engine) == _grad_messages(oracle)


# --- shape errors are PyTorch's RuntimeError (`except RuntimeError` around a model catches them) ------------


SHAPE_MISTAKES = {
    "mm of 2x3 and 4x5": lambda torch: torch.ones(2, 3) @ torch.ones(4, 5),
    "Linear(3, 2) of a [4, 5] batch": lambda torch: torch.nn.Linear(3, 2)(torch.ones(4, 5)),
    "add of [2, 3] and [4, 5]": lambda torch: torch.ones(2, 3) + torch.ones(4, 5),
    "cat of [2, 3] and [2, 4] along 0": lambda torch: torch.cat([torch.ones(2, 3), torch.ones(2, 4)]),
    "stack of [2] and [3]": lambda torch: torch.stack([torch.ones(2), torch.ones(3)]),
    "view of 6 elements as 4": lambda torch: torch.ones(2, 3).view(4),
    "Conv2d(3, 4, 3) of 2 channels": lambda torch: torch.nn.Conv2d(3, 4, 3)(torch.ones(1, 2, 5, 5)),
    "item of 2 elements": lambda torch: torch.ones(2).item(),
}


@pytest.mark.parametrize("what", sorted(SHAPE_MISTAKES))
def test_shape_mistakes_raise_runtime_error_as_torch(what, oracle):
    for torch in (oracle, engine):
        with pytest.raises(RuntimeError):
            SHAPE_MISTAKES[what](torch)


def test_shape_refusals_keep_the_rule_words_and_stay_value_errors():
    with pytest.raises(
        engine.api.ShapeError, match=r"^mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)$"
    ) as caught:
        engine.ones(2, 3) @ engine.ones(4, 5)
    assert isinstance(caught.value, ValueError)  # (as a graph's refusal is)
    for torch in (engine, pytest.importorskip("torch")):  # PyTorch's words for a view of the wrong size
        with pytest.raises(RuntimeError, match=r"^shape '\[-1, 4\]' is invalid for input of size 6$"):
            torch.ones(2, 3).view(-1, 4)
        with pytest.raises(RuntimeError, match="^only one dimension can be inferred$"):
            torch.ones(2, 3).reshape(-1, -1)
    with pytest.raises(ValueError, match="a Tensor with 2 elements cannot be converted to Scalar"):
        engine.ones(2).item()


# --- `print(x.shape)`: the quickstart's "Shape of X [N, C, H, W]: torch.Size([64, 1, 28, 28])" ----------------


def test_shape_is_a_torch_size_as_printed_by_torch(oracle):
    shown = []
    for torch in (engine, oracle):
        x = torch.ones(64, 1, 28, 28)
        s = x.shape
        shown.append(
            (
                f"Shape of X [N, C, H, W]: {s}",
                str(x.size()),
                repr(s[1:]),
                str(x.mean((2, 3)).shape),
                s == (64, 1, 28, 28),
                s[0],
                x.size(1),
                s.numel(),
                isinstance(s, tuple),
                type(s[-1]).__name__,
                hash(s) == hash((64, 1, 28, 28)),
            )
        )
    assert shown[0] == shown[1]
    assert shown[0][0] == "Shape of X [N, C, H, W]: torch.Size([64, 1, 28, 28])"


# --- torch.func's aux comes back at the caller's level ----------------------------------------------------------


def _aux_runs(torch, requires_grad):
    F = torch.func
    x = torch.tensor(np.linspace(-1.0, 1.0, 4), requires_grad=requires_grad)

    def f(t):
        y = t.sin()
        return y.sum(), {"y": y, "c": t.cos()}

    _, aux = F.grad(f, has_aux=True)(x)
    _, (_, aux2) = F.grad_and_value(f, has_aux=True)(x)
    _, aux3 = F.jacrev(lambda t: (t.exp(), t.sum()), has_aux=True)(x)
    *_, aux4 = F.vjp(lambda t: (t.exp(), t * 2), x, has_aux=True)
    *_, aux5 = F.jvp(lambda t: (t.exp(), t * 2), (x,), (torch.ones_like(x),), has_aux=True)
    auxes = [aux["y"], aux["c"], aux2["y"], aux3, aux4, aux5]
    return [(a.requires_grad, a.detach().numpy().round(12).tolist()) for a in auxes]


@pytest.mark.parametrize("requires_grad", [False, True])
def test_func_aux_requires_grad_as_torch(requires_grad, oracle):
    got, want = _aux_runs(engine, requires_grad), _aux_runs(oracle, requires_grad)
    assert got == want
    assert all(rg == requires_grad for rg, _ in got)


def test_function_backward_with_too_few_gradients_is_refused_as_torch(oracle):
    messages = []
    for torch in (engine, oracle):

        class Bad(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                return x * y

            @staticmethod
            def backward(ctx, g):
                return g

        x = torch.ones(3, requires_grad=True)
        with pytest.raises(RuntimeError) as caught:
            Bad.apply(x, x).sum().backward()
        messages.append(str(caught.value))
    assert (
        messages[0]
        == messages[1]
        == "function BadBackward returned an incorrect number of gradients (expected 2, got 1)"
    )


# --- torch.* functions PyTorch runs as one node name their result's node as PyTorch's ------------------------

COMPOSED_CALLS = {
    "addmm": lambda t, m: t.addmm(t.zeros(3, 5), m, t.ones(4, 5)),
    "addmv": lambda t, m: t.addmv(t.zeros(3), m, t.ones(4)),
    "addr": lambda t, m: t.addr(t.zeros(3, 4), m[:, 0], t.ones(4)),
    "baddbmm": lambda t, m: t.baddbmm(t.zeros(2, 3, 5), m.expand(2, 3, 4), t.ones(2, 4, 5), beta=0.5),
    "addbmm": lambda t, m: t.addbmm(t.zeros(3, 5), m.expand(2, 3, 4), t.ones(2, 4, 5)),
    "addcmul": lambda t, m: m.addcmul(m, m, value=0.5),
    "addcdiv": lambda t, m: t.addcdiv(m, m, m + 2),
    "rsqrt": lambda t, m: (m + 2).rsqrt(),
    "reciprocal": lambda t, m: t.reciprocal(m + 2),
    "square": lambda t, m: t.square(m),
    "repeat": lambda t, m: m.repeat(2, 1),
    "tile": lambda t, m: m.tile(2),
    "flip": lambda t, m: m.flip(0, 1),
    "flipud": lambda t, m: t.flipud(m),
    "roll": lambda t, m: m.roll(1, 0),
    "rot90": lambda t, m: m.rot90(),
    "trace": lambda t, m: m.trace(),
    "frac": lambda t, m: m.frac(),
    "logit": lambda t, m: m.sigmoid().logit(),
    "hypot": lambda t, m: t.hypot(m, m + 1),
    "logaddexp": lambda t, m: t.logaddexp(m, m * 2),
    "take": lambda t, m: m.take(t.tensor([0, 5])),
    "sinc": lambda t, m: m.sinc(),
    "dist": lambda t, m: t.dist(m, m * 2, 3),
    "rad2deg": lambda t, m: m.rad2deg(),
    "nan_to_num": lambda t, m: m.nan_to_num(),
    "kthvalue": lambda t, m: m.kthvalue(2, 1)[0],
    "mode": lambda t, m: m.mode(0)[0],
    "topk": lambda t, m: m.topk(2)[0],
    "sort": lambda t, m: t.sort(m, 0, descending=True).values,
    "cummax": lambda t, m: m.cummax(0)[0],
    "masked_scatter": lambda t, m: m.masked_scatter(m > 0, m),
    "clamp_min": lambda t, m: m.clamp_min(0),
    "clamp_min_": lambda t, m: (m * 1).clamp_min_(0),
}


def _composed_run(torch, call):
    m = torch.tensor(np.linspace(-1.5, 2.0, 12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    out = call(torch, m)
    (out * out).sum().backward()
    return out.grad_fn.name(), type(out.grad_fn).__name__, out.detach().numpy(), m.grad.numpy()


@pytest.mark.parametrize("name", sorted(COMPOSED_CALLS))
def test_composed_function_node_names_as_torch(name, oracle):
    got, want = (_composed_run(t, COMPOSED_CALLS[name]) for t in (engine, oracle))
    assert got[:2] == want[:2] == (want[0], want[0])
    for g, w in zip(got[2:], want[2:]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_sort_indices_have_no_node_as_torch():
    values, indices = engine.ones(3, 4, requires_grad=True).sort()
    assert values.grad_fn.name() == "SortBackward0" and indices.grad_fn is None and not indices.requires_grad


DIMENSION_MISTAKES = {
    "sum(5)": lambda t: t.ones(2, 3).sum(5),
    "softmax(3)": lambda t: t.ones(2, 3).softmax(3),
    "transpose(0, 4)": lambda t: t.ones(2, 3).transpose(0, 4),
    "squeeze(4)": lambda t: t.ones(2, 3).squeeze(4),
    "unsqueeze(5)": lambda t: t.ones(2, 3).unsqueeze(5),
    "stack(dim=4)": lambda t: t.stack([t.ones(2, 3)] * 2, 4),
    "flatten(3)": lambda t: t.ones(2, 3).flatten(3),
    "mean(-3)": lambda t: t.ones(2, 3).mean(-3),
}


@pytest.mark.parametrize("what", sorted(DIMENSION_MISTAKES))
def test_dimension_out_of_range_is_torch_index_error(what, oracle):
    messages = []
    for torch in (engine, oracle):
        with pytest.raises(IndexError, match=r"^Dimension out of range \(expected to be in range of") as caught:
            DIMENSION_MISTAKES[what](torch)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]


def test_flatten_of_reversed_dims_is_refused_as_torch(oracle):
    for torch in (engine, oracle):
        with pytest.raises(RuntimeError, match=r"^flatten\(\) has invalid args: start_dim cannot come after end_dim$"):
            torch.ones(2, 3, 4).flatten(2, 1)
        assert tuple(torch.ones(2, 3, 4).flatten(-2).shape) == (2, 12)


@pytest.mark.parametrize(
    ("a", "b"), [((2, 3), (4, 5)), ((3,), (4,)), ((5, 2, 3), (4, 1, 3))], ids=["2-d", "1-d", "3-d"]
)
def test_broadcast_and_expand_refusals_are_torch_words(a, b, oracle):
    with pytest.raises(RuntimeError) as want:
        oracle.ones(*a) + oracle.ones(*b)
    with pytest.raises(RuntimeError) as got:
        engine.ones(*a) + engine.ones(*b)
    assert str(got.value) == str(want.value)
    messages = []
    for torch in (engine, oracle):
        with pytest.raises(RuntimeError) as caught:
            torch.ones(*a).expand(*b)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]


def test_data_cpu_numpy_as_older_tutorials_write_it(oracle):
    got = []
    for torch in (engine, oracle):
        m = torch.nn.Linear(3, 2)
        m.weight.data = torch.ones(2, 3)
        loss = m(torch.ones(1, 3)).sum()
        got.append(
            (m.weight.data.cpu().numpy().tolist(), round(float(loss.data.cpu().numpy()) - float(m.bias.sum()), 4))
        )
    assert got[0] == got[1] == ([[1.0] * 3] * 2, 6.0)


def test_gradient_of_the_wrong_shape_is_refused_in_torch_words(oracle):
    messages = []
    for torch in (engine, oracle):
        x = torch.ones(2, 3, requires_grad=True)
        with pytest.raises(RuntimeError) as caught:
            (x * 2).backward(torch.ones(3))
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith("Mismatch in shape: grad_output[0] has a shape of torch.Size([3])")


def test_target_size_warning_and_refusal_in_torch_words(oracle):
    import warnings

    shown = []
    for torch in (engine, oracle):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.nn.functional.mse_loss(torch.ones(3, 1), torch.zeros(3))
        with pytest.raises(ValueError) as refused:
            torch.nn.functional.binary_cross_entropy(torch.ones(3) * 0.5, torch.ones(4))
        shown.append(([str(w.message) for w in caught], str(refused.value)))
    assert shown[0] == shown[1]


def test_sum_of_uint8_is_int64_as_torch(oracle):
    got = []
    for torch in (engine, oracle):
        pixels = torch.tensor([[200, 100, 255]], dtype=torch.uint8)
        got.append([(str(s.dtype), s.tolist()) for s in (pixels.sum(), pixels.sum(1), torch.sum(pixels, 0))])
    assert got[0] == got[1] and got[0][0] == ("torch.int64", 555)


OUT_OF_BOUNDS = {
    "gather": lambda t: t.ones(2, 3).gather(1, t.tensor([[0, 5]])),
    "scatter_": lambda t: t.zeros(3).scatter_(0, t.tensor([4]), 1.0),
    "scatter_add": lambda t: t.zeros(3).scatter_add(0, t.tensor([4]), t.ones(1)),
    "index_select": lambda t: t.ones(2, 3).index_select(1, t.tensor([5])),
}


@pytest.mark.parametrize("what", sorted(OUT_OF_BOUNDS))
def test_index_out_of_bounds_of_gather_and_scatter_is_runtime_error(what, oracle):
    for torch in (engine, oracle):
        with pytest.raises(RuntimeError):
            OUT_OF_BOUNDS[what](torch)


def test_where_of_a_condition_alone_is_its_nonzero_tuple(oracle):
    got = []
    for torch in (engine, oracle):
        mask = torch.tensor([[0, 1, 0], [2, 0, 3]])
        rows, cols = torch.where(mask)
        (only,) = torch.where(torch.tensor([0.0, 1.5, 0.0, -2.0]) != 0)
        x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
        kept = torch.where(x > 0, x, 0.0)
        got.append((rows.tolist(), cols.tolist(), only.tolist(), str(rows.dtype), kept.tolist(), kept.grad_fn.name()))
    assert got[0] == got[1]


def test_module_type_casts_its_parameters(oracle):
    got = []
    for torch in (engine, oracle):
        m = torch.nn.Linear(2, 2)
        same = m.type(torch.float64) is m
        got.append((same, str(m.weight.dtype), str(m(torch.ones(1, 2, dtype=torch.float64)).dtype)))
    assert got[0] == got[1] == (True, "torch.float64", "torch.float64")


def _warned(call):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [(w.category.__name__, str(w.message)) for w in caught]


@pytest.mark.parametrize("what", ["tensor of a tensor", "meshgrid without indexing", "meshgrid with indexing"])
def test_warnings_as_torch(what, oracle):
    calls = {
        "tensor of a tensor": lambda t: t.tensor(t.ones(2)),
        "meshgrid without indexing": lambda t: t.meshgrid(t.arange(2), t.arange(3)),
        "meshgrid with indexing": lambda t: t.meshgrid(t.arange(2), t.arange(3), indexing="ij"),
    }
    got, want = _warned(lambda: calls[what](engine)), _warned(lambda: calls[what](oracle))
    assert len(got) == len(want)  # (PyTorch's C++ warnings end in "(Triggered internally at ...)")
    assert all(g[0] == w[0] and w[1].startswith(g[1]) for g, w in zip(got, want))


def test_float_and_int_of_a_one_element_data_as_d2l_writes_them(oracle):
    got = []
    for torch in (engine, oracle):
        lin = torch.nn.Linear(2, 1)
        with torch.no_grad():
            lin.bias.fill_(4.25)
        b = lin.bias.data
        got.append((float(b), int(b), float(torch.tensor([[2.5]]).data)))
    assert got[0] == got[1] == (4.25, 4, 2.5)


@pytest.mark.parametrize("size", [1, (1, 1), (1, 2)])
def test_adaptive_avg_pool_node_name_as_torch(size, oracle):
    names = []
    for torch in (engine, oracle):
        x = torch.ones(2, 3, 5, 5, requires_grad=True)
        out = [torch.nn.functional.adaptive_avg_pool2d(x, size), torch.nn.AdaptiveAvgPool2d(size)(x[0])]
        names.append([o.grad_fn.name() for o in out])
    assert names[0] == names[1]


def _closure_run(torch):
    lin = torch.nn.Linear(3, 1)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[0.5, -1.0, 2.0]]))
        lin.bias.fill_(0.25)
    x = torch.tensor(np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3))
    g = torch.func.grad(lambda t: lin(t).pow(2).sum())(x)  # a gradient penalty that trains lin
    (g.pow(2).sum()).backward()
    out, vjp_fn = torch.func.vjp(lambda t: lin(t).tanh(), x)
    (cot,) = vjp_fn(torch.ones(2, 1))
    primal, tangent = torch.func.jvp(lambda t: lin(t).tanh(), (x,), (torch.ones(2, 3),))
    plain = torch.func.grad(lambda t: (t**3).sum())(x)
    flags = [v.requires_grad for v in (g, out, cot, primal, tangent, plain)]
    values = [v.detach().numpy() for v in (g, lin.weight.grad, lin.bias.grad, out, cot, primal, tangent, plain)]
    return flags, values


def test_func_transforms_keep_the_graph_to_parameters_they_close_over(oracle):
    (got_flags, got), (want_flags, want) = _closure_run(engine), _closure_run(oracle)
    assert got_flags == want_flags == [True, True, True, True, True, False]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_integer_tensor_requiring_grad_is_refused_in_torch_words(oracle):
    messages = []
    for torch in (engine, oracle):
        found = []
        for call in (
            lambda t: t.tensor([1, 2, 3], requires_grad=True),
            lambda t: t.zeros(2, dtype=t.int64, requires_grad=True),
            lambda t: t.ones(2, dtype=t.int64).requires_grad_(),
            lambda t: t.nn.Parameter(t.tensor([1, 2])),
        ):
            with pytest.raises(RuntimeError) as caught:
                call(torch)
            found.append(str(caught.value))
        messages.append(found)
    assert messages[0] == messages[1]


def test_assignment_into_a_leaf_names_a_view_where_torch_does(oracle):
    keys = [..., 0, slice(None), [0], (0, [1]), None, (slice(1, 2), 0), (0, ...), (slice(None), 1)]
    messages = []
    for torch in (engine, oracle):
        x = torch.ones(3, 4, requires_grad=True)
        found = []
        for key in [*keys, x > 0]:
            with pytest.raises(RuntimeError) as caught:
                x[key] = 1.0
            found.append(str(caught.value))
        messages.append(found)
    assert messages[0] == messages[1]


def test_legacy_tensor_constructors_as_torch(oracle):
    import warnings

    got = []
    for torch in (engine, oracle):
        t = torch.ones(2)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (no copy-construct warning: it shares t's memory)
            alias = torch.Tensor(t)
        alias[0] = 5.0
        got.append(
            (tuple(torch.Tensor().shape), tuple(torch.FloatTensor().shape), t.tolist(), tuple(torch.Tensor(2, 3).shape))
        )
    assert got[0] == got[1] == ((0,), (0,), [5.0, 1.0], (2, 3))
