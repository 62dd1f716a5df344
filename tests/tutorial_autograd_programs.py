"""PyTorch's autograd and torch.func tutorials and docs pages as short programs (adapted, smaller sizes;
written for these tests): each takes the module it runs on as `torch`, so the same code runs on real
PyTorch (through `modern_programs.with_numpy_draws`), `engine` and `client`. Each returns a dict of
what the tutorial prints or asserts, for the tests to compare with PyTorch's.

Sources: pytorch/tutorials intermediate_source/neural_tangent_kernels.py, ensembling.py,
per_sample_grads.py, jacobians_hessians.py, intermediate_source/forward_ad_usage.py,
custom_function_double_backward_tutorial.rst, custom_function_conv_bn_tutorial.py; pytorch/pytorch
docs/source/notes/autograd.rst, autograd.rst (torch.autograd.functional), checkpoint.rst; the
WGAN-GP gradient penalty of the GAN examples.
"""

from __future__ import annotations

import copy
import math
from functools import partial

import numpy as np


def seeded(torch, model, seed, scale=0.2):
    """Overwrites `model`'s parameters with draws from `seed` (so PyTorch starts from the same numbers)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(*p.shape) * scale)
    return model


def labels(torch, n, classes, seed):
    return torch.tensor(np.random.default_rng(seed).integers(0, classes, n))


# --- torch.func ------------------------------------------------------------------------------------


def neural_tangent_kernel(torch):
    """NTK of a small CNN: the Jacobian contraction (full, trace, diagonal) and the NTK-vector products."""
    nn, F = torch.nn, torch.nn.functional
    from_func = torch.func
    functional_call, vmap, jacrev, vjp, jvp = (
        from_func.functional_call,
        from_func.vmap,
        from_func.jacrev,
        from_func.vjp,
        from_func.jvp,
    )

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 4, (3, 3))
            self.conv2 = nn.Conv2d(4, 4, (3, 3))
            self.fc = nn.Linear(4 * 4 * 4, 3)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = F.relu(self.conv2(x))
            return self.fc(x.flatten(1))

    net = seeded(torch, CNN(), 1)
    torch.manual_seed(2)
    x_train = torch.randn(4, 3, 8, 8)
    x_test = torch.randn(3, 3, 8, 8)
    params = {k: v.detach() for k, v in net.named_parameters()}

    def fnet_single(params, x):
        return functional_call(net, params, (x.unsqueeze(0),)).squeeze(0)

    def ntk_jacobian_contraction(fnet_single, params, x1, x2, compute):
        jac1 = vmap(jacrev(fnet_single), (None, 0))(params, x1)
        jac1 = [j.flatten(2) for j in jac1.values()]
        jac2 = vmap(jacrev(fnet_single), (None, 0))(params, x2)
        jac2 = [j.flatten(2) for j in jac2.values()]
        einsum_expr = {"full": "Naf,Mbf->NMab", "trace": "Naf,Maf->NM", "diagonal": "Naf,Maf->NMa"}[compute]
        result = torch.stack([torch.einsum(einsum_expr, j1, j2) for j1, j2 in zip(jac1, jac2)])
        return result.sum(0)

    def ntk_ntk_vps(func, params, x1, x2):
        def get_ntk(x1, x2):
            def func_x1(params):
                return func(params, x1)

            def func_x2(params):
                return func(params, x2)

            output, vjp_fn = vjp(func_x1, params)

            def get_ntk_slice(vec):
                vjps = vjp_fn(vec)
                _, jvps = jvp(func_x2, (params,), vjps)
                return jvps

            basis = torch.eye(output.numel(), dtype=output.dtype, device=output.device).view(output.numel(), -1)
            return vmap(get_ntk_slice)(basis)

        return vmap(vmap(get_ntk, (None, 0)), (0, None))(x1, x2)

    out = {c: ntk_jacobian_contraction(fnet_single, params, x_train, x_test, c) for c in ("full", "trace", "diagonal")}
    out["vps"] = ntk_ntk_vps(fnet_single, params, x_train, x_test)
    out["same"] = bool(torch.allclose(out["full"], out["vps"], atol=1e-5))
    out["vps trace"], out["vps diagonal"] = torch.einsum("NMKK->NM", out["vps"]), torch.einsum("NMKK->NMK", out["vps"])
    return out


def model_ensembling(torch):
    """Five MLPs run at once: stack_module_state, a meta-device copy of one as the base model, and vmap over
    the models with different minibatches and with one shared minibatch."""
    nn, F = torch.nn, torch.nn.functional
    stack_module_state, functional_call, vmap = (
        torch.func.stack_module_state,
        torch.func.functional_call,
        torch.func.vmap,
    )

    class SimpleMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(49, 16)
            self.fc2 = nn.Linear(16, 16)
            self.fc3 = nn.Linear(16, 10)

        def forward(self, x):
            x = x.flatten(1)
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            return self.fc3(x)

    num_models = 5
    models = [seeded(torch, SimpleMLP(), 10 + i) for i in range(num_models)]
    torch.manual_seed(3)
    data = torch.randn(20, 8, 1, 7, 7)
    minibatches = data[:num_models]
    loop_different = [model(minibatch) for model, minibatch in zip(models, minibatches)]
    minibatch = data[0]
    loop_same = [model(minibatch) for model in models]

    params, buffers = stack_module_state(models)
    base_model = copy.deepcopy(models[0]).to("meta")

    def fmodel(params, buffers, x):
        return functional_call(base_model, (params, buffers), (x,))

    different = vmap(fmodel)(params, buffers, minibatches)
    same = vmap(fmodel, in_dims=(0, 0, None))(params, buffers, minibatch)
    return {
        "different": different,
        "same": same,
        "different matches loop": bool(torch.allclose(different, torch.stack(loop_different), atol=1e-3, rtol=1e-5)),
        "same matches loop": bool(torch.allclose(same, torch.stack(loop_same), atol=1e-3, rtol=1e-5)),
        "params": sorted(params),
        "stacked shape": tuple(params["fc1.weight"].shape),
    }


def patching_batch_norm(torch):
    """torch.func's "Patching Batch Norm" page: replace_all_batch_norm_modules_ drops a model's running statistics
    so that vmap(grad(...)) over samples runs it in training mode; the same with track_running_stats=False."""
    nn, F = torch.nn, torch.nn.functional
    func = torch.func
    model = seeded(torch, nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2)), 32)
    func.replace_all_batch_norm_modules_(model)
    bn = model[1]
    out = {"running_mean": bn.running_mean, "track_running_stats": bn.track_running_stats}
    params = {k: v.detach() for k, v in model.named_parameters()}
    torch.manual_seed(33)
    data, targets = torch.randn(5, 3, 4), labels(torch, 5 * 3, 2, 33).reshape(5, 3)

    def loss(params, batch, target):
        return F.cross_entropy(func.functional_call(model, params, (batch,)), target)

    out.update(
        {f"grad {k}": v for k, v in func.vmap(func.grad(loss), in_dims=(None, 0, 0))(params, data, targets).items()}
    )
    fresh = seeded(torch, nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6, track_running_stats=False)), 32)
    out["untracked"] = func.vmap(fresh)(data)
    return out


def per_sample_grads(torch):
    """Per-sample gradients of a small CNN: a loop of autograd.grad per sample, and vmap(grad(compute_loss))."""
    nn, F = torch.nn, torch.nn.functional
    functional_call, vmap, grad = torch.func.functional_call, torch.func.vmap, torch.func.grad

    class SimpleCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 4, 3, 1)
            self.conv2 = nn.Conv2d(4, 4, 3, 1)
            self.fc1 = nn.Linear(4 * 2 * 2, 8)
            self.fc2 = nn.Linear(8, 10)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = F.relu(self.conv2(x))
            x = F.max_pool2d(x, 2)
            x = torch.flatten(x, 1)
            x = F.relu(self.fc1(x))
            x = self.fc2(x)
            return F.log_softmax(x, dim=1)

    def loss_fn(predictions, targets):
        return F.nll_loss(predictions, targets)

    batch_size = 6
    torch.manual_seed(4)
    data = torch.randn(batch_size, 1, 8, 8)
    targets = labels(torch, batch_size, 10, 4)
    model = seeded(torch, SimpleCNN(), 5)

    def compute_grad(sample, target):
        prediction = model(sample.unsqueeze(0))
        loss = loss_fn(prediction, target.unsqueeze(0))
        return torch.autograd.grad(loss, list(model.parameters()))

    sample_grads = [compute_grad(data[i], targets[i]) for i in range(batch_size)]
    per_sample = [torch.stack(shards) for shards in zip(*sample_grads)]

    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def compute_loss(params, buffers, sample, target):
        predictions = functional_call(model, (params, buffers), (sample.unsqueeze(0),))
        return loss_fn(predictions, target.unsqueeze(0))

    ft_per_sample = vmap(grad(compute_loss), in_dims=(None, None, 0, 0))(params, buffers, data, targets)
    out = {f"ft {k}": v for k, v in ft_per_sample.items()}
    out.update({f"loop {i}": g for i, g in enumerate(per_sample)})
    out["agree"] = all(
        bool(torch.allclose(a, b, atol=3e-3, rtol=1e-5)) for a, b in zip(per_sample, ft_per_sample.values())
    )
    return out


def jacobians_hessians(torch):
    """Jacobians row by row and with vjp+vmap, jacrev/jacfwd with argnums, hessian three ways, batch
    Jacobians and Hessians, and hvp as jvp of grad."""
    F = torch.nn.functional
    vmap, vjp, jvp, jacrev, jacfwd, hessian, grad = (
        torch.func.vmap,
        torch.func.vjp,
        torch.func.jvp,
        torch.func.jacrev,
        torch.func.jacfwd,
        torch.func.hessian,
        torch.func.grad,
    )

    def predict(weight, bias, x):
        return F.linear(x, weight, bias).tanh()

    D = 6
    torch.manual_seed(6)
    weight = torch.randn(D, D)
    bias = torch.randn(D)
    x = torch.randn(D)
    out = {}

    xp = x.clone().requires_grad_()
    unit_vectors = torch.eye(D)
    rows = [torch.autograd.grad(predict(weight, bias, xp), xp, vec)[0] for vec in unit_vectors]
    out["loop"] = jacobian = torch.stack(rows)
    _, vjp_fn = vjp(partial(predict, weight, bias), x)
    (out["vmap vjp"],) = vmap(vjp_fn)(unit_vectors)
    out["jacrev"] = jacrev(predict, argnums=2)(weight, bias, x)
    out["jacrev w"], out["jacrev b"] = jacrev(predict, argnums=(0, 1))(weight, bias, x)
    out["jacfwd"] = jacfwd(predict, argnums=2)(weight, bias, x)
    out["agree"] = all(bool(torch.allclose(out[k], jacobian, atol=1e-6)) for k in ("vmap vjp", "jacrev", "jacfwd"))

    out["hessian"] = hessian(predict, argnums=2)(weight, bias, x)
    out["fwdfwd"] = jacfwd(jacfwd(predict, argnums=2), argnums=2)(weight, bias, x)
    out["revrev"] = jacrev(jacrev(predict, argnums=2), argnums=2)(weight, bias, x)
    out["fwdrev"] = jacfwd(jacrev(predict, argnums=2), argnums=2)(weight, bias, x)

    batch_size, d_in, d_out = 5, 3, 4
    torch.manual_seed(7)
    weight = torch.randn(d_out, d_in)
    bias = torch.randn(d_out)
    x = torch.randn(batch_size, d_in)
    out["batch jacobian"] = vmap(jacrev(predict, argnums=2), in_dims=(None, None, 0))(weight, bias, x)

    def predict_with_output_summed(weight, bias, x):
        return predict(weight, bias, x).sum(0)

    out["summed jacobian"] = jacrev(predict_with_output_summed, argnums=2)(weight, bias, x).movedim(1, 0)
    out["batch hessian"] = vmap(hessian(predict, argnums=2), in_dims=(None, None, 0))(weight, bias, x)

    def hvp(f, primals, tangents):
        return jvp(grad(f), primals, tangents)[1]

    def hvp_revrev(f, primals, tangents):
        _, vjp_fn = vjp(grad(f), *primals)
        return vjp_fn(*tangents)

    def f(x):
        return x.sin().sum()

    torch.manual_seed(8)
    x = torch.randn(64)
    tangent = torch.randn(64)
    out["hvp"] = hvp(f, (x,), (tangent,))
    (out["hvp revrev"],) = hvp_revrev(f, (x,), (tangent,))
    return out


def func_grad_and_value(torch):
    """torch.func.grad with argnums and has_aux, grad_and_value, vjp with has_aux, and jacrev/jacfwd with has_aux
    (the torch.func docs)."""
    func = torch.func
    torch.manual_seed(9)
    x, y = torch.randn(4), torch.randn(4)

    def loss(x, y):
        z = (x * y).sin()
        return z.sum(), {"z": z}

    out = {"cos": func.grad(lambda t: t.sin().sum())(x)}
    out["gx"], out["gy"] = func.grad(lambda a, b: (a * b.exp()).sum(), argnums=(0, 1))(x, y)
    out["grad aux"], aux = func.grad(loss, has_aux=True)(x, y)
    out["aux z"] = aux["z"]
    (g, (value, _)) = func.grad_and_value(loss, argnums=1, has_aux=True)(x, y)
    out["gv grad"], out["gv value"] = g, value
    result, vjp_fn, aux = func.vjp(lambda t: (t.exp(), t.sum()), x, has_aux=True)
    (out["vjp"],) = vjp_fn(torch.ones_like(result))
    out["vjp aux"] = aux
    out["second"] = func.grad(func.grad(lambda t: t.sin().sum()))(x[0])
    out["jacrev aux"] = func.jacrev(lambda t: (t.sin(), {"cos": t.cos()}), has_aux=True, chunk_size=2)(x)
    out["jacfwd aux"] = func.jacfwd(lambda t, u: (t * u, u.sum()), argnums=(0, 1), has_aux=True, randomness="same")(
        x, y
    )
    return out


# --- forward-mode AD -----------------------------------------------------------------------------------


def forward_ad_usage(torch):
    """The forward-mode AD tutorial: dual tensors, modules with dual parameters (setattr and functional_call),
    a custom Function's jvp, gradcheck of the forward AD, and func.jvp."""
    fwAD, nn = torch.autograd.forward_ad, torch.nn
    out = {}
    torch.manual_seed(11)
    primal = torch.randn(5, 5)
    tangent = torch.randn(5, 5)

    def fn(x, y):
        return x**2 + y**2

    with fwAD.dual_level():
        dual_input = fwAD.make_dual(primal, tangent)
        out["tangent is tangent"] = fwAD.unpack_dual(dual_input).tangent is tangent
        dual_input_alt = fwAD.make_dual(primal, tangent.T)
        out["T tangent is not tangent"] = fwAD.unpack_dual(dual_input_alt).tangent is not tangent
        plain_tensor = torch.randn(5, 5)
        dual_output = fn(dual_input, plain_tensor)
        out["jvp"] = fwAD.unpack_dual(dual_output).tangent
        out["primal"] = fwAD.unpack_dual(dual_output).primal
    out["after exit"] = fwAD.unpack_dual(dual_output).tangent is None

    model = seeded(torch, nn.Linear(5, 5), 12)
    torch.manual_seed(13)
    input = torch.randn(16, 5)
    params = {name: p for name, p in model.named_parameters()}
    tangents = {name: torch.rand(*p.shape) for name, p in params.items()}
    with fwAD.dual_level():
        for name, p in params.items():
            delattr(model, name)
            setattr(model, name, fwAD.make_dual(p, tangents[name]))
        out["module jvp"] = fwAD.unpack_dual(model(input)).tangent

    model = seeded(torch, nn.Linear(5, 5), 12)
    dual_params = {}
    with fwAD.dual_level():
        for name, p in params.items():
            dual_params[name] = fwAD.make_dual(p, tangents[name])
        out["functional_call jvp"] = fwAD.unpack_dual(torch.func.functional_call(model, dual_params, input)).tangent

    primal = torch.randn(4, 4, dtype=torch.double, requires_grad=True)
    tangent = torch.randn(4, 4, dtype=torch.double)
    with fwAD.dual_level():
        out["exp jvp"] = fwAD.unpack_dual(primal.exp() + fwAD.make_dual(primal, tangent) * 0).tangent

    x = torch.randn(4, 4)

    def f(x, y):
        return x**2 + y**2

    primal_out, tangent_out = torch.func.jvp(lambda p: f(p, x), (primal.detach().float(),), (tangent.float(),))
    out["func.jvp"] = tangent_out
    out["func.jvp primal"] = primal_out

    model = seeded(torch, nn.Linear(5, 5), 14)
    tangents = tuple(torch.rand(*p.shape) for p in model.parameters())
    params = dict(model.named_parameters())

    def func(*values):
        return torch.func.functional_call(model, dict(zip(params, values)), (input,))

    _, out["module func.jvp"] = torch.func.jvp(func, tuple(params.values()), tangents)

    def func_params_only(params):  # the tuple of parameters as one primal (a pytree)
        return func(*params)

    _, out["params-only func.jvp"] = torch.func.jvp(func_params_only, (tuple(params.values()),), (tangents,))
    return out


def forward_ad_custom_function(torch):
    """A custom Function with only forward and jvp (ctx.result kept on ctx), used through dual tensors and
    checked by gradcheck(check_forward_ad=True, check_backward_ad=False)."""
    fwAD = torch.autograd.forward_ad

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, foo):
            result = torch.exp(foo)
            ctx.result = result
            return result

        @staticmethod
        def jvp(ctx, gI):
            gO = gI * ctx.result
            del ctx.result
            return gO

    torch.manual_seed(15)
    primal = torch.randn(3, 3, dtype=torch.double, requires_grad=True)
    tangent = torch.randn(3, 3, dtype=torch.double)
    with fwAD.dual_level():
        out = {"jvp": fwAD.unpack_dual(Fn.apply(fwAD.make_dual(primal, tangent))).tangent}
    out["gradcheck"] = torch.autograd.gradcheck(
        Fn.apply,
        (primal,),
        check_forward_ad=True,
        check_backward_ad=False,
        check_undefined_grad=False,
        check_batched_grad=False,
    )
    return out


# --- custom Functions ------------------------------------------------------------------------------------


def double_backward_custom_functions(torch):
    """The double backward tutorial: Square saving its input, Exp saving its output, Sinh saving
    intermediates as extra outputs, and Cube whose backward is itself a custom Function."""
    gradcheck, gradgradcheck = torch.autograd.gradcheck, torch.autograd.gradgradcheck

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**2

        @staticmethod
        def backward(ctx, grad_out):
            (x,) = ctx.saved_tensors
            return grad_out * 2 * x

    class Exp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            result = torch.exp(x)
            ctx.save_for_backward(result)
            return result

        @staticmethod
        def backward(ctx, grad_out):
            (result,) = ctx.saved_tensors
            return result * grad_out

    class Sinh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            expx = torch.exp(x)
            expnegx = torch.exp(-x)
            ctx.save_for_backward(expx, expnegx)
            return (expx - expnegx) / 2, expx, expnegx

        @staticmethod
        def backward(ctx, grad_out, _grad_out_exp, _grad_out_negexp):
            expx, expnegx = ctx.saved_tensors
            grad_input = grad_out * (expx + expnegx) / 2
            grad_input += _grad_out_exp * expx
            grad_input -= _grad_out_negexp * expnegx
            return grad_input

    def sinh(x):
        return Sinh.apply(x)[0]

    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        def backward(ctx, grad_out):
            (x,) = ctx.saved_tensors
            return CubeBackward.apply(grad_out, x)

    class CubeBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, grad_out, x):
            ctx.save_for_backward(x, grad_out)
            return grad_out * 3 * x**2

        @staticmethod
        def backward(ctx, grad_out):
            x, sav_grad_out = ctx.saved_tensors
            dx = grad_out * sav_grad_out * 6 * x
            dgrad_out = grad_out * 3 * x**2
            return dgrad_out, dx

    torch.manual_seed(16)
    x = torch.rand(3, 3, requires_grad=True, dtype=torch.double)
    out = {}
    for name, f in (("square", Square.apply), ("exp", Exp.apply), ("sinh", sinh), ("cube", Cube.apply)):
        out[f"{name} gradcheck"] = gradcheck(f, x)
        out[f"{name} gradgradcheck"] = gradgradcheck(f, x, raise_exception=False)
        (d1,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
        (d2,) = torch.autograd.grad(d1.sum(), x)
        out[f"{name} d1"], out[f"{name} d2"] = d1, d2
    scalar = torch.tensor(2.0, requires_grad=True, dtype=torch.double)
    out["cube scalar"] = gradcheck(Cube.apply, scalar) and gradgradcheck(Cube.apply, scalar)
    return out


def extending_func_with_function(torch):
    """The "Extending torch.func with autograd.Function" docs: a Function with forward(x) and setup_context that
    returns and saves an intermediate (dx) as a second output, under func.grad (twice), vmap and jacrev."""
    func = torch.func

    class MyCube(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            result = x**3
            dx = 3 * x**2
            return result, dx

        @staticmethod
        def setup_context(ctx, inputs, output):
            (x,) = inputs
            result, dx = output
            ctx.save_for_backward(x, dx)

        @staticmethod
        def backward(ctx, grad_output, grad_dx):
            x, dx = ctx.saved_tensors
            return grad_output * dx + grad_dx * 6 * x

    def my_cube(x):
        result, _ = MyCube.apply(x)
        return result

    torch.manual_seed(27)
    x = torch.randn(4, dtype=torch.double)
    return {
        "grad": func.grad(lambda t: my_cube(t).sum())(x),
        "grad of grad": func.grad(lambda t: func.grad(lambda u: my_cube(u).sum())(t).sum())(x),
        "vmap": func.vmap(my_cube)(x.reshape(2, 2)),
        "jacrev": func.jacrev(my_cube)(x),
        "gradgradcheck": torch.autograd.gradgradcheck(my_cube, x.clone().requires_grad_()),
    }


def _unsqueeze_all(t):
    return t[None, :, None, None]


def _convolution_backward(F, grad_out, X, weight):
    grad_input = F.conv2d(X.transpose(0, 1), grad_out.transpose(0, 1)).transpose(0, 1)
    grad_X = F.conv_transpose2d(grad_out, weight)
    return grad_X, grad_input


def _batch_norm_backward(grad_out, X, sum, sqrt_var, N, eps):
    tmp = ((X - _unsqueeze_all(sum) / N) * grad_out).sum(dim=(0, 2, 3))
    tmp *= -1
    d_denom = tmp / (sqrt_var + eps) ** 2
    d_var = d_denom / (2 * sqrt_var)
    d_mean_dx = grad_out / _unsqueeze_all(sqrt_var + eps)
    d_mean_dx = _unsqueeze_all(-d_mean_dx.sum(dim=(0, 2, 3)) / N)
    grad_input = X * _unsqueeze_all(d_var * N)
    grad_input += _unsqueeze_all(-d_var * sum)
    grad_input *= 2 / ((N - 1) * N)
    grad_input += d_mean_dx
    grad_input *= _unsqueeze_all(sqrt_var + eps)
    grad_input += grad_out
    grad_input /= _unsqueeze_all(sqrt_var + eps)
    return grad_input


def fused_conv_bn(torch):
    """The Conv+BN fusion tutorial: Conv2D and BatchNorm as custom Functions, gradchecked, their fusion
    (whose backward returns more Nones than it has inputs), a module around it, and a training step."""
    nn, F = torch.nn, torch.nn.functional

    class Conv2D(torch.autograd.Function):
        @staticmethod
        def forward(ctx, X, weight):
            ctx.save_for_backward(X, weight)
            return F.conv2d(X, weight)

        @staticmethod
        def backward(ctx, grad_out):
            X, weight = ctx.saved_tensors
            return _convolution_backward(F, grad_out, X, weight)

    class BatchNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, X, eps=1e-3):
            sum = X.sum(dim=(0, 2, 3))
            var = X.var(unbiased=True, dim=(0, 2, 3))
            N = X.numel() / X.size(1)
            sqrt_var = torch.sqrt(var)
            ctx.save_for_backward(X)
            ctx.eps, ctx.sum, ctx.N, ctx.sqrt_var = eps, sum, N, sqrt_var
            mean = sum / N
            denom = sqrt_var + eps
            out = X - _unsqueeze_all(mean)
            out /= _unsqueeze_all(denom)
            return out

        @staticmethod
        def backward(ctx, grad_out):
            (X,) = ctx.saved_tensors
            return _batch_norm_backward(grad_out, X, ctx.sum, ctx.sqrt_var, ctx.N, ctx.eps)

    class FusedConvBN2DFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, X, conv_weight, eps=1e-3):
            assert X.ndim == 4
            ctx.save_for_backward(X, conv_weight)
            X = F.conv2d(X, conv_weight)
            sum = X.sum(dim=(0, 2, 3))
            var = X.var(unbiased=True, dim=(0, 2, 3))
            N = X.numel() / X.size(1)
            sqrt_var = torch.sqrt(var)
            ctx.eps, ctx.sum, ctx.N, ctx.sqrt_var = eps, sum, N, sqrt_var
            mean = sum / N
            denom = sqrt_var + eps
            out = X - _unsqueeze_all(mean)
            out /= _unsqueeze_all(denom)
            return out

        @staticmethod
        def backward(ctx, grad_out):
            X, conv_weight = ctx.saved_tensors
            X_conv_out = F.conv2d(X, conv_weight)
            grad_out = _batch_norm_backward(grad_out, X_conv_out, ctx.sum, ctx.sqrt_var, ctx.N, ctx.eps)
            grad_X, grad_input = _convolution_backward(F, grad_out, X, conv_weight)
            return grad_X, grad_input, None, None, None, None, None

    class FusedConvBN(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, eps=1e-3, device=None, dtype=None):
            super().__init__()
            factory_kwargs = {"device": device, "dtype": dtype}
            weight_shape = (out_channels, in_channels, kernel_size, kernel_size)
            self.conv_weight = nn.Parameter(torch.empty(*weight_shape, **factory_kwargs))
            self.eps = eps
            self.reset_parameters()

        def forward(self, X):
            return FusedConvBN2DFunction.apply(X, self.conv_weight, self.eps)

        def reset_parameters(self) -> None:
            nn.init.kaiming_uniform_(self.conv_weight, a=math.sqrt(5))

    torch.manual_seed(17)
    weight = torch.rand(3, 2, 3, 3, requires_grad=True, dtype=torch.double)
    X = torch.rand(2, 2, 5, 5, requires_grad=True, dtype=torch.double)
    out = {"conv gradcheck": torch.autograd.gradcheck(Conv2D.apply, (X, weight))}
    a = torch.rand(1, 2, 3, 4, requires_grad=True, dtype=torch.double)
    out["bn gradcheck"] = torch.autograd.gradcheck(BatchNorm.apply, (a,), fast_mode=False)
    out["fused gradcheck"] = torch.autograd.gradcheck(FusedConvBN2DFunction.apply, (X, weight))

    module = seeded(torch, FusedConvBN(2, 3, 3, dtype=torch.double), 18)
    out["init shape"] = tuple(FusedConvBN(2, 3, 3).conv_weight.shape)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    torch.manual_seed(19)
    data = torch.randn(4, 2, 6, 6, dtype=torch.double)
    target = torch.randn(4, 3, 4, 4, dtype=torch.double)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = F.mse_loss(module(data), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    out["losses"], out["weight"] = losses, module.conv_weight
    return out


# --- torch.autograd ------------------------------------------------------------------------------------


def autograd_mechanics(torch):
    """The autograd mechanics notes: grad modes (set_grad_enabled, inference_mode, no_grad as a decorator), the
    in-place correctness check, retain_grad, and backward hooks on tensors and nodes."""
    out = {}
    torch.manual_seed(20)
    x = torch.randn(5, requires_grad=True)
    with torch.set_grad_enabled(False):
        out["set_grad_enabled(False)"] = (x * 2).requires_grad
    with torch.autograd.no_grad(), torch.autograd.grad_mode.set_grad_enabled(True):
        out["autograd's grad modes"] = (x * 2).requires_grad, torch.autograd.inference_mode is torch.inference_mode
    torch.set_grad_enabled(True)
    with torch.inference_mode():
        inf = x * 2
        out["in inference mode"] = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
        with torch.inference_mode(False):
            out["inference_mode(False)"] = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
    out["inference requires_grad"] = inf.requires_grad
    out["is_inference_mode_enabled"] = torch.is_inference_mode_enabled()

    @torch.no_grad()
    def doubler(t):
        return t * 2

    out["decorated"] = doubler(x).requires_grad
    out["is_grad_enabled"] = torch.is_grad_enabled()

    a = torch.randn(3, requires_grad=True)
    b = a.sigmoid()
    b.mul_(2)  # sigmoid saved its output: modified in place
    try:
        b.sum().backward()
        out["inplace error"] = None
    except RuntimeError as error:
        out["inplace error"] = "modified by an inplace operation" in str(error)

    c = a * 2
    c.retain_grad()
    d = (c * c).sum()
    d.backward()
    out["retained grad"], out["a.grad"] = c.grad, a.grad

    seen = []
    z = a * 3
    z.register_hook(lambda g: seen.append(g.clone()))  # a non-leaf's hook reads its gradient
    handle = a.register_hook(lambda g: g * 2)  # a leaf's replaces it
    a.grad = None
    (z * z).sum().backward()
    handle.remove()
    out["seen"], out["tensor hook a.grad"] = seen, a.grad
    return out


def graph_internals(torch):
    """The mechanics notes' saved tensors and node hooks: `grad_fn._saved_self` is the input itself,
    `_saved_result` equals the output (another Variable object), `_raw_saved_self.register_hooks` packs and
    unpacks it, as `saved_tensors_hooks` does for every tensor saved in its block; a tensor hook, then the
    node's prehook and hook, run in PyTorch's order. The engine's only (the client's backward is the server's)."""
    torch.manual_seed(20)
    x = torch.randn(5, requires_grad=True)
    y = x.pow(2)
    out = {"saved self equal": bool(x.equal(y.grad_fn._saved_self)), "saved self is x": x is y.grad_fn._saved_self}
    y = x.exp()
    out["saved result equal"] = bool(y.equal(y.grad_fn._saved_result))
    out["saved result is y"] = y is y.grad_fn._saved_result
    y = x.pow(2)
    y.grad_fn._raw_saved_self.register_hooks(lambda t: t * 10, lambda t: t / 5)
    y.sum().backward()
    out["hooked grad"] = x.grad

    packed = []

    def pack_hook(t):
        packed.append(tuple(t.shape))
        return t * 1

    def unpack_hook(t):
        return t

    a = torch.randn(3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook):
        e = (a * a.exp()).sum()
    (out["hooks grad"],) = torch.autograd.grad(e, a)
    out["packed"] = sorted(packed)

    seen = []
    z = a * 3
    handle = z.register_hook(lambda g: seen.append("tensor") or g * 2)
    z.grad_fn.register_hook(lambda grad_inputs, grad_outputs: seen.append("node") or None)
    z.grad_fn.register_prehook(lambda grad_outputs: seen.append("prehook") or None)
    z.sum().backward()
    handle.remove()
    out["hook order"], out["hooked a.grad"] = seen, a.grad
    return out


def visualizing_gradients(torch, epochs=3):
    """The "Visualizing Gradients" tutorial: forward hooks on every leaf module register a backward hook on its
    output that records the gradient; two MLPs, with BatchNorm1d and with Identity, trained by SGD with momentum."""
    nn, F = torch.nn, torch.nn.functional

    def fc_layer(in_size, out_size, norm_layer):
        return nn.Sequential(nn.Linear(in_size, out_size), norm_layer(out_size), nn.Sigmoid())

    class Net(nn.Module):
        def __init__(self, in_size=7 * 7, hidden_size=16, out_size=10, num_layers=3, batchnorm=False):
            super().__init__()
            norm_layer = nn.BatchNorm1d if batchnorm else nn.Identity
            layers = [fc_layer(in_size, hidden_size, norm_layer)]
            layers += [fc_layer(hidden_size, hidden_size, norm_layer) for _ in range(num_layers - 1)]
            layers.append(nn.Linear(hidden_size, out_size))
            self.layers = nn.Sequential(*layers)

        def forward(self, x):
            return self.layers(torch.flatten(x, 1))

    def hook_forward(module_name, grads):
        def hook(module, args, output):
            output.register_hook(lambda grad: grads.append((module_name, grad)))

        return hook

    def get_all_layers(model):
        layers, grads = {}, []
        for name, layer in model.named_modules():
            if any(layer.children()) is False:
                layers[layer] = name
                layer.register_forward_hook(hook_forward(name, grads))
        return layers, grads

    torch.manual_seed(28)
    x = torch.randn(10, 7, 7)
    y = labels(torch, 10, 10, 28)
    out = {}
    for batchnorm in (True, False):
        model = seeded(torch, Net(batchnorm=batchnorm), 29)
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        layers, grads = get_all_layers(model)
        for _ in range(epochs):
            grads.clear()
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        key = "bn" if batchnorm else "nobn"
        out[f"{key} names"] = [name for name, _ in grads]
        out[f"{key} mean abs"] = [grad.abs().mean().item() for _, grad in grads]
        out[f"{key} loss"] = loss.item()
        out[f"{key} layers"] = sorted(layers.values())
    return out


def optimizer_step_in_backward(torch, steps=3):
    """The "optimizer step in backward" tutorial: one Adam per parameter, stepped by the parameter's
    post-accumulate-grad hook as soon as its gradient is accumulated (no optimizer.step() after backward)."""
    nn = torch.nn
    model = seeded(torch, nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 3)), 30)
    optimizer_dict = {p: torch.optim.Adam([p], foreach=False) for p in model.parameters()}

    def optimizer_hook(parameter) -> None:
        optimizer_dict[parameter].step()
        optimizer_dict[parameter].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(optimizer_hook)
    torch.manual_seed(31)
    x, target = torch.randn(5, 6), torch.randn(5, 3)
    losses = []
    for _ in range(steps):
        loss = (model(x) - target).pow(2).mean()
        loss.backward()
        losses.append(loss.item())
    return {"losses": losses, "grads": [p.grad for p in model.parameters()], "weight": model[0].weight}


def gradient_penalty(torch):
    """WGAN-GP: the critic's gradient with respect to interpolates between real and fake samples
    (autograd.grad with create_graph and grad_outputs), its norm per sample, and a critic update."""
    nn = torch.nn
    critic = seeded(torch, nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1)), 21)
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
    torch.manual_seed(22)
    real = torch.randn(8, 2, 3)
    fake = torch.randn(8, 2, 3)

    def compute_gradient_penalty(D, real_samples, fake_samples, alpha):
        interpolates = (alpha * real_samples + ((1 - alpha) * fake_samples)).requires_grad_(True)
        d_interpolates = D(interpolates.view(interpolates.size(0), -1))
        ones = torch.ones(real_samples.shape[0], 1).fill_(1.0)
        gradients = torch.autograd.grad(
            outputs=d_interpolates,
            inputs=interpolates,
            grad_outputs=ones,
            create_graph=True,
            retain_graph=True,
            only_inputs=True,
        )[0]
        gradients = gradients.view(gradients.size(0), -1)
        return ((gradients.norm(2, dim=1) - 1) ** 2).mean()

    out = {"penalties": [], "losses": []}
    for _ in range(3):
        optimizer.zero_grad()
        alpha = torch.rand(real.size(0), 1, 1)
        penalty = compute_gradient_penalty(critic, real, fake, alpha)
        loss = -critic(real.flatten(1)).mean() + critic(fake.flatten(1)).mean() + 10 * penalty
        loss.backward()
        optimizer.step()
        out["penalties"].append(penalty.item())
        out["losses"].append(loss.item())
    out["weight"] = critic[0].weight
    return out


def autograd_functional(torch):
    """torch.autograd.functional: vjp, jvp, jacobian (tuple inputs, create_graph, strict, vectorize,
    strategy), hessian, hvp, vhp, as the API docs call them."""
    AF = torch.autograd.functional
    torch.manual_seed(23)
    x = torch.randn(3, dtype=torch.double)
    y = torch.randn(3, dtype=torch.double)
    v = torch.ones(3, dtype=torch.double)

    def exp_reducer(x):
        return x.exp().sum(dim=1)

    def exp_adder(x, y):
        return 2 * x.exp() + 3 * y

    def pow_reducer(x):
        return x.pow(3).sum()

    def pow_adder_reducer(x, y):
        return (2 * x.pow(2) + 3 * y.pow(2)).sum()

    inputs = torch.rand(4, 4, dtype=torch.double)
    out = {}
    out["vjp out"], out["vjp"] = AF.vjp(exp_reducer, inputs, torch.ones(4, dtype=torch.double))
    out["jvp out"], out["jvp"] = AF.jvp(exp_reducer, inputs, torch.ones(4, 4, dtype=torch.double))
    out["jacobian"] = AF.jacobian(exp_reducer, torch.rand(2, 2, dtype=torch.double))
    jac = AF.jacobian(exp_reducer, inputs, create_graph=True)
    out["jacobian create_graph"] = jac.requires_grad and jac.grad_fn is not None
    out["jacobian tuple"] = AF.jacobian(exp_adder, (x, y))
    out["jacobian vectorize"] = AF.jacobian(exp_adder, (x, y), vectorize=True)
    out["jacobian forward"] = AF.jacobian(exp_adder, (x, y), vectorize=True, strategy="forward-mode")
    out["hessian"] = AF.hessian(pow_reducer, x)
    out["hessian tuple"] = AF.hessian(pow_adder_reducer, (x, y))
    out["hessian vectorize"] = AF.hessian(pow_adder_reducer, (x, y), vectorize=True)
    out["hvp"] = AF.hvp(pow_reducer, x, v)
    out["vhp"] = AF.vhp(pow_reducer, x, v)
    out["hvp tuple"] = AF.hvp(pow_adder_reducer, (x, y), (v, v))
    out["vhp tuple"] = AF.vhp(pow_adder_reducer, (x, y), (v, v))
    try:
        AF.jacobian(lambda a, b: a * 2, (x, y), strict=True)
        out["strict"] = None
    except RuntimeError as error:
        out["strict"] = str(error)
    out["not strict"] = AF.jacobian(lambda a, b: a * 2, (x, y))
    try:
        AF.jvp(lambda a, b: a * 2, (x, y), (v, v), strict=True)
        out["jvp strict"] = None
    except RuntimeError as error:
        out["jvp strict"] = str(error)
    return out


def checkpointing(torch):
    """torch.utils.checkpoint: checkpoint of a function and checkpoint_sequential of an nn.Sequential, with
    use_reentrant=False, giving the values and gradients of the plain run."""
    nn = torch.nn
    from_checkpoint = __import__(f"{torch.__name__}.utils.checkpoint", fromlist=["checkpoint"])
    checkpoint, checkpoint_sequential = from_checkpoint.checkpoint, from_checkpoint.checkpoint_sequential
    model = seeded(torch, nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 2)), 24)
    torch.manual_seed(25)
    x = torch.randn(3, 4, requires_grad=True)
    out = {}

    def run(fn, key):
        model.zero_grad()
        x.grad = None
        y = fn(x)
        y.pow(2).sum().backward()
        out[f"{key} y"], out[f"{key} x.grad"], out[f"{key} w.grad"] = y, x.grad, model[0].weight.grad

    run(model, "plain")
    run(lambda t: checkpoint(model, t, use_reentrant=False), "checkpoint")
    run(lambda t: checkpoint_sequential(model, 2, t, use_reentrant=False), "sequential")
    run(
        lambda t: model[4](checkpoint(lambda u: model[3](model[2](model[1](model[0](u)))), t, use_reentrant=False)),
        "fn",
    )
    return out


def gradchecks(torch):
    """gradcheck and gradgradcheck as users call them: keywords, a failing check returning False with
    raise_exception=False, and raising GradcheckError otherwise."""
    gradcheck, gradgradcheck = torch.autograd.gradcheck, torch.autograd.gradgradcheck
    torch.manual_seed(26)
    a = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
    b = torch.randn(4, 2, dtype=torch.double, requires_grad=True)
    out = {
        "mm": gradcheck(torch.mm, (a, b), eps=1e-6, atol=1e-4),
        "mm gradgrad": gradgradcheck(torch.mm, (a, b)),
        "fast": gradcheck(lambda t: t.tanh().sum(1), (a,), fast_mode=True),
        "forward ad": gradcheck(lambda t: t.sin() * t, (a,), check_forward_ad=True),
        "nondet": gradcheck(torch.sigmoid, a, nondet_tol=1e-7),
    }

    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad_out):
            (x,) = ctx.saved_tensors
            return grad_out * x  # should be 2 * x

    out["wrong quiet"] = gradcheck(Wrong.apply, (a,), raise_exception=False)
    try:
        gradcheck(Wrong.apply, (a,))
        out["wrong raises"] = None
    except RuntimeError as error:
        out["wrong raises"] = (type(error).__name__, "Jacobian mismatch" in str(error))
    return out


PROGRAMS = {
    "neural_tangent_kernel": neural_tangent_kernel,
    "model_ensembling": model_ensembling,
    "patching_batch_norm": patching_batch_norm,
    "per_sample_grads": per_sample_grads,
    "jacobians_hessians": jacobians_hessians,
    "func_grad_and_value": func_grad_and_value,
    "forward_ad_usage": forward_ad_usage,
    "forward_ad_custom_function": forward_ad_custom_function,
    "double_backward_custom_functions": double_backward_custom_functions,
    "extending_func_with_function": extending_func_with_function,
    "fused_conv_bn": fused_conv_bn,
    "autograd_mechanics": autograd_mechanics,
    "graph_internals": graph_internals,
    "visualizing_gradients": visualizing_gradients,
    "optimizer_step_in_backward": optimizer_step_in_backward,
    "gradient_penalty": gradient_penalty,
    "autograd_functional": autograd_functional,
    "checkpointing": checkpointing,
    "gradchecks": gradchecks,
}
