"""Session 24's conformance programs, as the README's users write them: input gradients of a trained model
(saliency, attacks, input design, Hessian-vector products), today's training programs (`torch.func`, forward
mode, generators, optimizers and schedulers saved to a BytesIO) and the errors they read, run with `torch`
bound to the engine, the client embedded and the client against a live server (`torch_like`), compared with
real PyTorch (the oracle)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.test_conformance_s23b import _refusal as _raised


def _meta(v):
    return (str(v.dtype), tuple(v.shape), v.requires_grad, v.is_leaf)


def func_gradient_penalty(torch):
    """A gradient penalty taken with `torch.func.grad`/`jacrev` of a function that closes over a module: the
    gradient keeps its graph to the module's parameters, so the penalty's backward trains them."""
    lin = torch.nn.Linear(3, 1)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[0.5, -0.2, 0.1]]))
        lin.bias.fill_(0.3)
    x = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
    g = torch.func.grad(lambda z: torch.tanh(lin(z)).sum())(x)
    ((g.norm(dim=1) - 1).pow(2).mean()).backward()
    first = (lin.weight.grad.clone(), lin.bias.grad.clone())
    lin.zero_grad()
    jacobian = torch.func.jacrev(lambda z: torch.tanh(lin(z)))(x[0])
    (jacobian**2).sum().backward()
    with torch.no_grad():
        frozen = torch.func.grad(lambda z: lin(z).sum())(x)
    tensors = [g, *first, jacobian, lin.weight.grad, lin.bias.grad, frozen]
    return [_meta(t) for t in tensors], [t.detach().numpy() for t in tensors]


def test_func_transforms_keep_the_graph_to_the_parameters_they_close_over(torch_like):
    torch = pytest.importorskip("torch")
    (got_meta, got), (want_meta, want) = func_gradient_penalty(torch_like), func_gradient_penalty(torch)
    assert got_meta == want_meta  # the client's gradient and Jacobian did not require grad: the backward was refused
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)


# --- errors, read as a user reads them ---------------------------------------------------------------------------
SHAPE_REFUSALS = {
    "mm": lambda t: t.ones(2, 3) @ t.ones(2, 3),
    "broadcast": lambda t: t.ones(2, 3) + t.ones(4),
    "linear": lambda t: t.nn.Linear(3, 2)(t.ones(4, 5)),
    "mse_loss": lambda t: t.nn.functional.mse_loss(t.ones(4, 3, requires_grad=True), t.ones(4, 2)),
    "view": lambda t: t.ones(2, 3).view(4),
    "reshape": lambda t: t.ones(6, requires_grad=True).reshape(4, -1),
    "expand": lambda t: t.ones(2, 3).expand(4, 4),
    "sum dim": lambda t: t.ones(2, 3, requires_grad=True).sum(dim=3),
    "softmax dim": lambda t: t.ones(2, 3).softmax(dim=2),
    "index": lambda t: t.ones(3, requires_grad=True)[5],
    "too many indices": lambda t: t.ones(3)[1, 2],
    "cat sizes": lambda t: t.cat([t.ones(2, 3), t.ones(4, 3), t.ones(2, 5)], dim=1),
    "cat dimensions": lambda t: t.cat([t.ones(2, 3), t.ones(3)]),
    "stack": lambda t: t.stack([t.ones(2), t.ones(2, requires_grad=True), t.ones(3)]),
    "where": lambda t: t.where(t.ones(2) > 0, t.ones(3, requires_grad=True), t.ones(2)),
    "dot": lambda t: t.ones(3) @ t.ones(4),
    "matrix by vector": lambda t: t.ones(2, 2, 3) @ t.ones(4, requires_grad=True),
    "vector by matrix": lambda t: t.ones(3) @ t.ones(4, 5),
    "batched": lambda t: t.ones(2, 1, 2, 3) @ t.ones(3, 4, 5, requires_grad=True),
    "batch broadcast": lambda t: t.ones(2, 2, 3) @ t.ones(3, 3, 5),
    "conv2d of a matrix": lambda t: t.nn.Conv2d(3, 4, 3)(t.ones(3, 5)),
    "conv1d of a vector": lambda t: t.nn.functional.conv1d(t.ones(3, requires_grad=True), t.ones(4, 3, 2)),
}


@pytest.mark.filterwarnings("ignore:Using a target size")
@pytest.mark.parametrize("name", sorted(SHAPE_REFUSALS))
def test_shape_refusals_are_pytorchs_exceptions(torch_like, name):
    """`except RuntimeError` (IndexError for a dimension or an index) catches a shape refusal on the client as in
    PyTorch: the client's ShapeError was a ValueError only. Its message still names the op and the shapes."""
    torch = pytest.importorskip("torch")
    got, want = _raised(lambda: SHAPE_REFUSALS[name](torch_like)), _raised(lambda: SHAPE_REFUSALS[name](torch))
    assert isinstance(got, type(want)), (type(got).__mro__, type(want))
    assert str(want) in str(got)
    if torch_like.__name__ == "client":
        assert isinstance(got, torch_like.ShapeError) and "input shapes: [" in str(got)
        assert (torch_like.ones(2) * 3).sum().item() == 6.0  # the session (and the server) go on


def test_a_wrong_url_prefix_names_the_url_it_was_not_found_at(server):
    """GRADSERVE_URL with a path the service does not serve: the 404 says which URL (it said "Not Found")."""
    import client

    with client.connect(server.url + "/api", retries=0):
        with pytest.raises(client.errors.NotFoundError) as err:
            (client.ones(2, requires_grad=True) * 2).sum().item()
    assert str(err.value) == f"Not Found: {server.url}/api/forward" and err.value.status == 404
    with client.connect(server.url):
        assert (client.ones(2, requires_grad=True) * 2).sum().item() == 4.0


MISUSES = {
    "float index": lambda t: t.ones(2, 3)[0.5],
    "optimizer of one tensor": lambda t: t.optim.SGD(t.nn.Parameter(t.ones(2, dtype=t.float64)), lr=0.1),
}


@pytest.mark.parametrize("name", sorted(MISUSES))
def test_misuses_are_refused_in_pytorchs_words(torch_like, name):
    torch = pytest.importorskip("torch")
    got, want = _raised(lambda: MISUSES[name](torch_like)), _raised(lambda: MISUSES[name](torch))
    assert isinstance(got, type(want)) and str(got) == str(want)


FLOAT_INDEX = {
    "gather": lambda t, i: t.ones(3, 3).gather(1, i.view(1, 1)),
    "scatter": lambda t, i: t.ones(3, 3).scatter(1, i.view(1, 1), 1.0),
    "scatter_add": lambda t, i: t.ones(3, 3, requires_grad=True).scatter_add(1, i.view(1, 1), t.ones(1, 1)),
    "index_add": lambda t, i: t.zeros(3, 3).index_add(1, i, t.ones(3, 1)),
    "index_add_": lambda t, i: t.zeros(3, 3).index_add_(1, i, t.ones(3, 1), alpha=2),
}


@pytest.mark.parametrize("name", sorted(FLOAT_INDEX))
def test_a_float_index_is_refused_in_pytorchs_words(torch_like, name):
    """index_add with a float index added at its truncated positions (PyTorch refuses it); gather/scatter's
    refusal said int64 where PyTorch says int32/int64."""
    torch = pytest.importorskip("torch")
    got = _raised(lambda: FLOAT_INDEX[name](torch_like, torch_like.tensor([0.7])))
    want = _raised(lambda: FLOAT_INDEX[name](torch, torch.tensor([0.7])))
    assert isinstance(got, RuntimeError) and str(want) in str(got)


# --- input gradients of a trained model ----------------------------------------------------------------------------
def gradcam_before_an_inplace_relu(torch):
    """Grad-CAM as written for torchvision's models: a forward hook on a convolution keeps its output, with
    `retain_grad()` and a `register_hook`, and the ReLU after it is `inplace=True`. PyTorch's hook reads the
    gradient of the output before the ReLU, its `.grad` that of the output after it."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.ReLU(inplace=True), torch.nn.Flatten(), torch.nn.Linear(48, 4)
    )
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor((rng.standard_normal(tuple(p.shape)) * 0.3).astype(np.float32)))
    kept, seen = {}, []

    def keep(module, inputs, output):
        output.retain_grad()
        output.register_hook(seen.append)
        kept["activation"] = output

    model[0].register_forward_hook(keep)
    out = model(torch.tensor(rng.standard_normal((2, 2, 4, 4)).astype(np.float32)))
    out[:, 1].sum().backward()
    activation = kept["activation"]
    weights = seen[0].mean(dim=(2, 3), keepdim=True)
    cam = torch.relu((weights * activation).sum(dim=1)).detach()
    return [t.detach().numpy() for t in (seen[0], activation.grad, cam, model[0].weight.grad)]


def test_gradcam_hooks_on_an_activation_changed_in_place(torch_like):
    """The client never called a hook registered before an in-place op (Grad-CAM's weights: an IndexError), and the
    engine and the client left a `retain_grad()` Variable's `.grad` None once it was changed in place."""
    torch = pytest.importorskip("torch")
    got, want = gradcam_before_an_inplace_relu(torch_like), gradcam_before_an_inplace_relu(torch)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_retain_grad_moves_on_to_the_version_an_in_place_op_makes(torch_like):
    torch = pytest.importorskip("torch")
    grads = []
    for m in (torch_like, torch):
        x = m.tensor([1.0, -2.0, 3.0], requires_grad=True)
        z, w = x * 3, x * 2
        z.retain_grad()
        w.retain_grad()
        z[0] = 5.0
        w += 1
        w.mul_(2)
        (z.sum() + (w * w).sum()).backward()
        grads.append((z.grad.tolist(), w.grad.tolist(), x.grad.tolist(), z.retains_grad))
    assert grads[0] == grads[1]


# --- today's training programs ---------------------------------------------------------------------------------------
def oversampled_batches(torch):
    """An imbalanced dataset's loader: WeightedRandomSampler with per-sample weights, a seeded generator."""
    labels = torch.tensor([0, 0, 0, 0, 1, 2])
    weights = (1.0 / torch.bincount(labels).double())[labels]
    weights[3] = 0
    data = torch.utils.data.TensorDataset(torch.arange(6.0), labels)
    drawn = []
    for _ in range(2):
        sampler = torch.utils.data.WeightedRandomSampler(weights, 12, generator=torch.Generator().manual_seed(5))
        loader = torch.utils.data.DataLoader(data, batch_size=5, sampler=sampler)
        drawn.append([(x.tolist(), y.tolist()) for x, y in loader])
    refused = [
        _raised(lambda: torch.utils.data.WeightedRandomSampler([1.0, 2.0], 0)),
        _raised(lambda: torch.utils.data.WeightedRandomSampler([1.0, 2.0], 3, replacement=1)),
        _raised(lambda: torch.utils.data.WeightedRandomSampler([[1.0, 2.0]], 3)),
    ]
    once = torch.utils.data.WeightedRandomSampler([0.0, 1.0, 1.0, 0.0], 2, replacement=False)
    return drawn, [(type(e), str(e)) for e in refused], sorted(once), len(sampler)


def test_weighted_random_sampler(torch_like):
    """`torch.utils.data.WeightedRandomSampler` was missing (an AttributeError). Its draws are the side's
    generator's, so they are compared by what they must be, not with PyTorch's."""
    torch = pytest.importorskip("torch")
    (drawn, refused, once, length), (_, want_refused, want_once, want_length) = (
        oversampled_batches(torch_like),
        oversampled_batches(torch),
    )
    assert drawn[0] == drawn[1] and [len(x) for x, _ in drawn[0]] == [5, 5, 2]  # a seeded generator: the same draws
    indices = [int(i) for x, _ in drawn[0] for i in x]
    assert 3 not in indices and all(y == [0, 0, 0, 0, 1, 2][int(i)] for x, ys in drawn[0] for i, y in zip(x, ys))
    assert refused == want_refused and once == want_once == [1, 2] and length == want_length == 12


def split_iterable(torch):
    """The IterableDataset docs' range dataset that splits its work by `get_worker_info()` (None in-process)."""

    class Range(torch.utils.data.IterableDataset):
        def __init__(self, start, end):
            self.start, self.end = start, end

        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            if info is None:
                return iter(range(self.start, self.end))
            per = -(-(self.end - self.start) // info.num_workers)
            first = self.start + info.id * per
            return iter(range(first, min(first + per, self.end)))

    batches = torch.utils.data.DataLoader(Range(3, 10), batch_size=3, num_workers=0)
    return [(b.tolist(), str(b.dtype)) for b in batches], torch.utils.data.get_worker_info()


def test_get_worker_info_in_process(torch_like):
    torch = pytest.importorskip("torch")
    assert split_iterable(torch_like) == split_iterable(torch)  # (an AttributeError)


SINGULAR = {
    "linalg.inv": lambda t: t.linalg.inv(t.zeros(2, 2, requires_grad=True) * 1).sum().item(),
    "inverse": lambda t: t.zeros(2, 2).inverse().sum().item(),
    "torch.inverse": lambda t: t.inverse(t.zeros(2, 2)).sum().item(),
    "cholesky": lambda t: t.linalg.cholesky(t.tensor([[1.0, 2.0], [2.0, 1.0]])).sum().item(),
}


@pytest.mark.parametrize("name", sorted(SINGULAR))
def test_a_singular_matrix_is_a_linalg_error(torch_like, name):
    """`except torch.linalg.LinAlgError` (a RuntimeError) catches a singular or indefinite matrix: on the engine it
    had become a plain ShapeMismatch. Through a client it is the server's 422 naming the node (a RuntimeError)."""
    torch = pytest.importorskip("torch")
    want = _raised(lambda: SINGULAR[name](torch))
    got = _raised(lambda: SINGULAR[name](torch_like))
    assert isinstance(want, torch.linalg.LinAlgError) and isinstance(got, RuntimeError)
    if torch_like.__name__ == "engine":
        assert isinstance(got, torch_like.linalg.LinAlgError)
    else:
        assert isinstance(got, torch_like.errors.GraphValidationError)
        assert f"({'cholesky' if name == 'cholesky' else 'inv'}) failed" in str(got)  # the node's op


def lissa_inverse_hvp(torch):
    """Influence functions' LiSSA: an inverse-Hessian-vector product by iterated Hessian-vector products, each
    seeded by the last estimate (PyTorch's results of hvp are values: no derivative of a derivative builds up)."""
    x = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64)
    v = torch.ones(3, dtype=torch.float64)
    estimate = v
    for _ in range(6):
        _, h = torch.autograd.functional.hvp(lambda z: (z.sin() * z).sum() + (z**4).sum(), x, estimate)
        estimate = v + estimate - 0.1 * h
    return estimate.numpy(), estimate.requires_grad


def test_lissa_iterates_hessian_vector_products(torch_like):
    """The client's hvp results are lazy grad nodes: the server counted the 6th one, seeded by the 5th, as a
    derivative of order 6 and refused it (413); a grad_output no longer adds to the order."""
    torch = pytest.importorskip("torch")
    (got, got_rg), (want, want_rg) = lissa_inverse_hvp(torch_like), lissa_inverse_hvp(torch)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert got_rg is want_rg is False


def _backward_by_keyword(torch):
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y, z = x * x, x.sum()
    torch.autograd.backward([y, z], grad_tensors=[torch.tensor([1.0, 0.5, 0.25]), None], retain_graph=False)
    return x.grad.tolist()


def test_autograd_backward_takes_pytorchs_grad_tensors_keyword(torch_like):
    torch = pytest.importorskip("torch")
    assert _backward_by_keyword(torch_like) == _backward_by_keyword(torch)


def _custom_adam_from_pytorchs_source(torch):
    """A user's optimizer written after PyTorch's own (`Optimizer` subclass, state made with
    `zeros_like(p, memory_format=torch.preserve_format)`), and an EMA copy by `clone(memory_format=...)`."""

    class MyAdam(torch.optim.Optimizer):
        def __init__(self, params, lr=0.01, betas=(0.9, 0.999), eps=1e-8):
            super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state["step"] = 0
                        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["step"] += 1
                    state["exp_avg"].mul_(beta1).add_(p.grad, alpha=1 - beta1)
                    state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                    corrected = state["exp_avg_sq"].div(1 - beta2 ** state["step"]).sqrt().add_(group["eps"])
                    p.addcdiv_(state["exp_avg"], corrected, value=-group["lr"] / (1 - beta1 ** state["step"]))

    torch.manual_seed(0)
    rng = np.random.default_rng(5)
    x, y = (torch.tensor(rng.standard_normal(shape).astype(np.float32)) for shape in ((16, 4), (16, 1)))
    w = torch.tensor(rng.standard_normal((4, 1)).astype(np.float32), requires_grad=True)
    optimizer, ema = MyAdam([w], lr=0.05), w.detach().clone(memory_format=torch.contiguous_format)
    for _ in range(5):
        optimizer.zero_grad()
        ((x @ w - y) ** 2).mean().backward()
        optimizer.step()
        ema = 0.9 * ema + 0.1 * w.detach().clone(memory_format=torch.preserve_format)
    return w.detach().numpy().copy(), ema.numpy().copy(), repr(torch.channels_last)


def test_a_custom_optimizer_written_after_pytorchs_source(torch_like):
    """Through a server the EMA's `w.detach().clone()` is recorded, not computed, before the optimizer changes w in
    place: the record keeps the values of when it was made, as PyTorch's clone computed then."""
    torch = pytest.importorskip("torch")
    (w, ema, name), (want_w, want_ema, want_name) = (_custom_adam_from_pytorchs_source(m) for m in (torch_like, torch))
    np.testing.assert_allclose(w, want_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ema, want_ema, rtol=1e-5, atol=1e-6)
    assert name == want_name == "torch.channels_last"


def _freeze_batch_norms_and_step(torch):
    """Fine-tuning code that freezes a model's batch norms by PyTorch's private base classes."""
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.InstanceNorm2d(4, affine=True))
    rng = np.random.default_rng(2)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32)))
    kinds = []
    for m in model.modules():
        kinds.append(
            (
                isinstance(m, nn.modules.batchnorm._BatchNorm),
                isinstance(m, nn.modules.batchnorm._NormBase),
                isinstance(m, nn.modules.instancenorm._InstanceNorm),
                isinstance(m, nn.modules.conv._ConvNd),
            )
        )
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eval()
            for p in m.parameters():
                p.requires_grad_(False)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    x = torch.tensor(rng.standard_normal((3, 2, 6, 6)).astype(np.float32))
    model(x).pow(2).mean().backward()
    optimizer.step()
    return kinds, model[1].running_mean.numpy().copy(), model[0].weight.detach().numpy().copy()


def test_batch_norms_frozen_by_pytorchs_private_base_classes(torch_like):
    torch = pytest.importorskip("torch")
    (kinds, mean, weight), (want_kinds, want_mean, want_weight) = (
        _freeze_batch_norms_and_step(m) for m in (torch_like, torch)
    )
    assert kinds == want_kinds
    np.testing.assert_array_equal(mean, want_mean)  # eval: the running statistics stay
    np.testing.assert_allclose(weight, want_weight, rtol=1e-4, atol=1e-5)
