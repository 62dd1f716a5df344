"""Session 23's conformance programs: small programs as users write them from today's tutorials, run with
`torch` bound to the engine, the client embedded and the client against a live server (`torch_like`), and
compared with real PyTorch (the oracle): values, gradients, dtypes, grad_fn names and exceptions."""

from __future__ import annotations

import numpy as np
import pytest

UNARY_SAVING_RESULT = ("exp", "sqrt", "tanh", "sigmoid", "tan")


def outcome(fn):
    """fn()'s result, or (exception type's name, whether it is a RuntimeError, the message's start)."""
    try:
        return fn()
    except RuntimeError as error:
        return ("RuntimeError", str(error).split(":")[0])


def input_modified_after_a_result_saving_op(torch, name):
    """PyTorch saves exp/sqrt/tanh/sigmoid/tan's result, not their input: changing the input in place
    before the backward is allowed; changing the result is refused."""
    a = torch.tensor([1.0, 0.5], requires_grad=True)
    b = a * 1
    c = getattr(b, name)()
    b.add_(1)
    c.sum().backward()
    d = getattr(a * 1, name)()
    d.mul_(2)
    return a.grad.tolist(), outcome(lambda: d.sum().backward())


@pytest.mark.parametrize("name", UNARY_SAVING_RESULT)
def test_result_saving_ops_allow_their_input_changed_in_place(torch_like, name):
    torch = pytest.importorskip("torch")
    (got, got_error), (want, want_error) = (
        input_modified_after_a_result_saving_op(m, name) for m in (torch_like, torch)
    )
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert (
        got_error
        == want_error
        == (
            "RuntimeError",
            "one of the variables needed for gradient computation has been modified by an inplace operation",
        )
    )


@pytest.mark.parametrize("name", UNARY_SAVING_RESULT)
def test_a_second_backward_through_a_result_saving_op_is_refused(torch_like, name):
    x = torch_like.tensor([0.3, 0.4], requires_grad=True)
    y = getattr(x, name)().sum()
    y.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()
    assert x.grad is not None  # the first backward's gradient stays, not doubled
    y2 = getattr(x, name)().sum()
    y2.backward(retain_graph=True)
    y2.backward()  # retained: a second backward is fine


def sorted_selections(torch):
    """topk/sort/msort/cummax/cummin as a beam search or a median filter writes them: their values' grad_fn
    names and the gradient that reaches the input."""
    x = torch.tensor(np.arange(12.0).reshape(3, 4) % 5, requires_grad=True)
    s = torch.tensor(2.0, requires_grad=True)
    outs = [
        x.topk(2, 1)[0],
        torch.sort(x, 0)[0],
        x.sort(stable=True)[0],
        torch.msort(x),
        x.cummax(1)[0],
        x.cummin(0).values,
        s.cummax(0)[0],
        s.topk(1).values,
        x.sort(descending=True).values,
    ]
    sum(o.sum() for o in outs).backward()
    return [(type(o.grad_fn).__name__, o.grad_fn.name()) for o in outs], x.grad.tolist(), s.grad.item()


def test_sort_and_topk_values_have_pytorchs_grad_fn(torch_like):
    torch = pytest.importorskip("torch")
    (names, grad, s_grad), (want_names, want_grad, want_s_grad) = (sorted_selections(m) for m in (torch_like, torch))
    assert names == want_names  # TopkBackward0, SortBackward0/1, CummaxBackward0..., not GatherBackward0
    assert grad == want_grad and s_grad == want_s_grad


def tensors_tutorial_out(torch):
    """The Tensors tutorial's arithmetic written into `out=` Variables, and PyTorch's refusals of `out=`."""
    tensor = torch.ones(4, 4)
    tensor[:, 1] = 0
    y3 = torch.rand_like(tensor)
    same = torch.matmul(tensor, tensor.T, out=y3) is y3
    z3 = torch.rand_like(tensor)
    torch.mul(tensor, tensor, out=z3)
    resized = torch.empty(0)
    torch.add(torch.ones(2), 1, out=resized)
    wider = torch.zeros(2, dtype=torch.float64)
    torch.add(torch.ones(2), 1, out=wider)
    values, indices = torch.empty(2), torch.empty(2, dtype=torch.long)
    pair = torch.max(torch.tensor([[1.0, 3.0], [4.0, 2.0]]), 1, out=(values, indices))
    stacked = torch.empty(2, 3)
    torch.cat([torch.ones(1, 3), torch.zeros(1, 3)], out=stacked)
    a = torch.ones(2, requires_grad=True)
    refused = [
        outcome(lambda: torch.add(a, a, out=torch.empty(2))),
        outcome(lambda: torch.add(torch.ones(2), 1, out=torch.zeros(2, dtype=torch.long))),
    ]
    with torch.no_grad():
        torch.add(a, a, out=values)
    results = (y3, z3, resized, wider, values, indices, stacked)
    return same, pair[1] is indices, [r.tolist() for r in results], str(wider.dtype), refused


def test_out_arguments_of_torch_functions(torch_like):
    torch = pytest.importorskip("torch")
    assert tensors_tutorial_out(torch_like) == tensors_tutorial_out(torch)


def test_an_out_argument_of_another_shape_is_resized_with_pytorchs_warning(torch_like):
    out = torch_like.zeros(3)
    with pytest.warns(UserWarning, match=r"An output with one or more elements was resized since it had shape \[3\]"):
        torch_like.add(torch_like.ones(2), 1, out=out)
    assert out.tolist() == [2.0, 2.0]


def bridge_with_numpy(torch):
    """The Tensors tutorial's "Bridge with NumPy": a Variable and its numpy() (or from_numpy()) array share
    memory, so an in-place op on the Variable changes the array, also after an op recorded its old value."""
    t = torch.ones(5)
    n = t.numpy()
    t.add_(1)
    seen = [n.tolist()]
    n2 = numpy_array = np.ones(3)
    u = torch.from_numpy(numpy_array)
    before = u * 2  # reads the old values
    u.mul_(3)
    np.add(n2, 1, out=n2)
    seen += [n2.tolist(), u.tolist(), before.tolist()]
    x = torch.zeros(3)
    xs = x.numpy()
    for _ in range(3):
        x += 1
    x.mul_(2)
    return [*seen, xs.tolist(), x.tolist(), t.tolist()]


def test_an_in_place_op_changes_the_numpy_array_a_variable_shares(torch_like):
    torch = pytest.importorskip("torch")
    assert bridge_with_numpy(torch_like) == bridge_with_numpy(torch)


@pytest.mark.parametrize("key", [0, (slice(None), 1), slice(1, None), Ellipsis, slice(None), [0], (0, [1])], ids=repr)
def test_assigning_into_a_leaf_that_requires_grad_names_the_view_as_pytorch(torch_like, key):
    """x[0] = v writes into a view of x (PyTorch: "a view of a leaf Variable..."); x[...] = v and
    x[[0]] = v write into x itself ("a leaf Variable...")."""
    torch = pytest.importorskip("torch")
    messages = []
    for m in (torch_like, torch):
        x = m.ones(2, 3, requires_grad=True)
        index = tuple(m.tensor(k) if isinstance(k, list) else k for k in key) if isinstance(key, tuple) else key
        with pytest.raises(RuntimeError) as error:
            x[m.tensor(index) if isinstance(index, list) else index] = 2.0
        messages.append(str(error.value))
    assert messages[0] == messages[1]


def assignment_names(torch):
    """The grad_fn names of assignments into a clone, as a masking or a scatter of scores writes them."""
    x = torch.ones(2, 3, requires_grad=True)
    keys = [[0], (slice(None), [1]), (0, [1]), "mask", (Ellipsis, [1]), 0, (slice(None), slice(1, None))]
    names = []
    for key in keys:
        y = x.clone()
        if key == "mask":
            y[x.detach() > 0] = 2.0
        else:
            y[tuple(torch.tensor(k) if isinstance(k, list) else k for k in key) if isinstance(key, tuple) else key] = (
                2.0
            )
        names.append(y.grad_fn.name())
        (y * 2).sum().backward()
    for value in (2.0, torch.tensor(3.0), torch.ones(3)):
        y = x.clone()
        y[...] = value
        names.append(y.grad_fn.name())
    return names, x.grad.tolist()


def test_assignments_have_pytorchs_grad_fn_names(torch_like):
    torch = pytest.importorskip("torch")
    # IndexPutBackward0 (index arrays), CopySlices (into a view), FillBackward3/CopyBackwards (the whole tensor)
    assert assignment_names(torch_like) == assignment_names(torch)


def saliency_of_data(torch):
    """The classic saliency map: `torch.max(x.grad.data.abs(), dim=1)` (SmoothGrad sums them)."""
    x = torch.tensor(np.arange(24.0, dtype=np.float32).reshape(2, 3, 4) / 10 - 1, requires_grad=True)
    (x**3).sum().backward()
    saliency, channel = torch.max(x.grad.data.abs(), dim=1)
    total = torch.zeros(2, 3, 4)
    total += x.grad.data.abs()
    return saliency.tolist(), channel.tolist(), total.sum().item()


def test_saliency_from_the_data_of_a_gradient(torch_like):
    torch = pytest.importorskip("torch")
    got, want = saliency_of_data(torch_like), saliency_of_data(torch)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert got[1] == want[1]
    assert got[2] == pytest.approx(want[2], rel=1e-6)


# --- whole programs (adversarial examples, attributions, input design, eval loops), compared with PyTorch -----------
_rng = np.random.default_rng(0)
X = _rng.standard_normal((8, 5)).astype(np.float32)
Y = _rng.integers(0, 3, 8)
WEIGHTS = [
    (_rng.standard_normal(shape) * scale).astype(np.float32)
    for shape, scale in [((16, 5), 0.3), ((16,), 0.1), ((3, 16), 0.3), ((3,), 0.1)]
]


def classifier(torch, activation="ReLU"):
    """A small MLP with fixed weights, copied in under no_grad (as a checkpoint loader would)."""
    model = torch.nn.Sequential(torch.nn.Linear(5, 16), getattr(torch.nn, activation)(), torch.nn.Linear(16, 3))
    with torch.no_grad():
        for p, w in zip(model.parameters(), WEIGHTS):
            p.copy_(torch.tensor(w))
    return model


def pgd_with_delta(torch):
    """PGD on a perturbation leaf: delta.data updated from delta.grad.sign(), clamped to eps, its grad zeroed."""
    model = classifier(torch)
    model.requires_grad_(False)
    x, y = torch.tensor(X), torch.tensor(Y)
    delta = torch.zeros_like(x, requires_grad=True)
    losses = []
    for _ in range(4):
        loss = torch.nn.functional.cross_entropy(model(x + delta), y)
        loss.backward()
        losses.append(loss.item())
        delta.data = (delta + 0.05 * delta.grad.detach().sign()).clamp(-0.3, 0.3)
        delta.grad.zero_()
    return {"delta": delta, "losses": losses, "grad": delta.grad, "weight_grad": model[0].weight.grad}


def pgd_with_autograd_grad(torch):
    """PGD by autograd.grad, projected back into the eps-ball with min/max, then a no_grad accuracy."""
    model = classifier(torch)
    x, y = torch.tensor(X), torch.tensor(Y)
    x_adv = x.clone()
    for _ in range(3):
        x_adv.requires_grad_(True)
        loss = torch.nn.functional.cross_entropy(model(x_adv), y)
        (grad,) = torch.autograd.grad(loss, [x_adv])
        x_adv = x_adv.detach() + 0.05 * grad.sign()
        x_adv = torch.min(torch.max(x_adv, x - 0.3), x + 0.3).clamp(-3, 3)
    with torch.no_grad():
        accuracy = (model(x_adv).argmax(dim=1) == y).float().mean().item()
    return {"x_adv": x_adv, "accuracy": accuracy, "param_grads": [p.grad for p in model.parameters()]}


def integrated_gradients(torch):
    """Integrated gradients along a straight path (trapezoid rule), with the completeness check."""
    model = classifier(torch).eval()
    x = torch.tensor(X[:1])
    baseline = torch.zeros_like(x)
    path = (baseline + torch.linspace(0, 1, 11).view(-1, 1) * (x - baseline)).requires_grad_(True)
    (grads,) = torch.autograd.grad(model(path)[:, 1].sum(), path)
    attributions = (x - baseline) * (grads[:-1] + grads[1:]).mean(0) / 2
    return {"attributions": attributions, "total": attributions.sum().item(), "gap": (model(x) - model(baseline))[0, 1]}


def input_design_with_adam(torch):
    """Optimizing an input (the model frozen) with Adam: the loss history, the input and Adam's state."""
    model = classifier(torch)
    model.requires_grad_(False)
    z = torch.zeros(1, 5, requires_grad=True)
    optimizer = torch.optim.Adam([z], lr=0.1)
    history = []
    for _ in range(6):
        optimizer.zero_grad()
        loss = -model(z)[0, 1] + 0.01 * (z**2).sum()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    return {"z": z, "history": history, "grad": z.grad, "exp_avg": optimizer.state_dict()["state"][0]["exp_avg"]}


def eval_loop_accuracy(torch):
    """pytorch/examples' test loop: summed loss, argmax(keepdim) and eq(view_as), .item() accumulations."""
    model = classifier(torch).eval()
    x, y = torch.tensor(X), torch.tensor(Y)
    correct, total, loss = 0, 0, 0.0
    with torch.no_grad():
        for i in range(0, 8, 4):
            output = model(x[i : i + 4])
            loss += torch.nn.functional.cross_entropy(output, y[i : i + 4], reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(y[i : i + 4].view_as(pred)).sum().item()
            total += y[i : i + 4].size(0)
    return {"correct": correct, "total": total, "loss": loss, "output": output, "pred": pred}


def wgan_gradient_penalty(torch):
    """A critic's steps with WGAN-GP's penalty (create_graph=True), optimized by Adam. (Tanh: with a ReLU
    critic the engine leaves `mixed.grad` None where PyTorch's is zeros, a divergence left open.)"""
    critic = classifier(torch, "Tanh")
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
    real, rng = torch.tensor(X), np.random.default_rng(3)
    history = []
    for _ in range(3):
        fake = torch.tensor(rng.standard_normal((8, 5)).astype(np.float32))
        eps = torch.tensor(rng.uniform(size=(8, 1)).astype(np.float32))
        mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
        (grad,) = torch.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)
        penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        loss = critic(fake).mean() - critic(real).mean() + 10.0 * penalty
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    return {"history": history, "weight": critic[0].weight, "mixed_grad": mixed.grad}


def _described(value):
    """What a program's result is compared by: values, dtype, shape, requires_grad, is_leaf and grad_fn name."""
    if hasattr(value, "grad_fn") and hasattr(value, "detach"):
        name = None if value.grad_fn is None else value.grad_fn.name()
        meta = (str(value.dtype), tuple(value.shape), value.requires_grad, value.is_leaf, name)
        return ("tensor", np.asarray(value.detach().numpy()), meta)
    if isinstance(value, dict):
        return {k: _described(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_described(v) for v in value]
    return value


def _assert_same(got, want, where="result"):
    if isinstance(want, tuple) and want and want[0] == "tensor":
        assert isinstance(got, tuple) and got[0] == "tensor", f"{where}: {got!r} where PyTorch has a tensor"
        assert got[2] == want[2], f"{where}: (dtype, shape, requires_grad, is_leaf, grad_fn) {got[2]} vs {want[2]}"
        np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-5, err_msg=where)
    elif isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for key in want:
            _assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} vs {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert type(got) is float and got == pytest.approx(want, rel=1e-4, abs=1e-5), f"{where}: {got!r} vs {want!r}"
    else:
        assert type(got) is type(want) and got == want, f"{where}: {got!r} vs {want!r}"


PROGRAMS = [
    pgd_with_delta,
    pgd_with_autograd_grad,
    integrated_gradients,
    input_design_with_adam,
    eval_loop_accuracy,
    wgan_gradient_penalty,
]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_program_matches_pytorch(torch_like, program):
    torch = pytest.importorskip("torch")
    _assert_same(_described(program(torch_like)), _described(program(torch)))


def constructed_dtypes(torch):
    """torch.tensor of lists mixing Python numbers with NumPy scalars, arrays and Variables: the items' dtypes
    promoted (an RL loop's `torch.tensor(rewards)` of np.float64 returns is float64), Python floats as float32."""
    cases = [
        [np.float64(1.0)],
        [1.0, np.float64(2)],
        [np.float32(1), np.float64(2)],
        [[np.float64(1)], [2.0]],
        [np.array([1.0, 2.0])],
        [torch.tensor(1.0, dtype=torch.float64)],
        (np.float64(1),),
        [np.float32(1.5), 2.0],
        [np.int64(1), 2.5],
        [1, np.int32(2)],
        [1.0, 2.0],
    ]
    return [str(torch.tensor(c).dtype) for c in cases] + [str(torch.as_tensor([np.float64(0.5)] * 3).dtype)]


def test_tensor_of_a_list_of_numpy_scalars_keeps_their_dtype(torch_like):
    torch = pytest.importorskip("torch")
    assert constructed_dtypes(torch_like) == constructed_dtypes(torch)


def selection_names(torch):
    """grad_fn names of PyTorch's picking and writing functions (composed of registry ops here)."""
    x = torch.ones(3, 4, requires_grad=True)
    index = torch.tensor([[0, 1], [2, 3], [1, 1]])
    outs = [
        x.scatter(1, index, 0.0),
        x.scatter(1, index, torch.ones(3, 2)),
        torch.scatter(x, 1, index, value=2.0),
        x.index_fill(1, torch.tensor([0]), 1.0),
        x.index_fill(1, torch.tensor([0]), torch.tensor(1.0)),
        x.index_copy(0, torch.tensor([2, 0, 1]), x * 2),
        x.masked_scatter(x > 0, x * 2),
        torch.take(x, torch.tensor([0, 5])),
    ]
    sum(o.sum() for o in outs).backward()
    return [o.grad_fn.name() for o in outs], x.grad.tolist()


def test_selection_functions_have_pytorchs_grad_fn_names(torch_like):
    torch = pytest.importorskip("torch")
    (names, grad), (want_names, want_grad) = selection_names(torch_like), selection_names(torch)
    assert names == want_names  # ScatterBackward1 for a value, IndexFillBackward0/1, IndexCopyBackward0...
    np.testing.assert_allclose(grad, want_grad, rtol=1e-6)


def order_statistics_names(torch):
    """kthvalue/median/nanmedian/mode values' grad_fn names (without ties: their indices are PyTorch's too)."""
    x = torch.tensor([[3.0, 1.0, 2.5, 2.0], [0.0, 5.0, 6.0, 1.0], [4.0, 7.0, 2.0, 9.0]], requires_grad=True)
    outs = [
        x.kthvalue(2, 1)[0],
        x.kthvalue(2, 1, keepdim=True)[0],
        x.median(),
        x.median(1)[0],
        x.nanmedian(),
        x.nanmedian(0).values,
        x.mode(1).values,
        torch.tensor(2.0, requires_grad=True).mode().values,
    ]
    sum(o.sum() for o in outs[:-1]).backward()
    return [o.grad_fn.name() for o in outs], [o.tolist() for o in outs], x.grad.tolist()


def test_order_statistics_have_pytorchs_grad_fn_names(torch_like):
    torch = pytest.importorskip("torch")
    assert order_statistics_names(torch_like) == order_statistics_names(torch)


def order_statistics_of_a_scalar(torch):
    s = torch.tensor(2.0, requires_grad=True)
    outs = [s.median(0), s.kthvalue(1), s.nanmedian(-1), s.median(0, keepdim=True), s.kthvalue(1, 0, True)]
    sum(o.values for o in outs).backward()
    return [(o.values.tolist(), o.indices.tolist(), tuple(o.values.shape)) for o in outs], s.grad.item()


def test_median_and_kthvalue_of_a_0d_tensor(torch_like):
    """A 0-d tensor's median(0)/kthvalue(1) is its value at index 0 (they raised IndexError from narrow)."""
    torch = pytest.importorskip("torch")
    assert order_statistics_of_a_scalar(torch_like) == order_statistics_of_a_scalar(torch)


def shapes_printed(torch):
    """The tutorials' `print(f"Shape of tensor: {tensor.shape}")`: torch.Size, still a tuple of ints."""
    x = torch.ones(3, 4, requires_grad=True)
    y = x * 2
    return [
        f"Shape of tensor: {x.shape}",
        str(y.shape),
        repr(y.size()),
        str(y.sum().shape),
        x.shape == (3, 4),
        y.size(1),
        list(y.shape),
        y.shape.numel(),
        str(torch.zeros(x.shape).shape),
        str(x.view(x.shape[0], -1).reshape(y.size()).shape),
    ]


def test_shapes_are_torch_size(torch_like):
    torch = pytest.importorskip("torch")
    assert shapes_printed(torch_like) == shapes_printed(torch)


def legacy_predictions(torch):
    """The PyTorch-0.3 examples' test loop on `.data`: `output.data.max(1, keepdim=True)[1]`, `pred.eq(...)`,
    `.cpu().sum()`, and `x.data.cpu().numpy()`."""
    output = torch.tensor([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2], [0.1, 0.2, 0.7]], requires_grad=True) * 1
    target = torch.tensor([1, 0, 1])
    pred = output.data.max(1, keepdim=True)[1]
    correct = pred.eq(target.data.view_as(pred)).cpu().sum()
    values, indices = output.data.max(1)
    return [
        pred.tolist(),
        int(correct),
        output.data.max(1)[1].tolist(),
        values.tolist(),
        output.data.min(0)[1].tolist(),
        float(output.data.max()),
        output.data.cpu().numpy().tolist(),
        indices.tolist(),
    ]


def test_legacy_predictions_from_data(torch_like):
    torch = pytest.importorskip("torch")
    got, want = legacy_predictions(torch_like), legacy_predictions(torch)
    for i in (3, 5, 6):  # float32 values
        np.testing.assert_allclose(got[i], want[i], rtol=1e-6)
    assert [got[i] for i in (0, 1, 2, 4, 7)] == [want[i] for i in (0, 1, 2, 4, 7)]
