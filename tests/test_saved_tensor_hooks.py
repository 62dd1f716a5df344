"""torch.autograd.graph on the engine: the "Hooks for autograd saved tensors" tutorial's examples with `import
torch` changed to `import engine`, what each op packs and in which order, `grad_fn._saved_<name>` and
`_raw_saved_<name>.register_hooks`, grad_fn hooks (`register_prehook`, `register_hook`) in PyTorch's order with
its replacement rules, and PyTorch's errors. Where torch is installed each program also runs on it (float64) and
must log the same; the client's side is tests/client/test_client_saved_tensor_hooks.py."""

from __future__ import annotations

import os
import threading
import uuid

import numpy as np
import pytest

import engine

X = np.array([1.0, -2.0, 0.5])
Y = np.array([3.0, 0.25, -1.5])


@pytest.fixture(params=["engine", "torch"])
def m(request):
    return engine if request.param == "engine" else pytest.importorskip("torch")


def leaves(m):
    return (
        m.tensor(X.copy(), dtype=m.float64, requires_grad=True),
        m.tensor(Y.copy(), dtype=m.float64, requires_grad=True),
    )


def values(log):
    return [np.asarray(v.detach().numpy()) if hasattr(v, "detach") else v for v in log]


def same(program):
    """`program(m, log)`'s log on the engine, checked against torch's where torch is installed."""
    got = values(program(engine, []))
    try:
        import torch
    except ImportError:
        return got
    want = values(program(torch, []))
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
        else:
            assert g == w
    return got


def test_the_tutorials_saved_tensors_are_the_inputs_and_a_copy_of_the_output(m):
    a, b = leaves(m)
    y = a * b
    assert y.grad_fn._saved_self is a and y.grad_fn._saved_other is b
    y = m.exp(a)
    assert y.grad_fn._saved_result.equal(y) and y.grad_fn._saved_result is not y
    assert y.grad_fn._saved_result.grad_fn is y.grad_fn


def test_pack_and_unpack_see_mul_s_inputs_in_torch_s_order():
    def program(m, log):
        a = m.ones(5, requires_grad=True)
        b = m.ones(5, requires_grad=True) * 2
        hooks = m.autograd.graph.saved_tensors_hooks(
            lambda x: log.extend(["pack", x]) or x, lambda x: log.extend(["unpack", x]) or x
        )
        with hooks:
            y = a * b
        y.sum().backward()
        log.append(a.grad)
        return log

    got = same(program)
    assert got[::2][:4] == ["pack", "pack", "unpack", "unpack"]
    np.testing.assert_array_equal(got[1], np.full(5, 2.0))  # other first, as PyTorch's MulBackward0 saves it


def test_what_unpack_returns_is_what_the_backward_reads():
    def program(m, log):
        x, _ = leaves(m)
        with m.autograd.graph.saved_tensors_hooks(lambda x: x * 4, lambda x: x / 3):  # not the inverse: seen
            y = m.pow(x, 2)
        y.sum().backward()
        return [x.grad]

    np.testing.assert_allclose(same(program)[0], 2 * X * 4 / 3)


@pytest.mark.parametrize(
    "name, make",
    [
        ("storage index", lambda m, store: (lambda x: store.append(x) or len(store) - 1, lambda i: store[i])),
        ("tuple", lambda m, store: (lambda x: (x - 1, lambda t: t + 1), lambda p: p[1](p[0]))),
        ("repr", lambda m, store: (repr, lambda s: eval(m.__name__ + "." + s, {m.__name__: m}))),
        ("cpu", lambda m, store: (lambda x: (x.device, x.cpu()), lambda p: p[1].to(p[0]))),
    ],
)
def test_the_tutorials_unconventional_pack_results(m, name, make):
    x = m.randn(5, requires_grad=True)
    with m.autograd.graph.saved_tensors_hooks(*make(m, [])):
        y = x * x
    y.sum().backward()
    assert m.allclose(x.grad, 2 * x, atol=1e-4)


def test_save_on_cpu_in_a_module_gives_the_gradients_without_it(m):
    m.manual_seed(0)
    model = m.nn.Sequential(m.nn.Linear(10, 20), m.nn.Linear(20, 3)).double()
    x = m.randn(4, 10, dtype=m.float64)
    model(x).sum().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with m.autograd.graph.save_on_cpu(pin_memory=True):
        loss = model[1](model[0](x)).sum()
    loss.backward()
    for p, g in zip(model.parameters(), plain):
        assert m.equal(p.grad, g)


def test_save_on_cpu_passes_a_host_tensor_through_uncopied():
    x, b = leaves(engine)
    with engine.autograd.graph.save_on_cpu():
        y = x * b
    assert y.grad_fn._saved_self._data is x._data


class SelfDeletingTempFile:
    """The tutorial's: a file name whose file goes when the object does."""

    def __init__(self, directory):
        self.name = os.path.join(directory, str(uuid.uuid4()))

    def __del__(self):
        os.remove(self.name)


def test_files_on_disk_are_read_back_and_deleted_when_the_backward_frees_them(m, tmp_path):
    def pack_hook(tensor):
        temp_file = SelfDeletingTempFile(tmp_path)
        m.save(tensor, temp_file.name)
        return temp_file

    def unpack_hook(temp_file):
        return m.load(temp_file.name)

    x = m.tensor(X.copy(), dtype=m.float64, requires_grad=True)
    with m.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook):
        y = (x * x).exp()
    assert len(os.listdir(tmp_path)) == 3  # x twice (self and other) and exp's result
    y.sum().backward()
    assert os.listdir(tmp_path) == []
    assert m.allclose(x.grad, 2 * x * (x * x).exp())


def test_unpack_runs_at_every_access_of_a_saved_tensor(m, tmp_path):
    def pack_hook(tensor):
        name = os.path.join(tmp_path, str(uuid.uuid4()))
        m.save(tensor, name)
        return name

    def unpack_hook(name):
        tensor = m.load(name)
        os.remove(name)
        return tensor

    x = m.ones(5, requires_grad=True)
    with m.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook):
        y = x.pow(2)
    assert m.equal(y.grad_fn._saved_self, x)
    with pytest.raises((FileNotFoundError, RuntimeError)):  # the engine's load wraps the OSError
        _ = y.grad_fn._saved_self


OPS = {  # (packs, unpacks) as PyTorch 2.13 saves them
    "a * b": (2, 2),
    "a * c": (1, 1),
    "c * a": (1, 1),
    "a * 2": (0, 0),
    "a ** 2": (1, 1),
    "a ** b": (3, 3),
    "2 ** a": (2, 2),
    "a.exp()": (1, 1),
    "a.sin()": (1, 1),
    "a.tanh()": (1, 1),
    "a.sigmoid()": (1, 1),
    "a + b": (0, 0),
    "a / b": (2, 2),
    "a / c": (1, 1),
    "c / a": (2, 2),
    "a[None] @ b[:, None]": (2, 2),
    "a[None] @ c[:, None]": (1, 1),
}


@pytest.mark.parametrize("expression", sorted(OPS))
def test_an_op_packs_what_its_backward_reads(m, expression):
    log = []
    a, b = (m.tensor(np.abs(v) + 0.5, dtype=m.float64, requires_grad=True) for v in (X, Y))  # a ** b: real
    c = m.tensor(Y.copy(), dtype=m.float64)
    with m.autograd.graph.saved_tensors_hooks(lambda x: log.append("p") or x, lambda x: log.append("u") or x):
        y = eval(expression, {"a": a, "b": b, "c": c})
    packs = len(log)
    y.sum().backward()
    assert (packs, len(log) - packs) == OPS[expression]


def test_a_custom_function_s_saved_tensors_are_packed_and_unpacked(m):
    log = []

    class ExpPlus(m.autograd.Function):  # saves an input and its own output
        @staticmethod
        def forward(ctx, x, scale):
            out = x.exp()
            ctx.save_for_backward(out, x)
            return out

        @staticmethod
        def backward(ctx, g):
            out, x = ctx.saved_tensors
            return g * out + 0 * x, None

    x, _ = leaves(m)
    with m.autograd.graph.saved_tensors_hooks(lambda t: log.append("p") or t * 2, lambda t: log.append("u") or t / 2):
        y = ExpPlus.apply(x, 3)
    y.sum().backward()
    assert log == ["p", "p", "u", "u"]
    assert m.allclose(x.grad, x.exp())


def test_the_innermost_hooks_apply_and_only_on_their_thread(m):
    log = []
    a, b = leaves(m)
    with m.autograd.graph.saved_tensors_hooks(lambda x: log.append("outer") or x, lambda x: x):
        with m.autograd.graph.saved_tensors_hooks(lambda x: log.append("inner") or x, lambda x: x):
            a * b
            thread = threading.Thread(target=lambda: a * b)
            thread.start()
            thread.join()
        a.exp()
    assert log == ["inner", "inner", "outer"]


def test_second_derivatives_through_packed_tensors(m):
    a, b = leaves(m)
    h = a * 1.5  # a non-leaf, packed too
    with m.autograd.graph.saved_tensors_hooks(lambda x: x * 4, lambda x: x / 4):
        y = (h * h * b).sin()
    (g,) = m.autograd.grad(y.sum(), a, create_graph=True)
    g.sum().backward()
    c, d = leaves(m)
    (want,) = m.autograd.grad((c * 1.5 * c * 1.5 * d).sin().sum(), c, create_graph=True)
    want.sum().backward()
    assert m.allclose(a.grad, c.grad) and m.allclose(b.grad, d.grad)


def test_saved_values_are_freed_by_a_backward(m):
    a, b = leaves(m)
    y = a * b
    y.sum().backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        _ = y.grad_fn._saved_self
    with m.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: x):
        y = a.exp()
    y.sum().backward()
    with pytest.raises(RuntimeError, match="directly access saved tensors after they have already been freed"):
        _ = y.grad_fn._saved_result


def test_a_saved_value_not_saved_for_this_node_is_none(m):
    a, _ = leaves(m)
    c = m.tensor(Y.copy(), dtype=m.float64)
    y = a * c
    assert y.grad_fn._saved_self is None and y.grad_fn._saved_other is c


def test_raw_saved_tensor_hooks_and_their_errors(m):
    log = []
    x, _ = leaves(m)
    y = x.pow(2)
    raw = y.grad_fn._raw_saved_self
    raw.register_hooks(lambda t: log.append("p") or t * 4, lambda t: log.append("u") or t / 4)
    assert log == ["p"]
    assert m.allclose(y.grad_fn._saved_self, x) and log == ["p", "u"]
    with pytest.raises(RuntimeError, match="whose hooks have already been set"):
        raw.register_hooks(lambda t: t, lambda t: t)
    y.sum().backward()
    assert m.allclose(x.grad, 2 * x) and log == ["p", "u", "u"]
    y = x.pow(2)
    raw = y.grad_fn._raw_saved_self
    y.sum().backward()
    with pytest.raises(RuntimeError, match="after it has been freed"):
        raw.register_hooks(lambda t: t, lambda t: t)
    with m.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        y = x.pow(2)
    with pytest.raises(RuntimeError, match="whose hooks have already been set"):
        y.grad_fn._raw_saved_self.register_hooks(lambda t: t, lambda t: t)


def test_hook_errors(m):
    a, b = leaves(m)
    h = a * 1.0
    with pytest.raises(RuntimeError, match="pack hook is modifying its input in place"):
        with m.autograd.graph.saved_tensors_hooks(lambda x: x.mul_(1), lambda x: x):
            h * h
    with m.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: 3):
        y = a * b
    with pytest.raises(TypeError, match="unpack_hook expected to be a Tensor but got result of type int"):
        y.sum().backward()
    with m.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
        with pytest.raises(RuntimeError, match="^no hooks here$"):
            with m.autograd.graph.save_on_cpu():
                pass
        a * b  # nothing to refuse without hooks
    with m.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: x):
        with pytest.raises(RuntimeError, match="^already hooked$"):
            with m.autograd.graph.disable_saved_tensors_hooks("already hooked"):
                pass
    with m.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: x):  # and usable again after
        a * b


def test_an_in_place_change_of_a_packed_tensor_is_not_checked(m):
    """With hooks the node no longer holds the tensor: PyTorch checks nothing, and reads what unpack returns."""
    a, b = leaves(m)
    h = a * 1.0
    with m.autograd.graph.saved_tensors_hooks(lambda x: x.detach().clone(), lambda x: x):
        y = h * b
    h.mul_(2)
    y.sum().backward()
    assert m.allclose(b.grad, a)
    y = h * b
    h.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_node_hooks_run_in_torch_s_order_and_replace_what_they_return():
    def program(m, log):
        b, _ = leaves(m)
        x = b * 2
        y = x.exp()
        x.register_hook(lambda g: log.append("tensor hook x"))
        x.retain_grad()
        x.grad_fn.register_prehook(lambda go: log.extend(["prehook x", go[0]]))
        x.grad_fn.register_hook(lambda gi, go: log.extend(["posthook x", gi[0], gi[1], go[0]]))
        y.grad_fn.register_prehook(lambda go: log.append("prehook y") or (go[0] * 10,))
        y.grad_fn.register_hook(lambda gi, go: log.extend(["posthook y", go[0]]) or (gi[0] * 0 + 1,))
        y.grad_fn.register_hook(lambda gi, go: log.extend(["posthook y2", gi[0]]))
        y.grad_fn.register_prehook(lambda go: log.extend(["prehook y2", go[0]]))
        y.sum().backward()
        log.extend([x.grad, b.grad])
        return log

    got = same(program)
    assert [e for e in got if isinstance(e, str)][:5] == [
        "prehook y",
        "prehook y2",
        "posthook y",
        "posthook y2",
        "tensor hook x",
    ]


def test_node_hooks_see_gradients_of_input_shapes_and_none_where_pruned():
    def program(m, log):
        p, q = leaves(m)
        z = p * q.sum()
        z.grad_fn.register_hook(lambda gi, go: log.extend(["gi", *gi, "go", *go]))
        log.extend(m.autograd.grad(z.sum(), p))
        z = p[None] * q[:, None]
        z.grad_fn.register_hook(lambda gi, go: log.extend(["gi", *gi]))
        z.sum().backward()
        return log

    got = same(program)
    assert got[2] is None


def test_node_hook_handles_metadata_and_errors(m):
    a, b = leaves(m)
    y = a * b
    assert isinstance(y.grad_fn, m.autograd.graph.Node) and y.grad_fn.name().startswith("MulBackward0")
    assert y.grad_fn.metadata == {}
    y.grad_fn.metadata["k"] = 1
    assert y.grad_fn.metadata == {"k": 1}
    handle = y.grad_fn.register_prehook(lambda go: (go[0] * 100,))
    handle.remove()
    y.grad_fn.register_hook(lambda gi, go: (gi[0],))
    with pytest.raises(RuntimeError, match="incorrect number of values \\(got 1, but expected 2\\)"):
        y.sum().backward()
    y = a * 3
    y.grad_fn.register_prehook(lambda go: (go[0], go[0]))
    with pytest.raises(RuntimeError, match="incorrect number of values \\(got 2, but expected 1\\)"):
        y.sum().backward()


def test_increment_version_counts_a_change_autograd_did_not_see(m):
    a, b = leaves(m)
    h = a * 1.0
    y = h * b
    m.autograd.graph.increment_version(h)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_torch_s_module_path_imports():
    import engine.autograd.graph as graph
    from engine.autograd.graph import saved_tensors_hooks

    assert graph.saved_tensors_hooks is saved_tensors_hooks is engine.autograd.graph.saved_tensors_hooks


def test_a_custom_function_s_node_hooks_see_its_tensor_inputs_only():
    def program(m, log):
        class Power(m.autograd.Function):  # `k`, a Python number, is no tensor input
            @staticmethod
            def forward(ctx, x, k):
                ctx.save_for_backward(x)
                ctx.k = k
                return x**k

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * ctx.k * x ** (ctx.k - 1), None

        x, _ = leaves(m)
        y = Power.apply(x, 3.0)
        y.grad_fn.register_prehook(lambda go: log.extend(["pre", *go]) or (go[0] * 2,))
        y.grad_fn.register_hook(lambda gi, go: log.extend(["post", len(gi), *gi, *go]) or (gi[0] + 1,))
        y.sum().backward()
        return [*log, x.grad]

    got = same(program)
    assert got[2:4] == ["post", 1]
    np.testing.assert_allclose(got[-1], 6 * X * X + 1)


def test_a_node_whose_hook_or_packed_value_refers_back_to_it_is_collected():
    import gc
    import weakref

    def graph():
        x, _ = leaves(engine)
        with engine.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):  # packs exp's output: y itself
            y = x.exp()
        y.grad_fn.register_hook(lambda gi, go: print(y))
        return weakref.ref(y.grad_fn)

    node = graph()
    gc.collect()
    assert node() is None


@pytest.mark.parametrize("register", ["register_hook", "register_prehook"])
def test_the_node_hook_docstrings_examples(register):
    def program(m, log):
        a = m.tensor([0.0, 0.0, 0.0], requires_grad=True)
        b = a.clone()
        doubled = (lambda gi, go: (go[0] * 2,)) if register == "register_hook" else (lambda go: (go[0] * 2,))
        handle = getattr(b.grad_fn, register)(doubled)
        b.sum().backward(retain_graph=True)
        log.append(a.grad)
        handle.remove()
        a.grad = None
        b.sum().backward(retain_graph=True)
        return [*log, a.grad]

    got = same(program)
    np.testing.assert_array_equal(got, [[2.0] * 3, [1.0] * 3])


def test_the_tutorials_save_to_disk_module_inside_data_parallel(m, tmp_path):
    def pack_hook(x):
        if x.numel() < 4:  # the tutorial's SAVE_ON_DISK_THRESHOLD, made small enough to reach the disk
            return x
        temp_file = SelfDeletingTempFile(tmp_path)
        m.save(x, temp_file.name)
        return temp_file

    def unpack_hook(tensor_or_sctf):
        return tensor_or_sctf if isinstance(tensor_or_sctf, m.Tensor) else m.load(tensor_or_sctf.name)

    class SaveToDisk(m.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, *args, **kwargs):
            with m.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook):
                return self.module(*args, **kwargs)

    m.manual_seed(0)
    net = m.nn.DataParallel(SaveToDisk(m.nn.Linear(5, 3)))
    x = m.randn(2, 5)
    net(x).tanh().sum().backward()
    assert os.listdir(tmp_path) == []
    weight = net.module.module.weight
    plain = (x @ weight.detach().T + net.module.module.bias.detach()).tanh()
    assert m.allclose(weight.grad, (1 - plain * plain).T @ x, atol=1e-6)
    assert list(net.state_dict()) == ["module.module.weight", "module.module.bias"]
