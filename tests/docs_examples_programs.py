"""Programs taken from the examples of PyTorch's API documentation (pytorch.org/docs: torch.optim and its
lr_scheduler, torch.nn.utils, torch.autograd and its Function, nn.Module's hooks and modes, torch.nn.functional's
losses, padding, one_hot and grid_sample; written for these tests in the docs' style, shortened): each takes the
module it runs on as `torch`, so the same code runs on real PyTorch (the oracle), `engine` and `client`. Weights
and data come from NumPy (`init`, `data`); each returns what it computed (losses, gradients, learning rates)."""

from __future__ import annotations

from tests.tutorial_training_programs import data, init, labels


def _regression(torch, seed=0, dtype=None):
    """The docs' "how to use an optimizer" model: Linear(4, 3) -> tanh -> Linear(3, 1) on 8 examples."""
    nn, dtype = torch.nn, dtype or torch.float32
    model = init(torch, nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1)), seed).to(dtype)
    x, y = torch.tensor(data(11, 8, 4), dtype=dtype), torch.tensor(data(12, 8, 1), dtype=dtype)
    return model, (lambda: torch.nn.functional.mse_loss(model(x), y))


def _trained(torch, make, steps=4, closure=False, dtype=None):
    """`steps` of the docs' loop (`optimizer.zero_grad(); loss.backward(); optimizer.step()`), or with a closure."""
    model, loss_of = _regression(torch, dtype=dtype)
    optimizer = make(model.parameters())
    losses = []
    for _ in range(steps):
        if closure:

            def step():
                optimizer.zero_grad()
                loss = loss_of()
                loss.backward()
                return loss

            losses.append(float(optimizer.step(step)))
        else:
            optimizer.zero_grad()
            loss = loss_of()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return [losses, [p.detach() for p in model.parameters()]]


OPTIMIZERS = {
    "SGD(nesterov, weight_decay)": lambda o: lambda p: o.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2),
    "SGD(dampening, maximize)": lambda o: lambda p: o.SGD(p, lr=0.05, momentum=0.5, dampening=0.1, maximize=True),
    "Adam(amsgrad)": lambda o: lambda p: o.Adam(p, lr=0.05, betas=(0.8, 0.9), amsgrad=True, weight_decay=1e-3),
    "AdamW": lambda o: lambda p: o.AdamW(p, lr=0.05, weight_decay=0.1),
    "AdamW(amsgrad)": lambda o: lambda p: o.AdamW(p, lr=0.05, amsgrad=True),
    "RMSprop(centered, momentum)": lambda o: lambda p: o.RMSprop(p, lr=0.01, alpha=0.9, centered=True, momentum=0.5),
    "RMSprop(weight_decay)": lambda o: lambda p: o.RMSprop(p, lr=0.01, weight_decay=0.1),
    "Adagrad(lr_decay)": lambda o: lambda p: o.Adagrad(p, lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1),
    "Adadelta": lambda o: lambda p: o.Adadelta(p, lr=1.0, rho=0.8, weight_decay=1e-2),
    "Adamax": lambda o: lambda p: o.Adamax(p, lr=0.05, weight_decay=1e-2),
    "NAdam": lambda o: lambda p: o.NAdam(p, lr=0.05, momentum_decay=4e-3),
    "NAdam(decoupled)": lambda o: lambda p: o.NAdam(p, lr=0.05, weight_decay=0.1, decoupled_weight_decay=True),
    "RAdam": lambda o: lambda p: o.RAdam(p, lr=0.05),
    "RAdam(decoupled)": lambda o: lambda p: o.RAdam(p, lr=0.05, weight_decay=0.1, decoupled_weight_decay=True),
    "ASGD": lambda o: lambda p: o.ASGD(p, lr=0.05, t0=2),
    "Rprop": lambda o: lambda p: o.Rprop(p, lr=0.01, etas=(0.4, 1.3), step_sizes=(1e-4, 1.0)),
}


def every_optimizer(torch):
    """Each optimizer of torch.optim with its common options, four steps from the same weights."""
    return {name: _trained(torch, make(torch.optim)) for name, make in OPTIMIZERS.items()}


def lbfgs(torch):
    """LBFGS with the docs' closure, plain and with the strong-Wolfe line search (in float64: its 40 iterations
    would amplify float32's rounding differences); `step` returns the first loss."""
    plain = _trained(torch, lambda p: torch.optim.LBFGS(p, lr=0.5, max_iter=5, history_size=3), 3, closure=True)
    wolfe = _trained(torch, lambda p: torch.optim.LBFGS(p, line_search_fn="strong_wolfe"), 2, True, torch.float64)
    return {"plain": plain, "wolfe": wolfe}


def per_parameter_options(torch):
    """The docs' per-parameter options (`base` at the default lr, `classifier` at its own) and add_param_group for a
    head unfrozen later; param_groups' options as the optimizer filled them in."""
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.base = nn.Linear(4, 3)
            self.classifier = nn.Linear(3, 2)
            self.head = nn.Linear(2, 1)

        def forward(self, x):
            return self.head(self.classifier(self.base(x).relu()))

    model = init(torch, Net())
    x, y = torch.tensor(data(1, 6, 4)), torch.tensor(data(2, 6, 1))
    optimizer = torch.optim.SGD(
        [{"params": model.base.parameters()}, {"params": model.classifier.parameters(), "lr": 1e-3}],
        lr=1e-2,
        momentum=0.9,
    )
    losses = []
    for step in range(4):
        if step == 2:
            optimizer.add_param_group({"params": model.head.parameters(), "lr": 0.1, "momentum": 0.0})
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    groups = [
        [g["lr"], g["momentum"], g["dampening"], g["weight_decay"], g["nesterov"], len(g["params"])]
        for g in optimizer.param_groups
    ]
    return {"losses": losses, "groups": groups, "params": [p.detach() for p in model.parameters()]}


def optimizer_state_dict(torch):
    """Saving and resuming training mid-way (the docs' state_dict()/load_state_dict()): Adam's state and a StepLR's
    through a save/load, into a fresh model, optimizer and scheduler, give the uninterrupted run's numbers."""
    import io

    def fresh():
        model, loss_of = _regression(torch)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.05, amsgrad=True)
        return model, loss_of, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)

    def train(loss_of, optimizer, scheduler, steps):
        out = []
        for _ in range(steps):
            optimizer.zero_grad()
            loss = loss_of()
            loss.backward()
            optimizer.step()
            scheduler.step()
            out.append(loss.item())
        return out

    model, loss_of, optimizer, scheduler = fresh()
    whole = train(loss_of, optimizer, scheduler, 5)
    model, loss_of, optimizer, scheduler = fresh()
    first = train(loss_of, optimizer, scheduler, 3)
    buffer = io.BytesIO()
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, buffer
    )
    buffer.seek(0)
    saved = torch.load(buffer)
    model, loss_of, optimizer, scheduler = fresh()
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    state = saved["optimizer"]
    step = float(state["state"][0]["step"])  # (PyTorch's optimizer then counts on in this very tensor)
    rest = train(loss_of, optimizer, scheduler, 2)
    return {
        "whole": whole,
        "resumed": first + rest,
        "keys": sorted(state),
        "state keys": sorted(state["state"][0]),
        "step": step,
        "group": sorted(k for k in state["param_groups"][0] if k != "params"),
        "params ids": state["param_groups"][0]["params"],
        "lr": scheduler.get_last_lr(),
    }


def _lrs(torch, make, steps=10, base=0.1, momentum=0.9):
    """The lr each step of an SGD run under the scheduler `make(optimizer)` gives (`get_last_lr()` after `step`)."""
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=base, momentum=momentum)
    scheduler = make(optimizer)
    seen = [scheduler.get_last_lr()[0]]
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        seen.append(scheduler.get_last_lr()[0])
    return [seen, optimizer.param_groups[0]["lr"]]


def lr_schedulers(torch):
    """The lr_scheduler docs' examples, their lrs step by step."""
    s = torch.optim.lr_scheduler
    return {
        "StepLR": _lrs(torch, lambda o: s.StepLR(o, step_size=3, gamma=0.1)),
        "MultiStepLR": _lrs(torch, lambda o: s.MultiStepLR(o, milestones=[2, 5], gamma=0.5)),
        "ExponentialLR": _lrs(torch, lambda o: s.ExponentialLR(o, gamma=0.8)),
        "CosineAnnealingLR": _lrs(torch, lambda o: s.CosineAnnealingLR(o, T_max=4, eta_min=0.01)),
        "OneCycleLR": _lrs(torch, lambda o: s.OneCycleLR(o, max_lr=1.0, total_steps=11)),
        "OneCycleLR(linear)": _lrs(
            torch, lambda o: s.OneCycleLR(o, max_lr=0.5, epochs=2, steps_per_epoch=6, anneal_strategy="linear")
        ),
        "LambdaLR": _lrs(torch, lambda o: s.LambdaLR(o, lr_lambda=lambda epoch: 0.95**epoch)),
        "MultiplicativeLR": _lrs(torch, lambda o: s.MultiplicativeLR(o, lr_lambda=lambda epoch: 0.9)),
        "LinearLR": _lrs(torch, lambda o: s.LinearLR(o, start_factor=0.5, total_iters=4)),
        "ConstantLR": _lrs(torch, lambda o: s.ConstantLR(o, factor=0.5, total_iters=4)),
        "PolynomialLR": _lrs(torch, lambda o: s.PolynomialLR(o, total_iters=4, power=2.0)),
        "CosineAnnealingWarmRestarts": _lrs(torch, lambda o: s.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2)),
        "CyclicLR": _lrs(torch, lambda o: s.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=3)),
        "CyclicLR(triangular2)": _lrs(
            torch, lambda o: s.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=2, mode="triangular2")
        ),
        "ChainedScheduler": _lrs(
            torch,
            lambda o: s.ChainedScheduler(
                [s.ConstantLR(o, factor=0.1, total_iters=2), s.ExponentialLR(o, gamma=0.9)], optimizer=o
            ),
        ),
        "SequentialLR": _lrs(
            torch,
            lambda o: s.SequentialLR(
                o,
                schedulers=[s.ConstantLR(o, factor=0.1, total_iters=2), s.ExponentialLR(o, gamma=0.9)],
                milestones=[2],
            ),
        ),
    }


def reduce_lr_on_plateau(torch):
    """ReduceLROnPlateau stepped with a validation loss that stalls (mode min, then mode max with threshold_mode
    abs and a cooldown); the lrs after each epoch."""
    s = torch.optim.lr_scheduler
    losses = [1.0, 0.9, 0.9, 0.91, 0.95, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]
    out = {}
    for name, make in {
        "min": lambda o: s.ReduceLROnPlateau(o, "min", patience=1, factor=0.5),
        "max": lambda o: s.ReduceLROnPlateau(
            o, mode="max", patience=0, threshold=0.05, threshold_mode="abs", cooldown=2, min_lr=0.02
        ),
    }.items():
        optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
        scheduler = make(optimizer)
        seen = []
        for val_loss in losses:
            optimizer.step()
            scheduler.step(val_loss)
            seen.append(optimizer.param_groups[0]["lr"])
        out[name] = [seen, scheduler.get_last_lr()]
    return out


def clip_and_vectorize(torch):
    """torch.nn.utils: clip_grad_norm_ (2-norm, inf-norm, 1-norm; the total norm it returns), clip_grad_value_,
    parameters_to_vector and vector_to_parameters."""
    nn, u = torch.nn, torch.nn.utils
    model, loss_of = _regression(torch)
    out = {}
    for name, clip in {
        "2": lambda p: u.clip_grad_norm_(p, max_norm=0.5),
        "inf": lambda p: u.clip_grad_norm_(p, max_norm=0.1, norm_type=float("inf")),
        "1": lambda p: u.clip_grad_norm_(p, 1.0, norm_type=1),
        "value": lambda p: u.clip_grad_value_(p, clip_value=0.05),
    }.items():
        model.zero_grad()
        (loss_of() * 10).backward()
        total = clip(model.parameters())
        out[name] = [None if total is None else float(total), [p.grad for p in model.parameters()]]
    vec = u.parameters_to_vector(model.parameters())
    u.vector_to_parameters(vec * 2 - 0.5, model.parameters())
    other = nn.Linear(4, 3)
    u.vector_to_parameters(vec[:15], other.parameters())
    out["vector"] = [vec, [p.detach() for p in model.parameters()], other.weight.detach(), other.bias.detach()]
    return out


def weight_norm_parametrization(torch):
    """nn.utils.parametrizations.weight_norm on a Linear (dim 0) and a Conv1d (dim None): original0/original1,
    the recomputed weight, a training step's grads, and remove_parametrizations keeping the weight."""
    nn, P = torch.nn, torch.nn.utils.parametrize
    lin = init(torch, nn.Linear(4, 3))
    conv = init(torch, nn.Conv1d(2, 3, 2), seed=1)
    lin = nn.utils.parametrizations.weight_norm(lin)
    conv = nn.utils.parametrizations.weight_norm(conv, dim=None)
    g, v = lin.parametrizations.weight.original0, lin.parametrizations.weight.original1
    x = torch.tensor(data(1, 5, 4))
    optimizer = torch.optim.SGD([*lin.parameters(), *conv.parameters()], lr=0.1)
    losses = []
    for _ in range(2):
        optimizer.zero_grad()
        loss = lin(x).pow(2).mean() + conv(x[:, :2].T.unsqueeze(0)).pow(2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    names = sorted(n for n, _ in lin.named_parameters())
    grads = [g.grad, v.grad, conv.parametrizations.weight.original0.grad]
    weight = lin.weight.detach()
    P.remove_parametrizations(lin, "weight")
    return {
        "names": names,
        "shapes": [list(g.shape), list(v.shape)],
        "losses": losses,
        "grads": grads,
        "weight": weight,
        "kept": lin.weight.detach(),
        "plain": P.is_parametrized(lin),
    }


def anomaly_detection(torch):
    """The detect_anomaly docs' example: a Function whose backward returns nan; with anomaly detection on the
    backward raises naming it, without it the nan reaches the grad."""

    class MyFunc(torch.autograd.Function):
        @staticmethod
        def forward(ctx, inp):
            return inp.clone()

        @staticmethod
        def backward(ctx, g):
            return g / 0 * 0  # nan

    inp = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    MyFunc.apply(inp).sum().backward()
    quiet = bool(inp.grad.isnan().all())
    try:
        with torch.autograd.detect_anomaly():
            MyFunc.apply(inp).sum().backward()
        raised = None
    except RuntimeError as error:
        raised = str(error)
    return {"quiet nan": quiet, "raised": raised, "enabled": torch.is_anomaly_enabled()}


def forward_mode_docs(torch):
    """torch.autograd.forward_ad's docs: dual tensors through a few ops, unpack_dual's namedtuple, a tangent that
    is None outside a dual, nested dual levels refused, and the jvp of a small module's output."""
    fwAD = torch.autograd.forward_ad
    primal, tangent = torch.tensor(data(1, 3, 2)), torch.tensor(data(2, 3, 2))
    with fwAD.dual_level():
        dual = fwAD.make_dual(primal, tangent)
        out = (dual.sin() * dual + dual.exp().sum(0)).tanh()
        unpacked = fwAD.unpack_dual(out)
        plain = fwAD.unpack_dual(primal).tangent
        jvp = unpacked.tangent
        value = unpacked.primal
        lin = init(torch, torch.nn.Linear(2, 2))
        moved = fwAD.unpack_dual(torch.nn.functional.softplus(lin(dual))).tangent
    return {"value": value, "jvp": jvp, "names": list(unpacked._fields), "plain": plain, "module": moved}


def module_hooks_and_modes(torch, replace=True):
    """nn.Module's docs: a forward pre-hook changing the input, a forward hook changing the output, a full backward
    hook seeing grad_output and (with `replace`) replacing grad_input, handles removed, named_modules,
    apply(init_weights), state_dict with BatchNorm buffers, and train()/eval() switching Dropout and BatchNorm."""
    nn = torch.nn
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Dropout(0.5), nn.Linear(3, 2))

    def init_weights(m):
        if type(m) is nn.Linear:
            nn.init.constant_(m.weight, 0.1)
            m.bias.data.fill_(0.01)

    model.apply(init_weights)
    seen = []
    pre = model[0].register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    post = model[4].register_forward_hook(lambda m, args, output: output + 1)

    def backward_hook(module, grad_input, grad_output):
        seen.append(grad_output[0].clone())
        return (grad_input[0] * 0.5,) if replace else None

    back = model[4].register_full_backward_hook(backward_hook)
    x = torch.tensor(data(1, 6, 4))
    model.train()
    model[3].p = 0.0  # Dropout's draws are each library's own; its mode switch is what is compared
    out = model(x)
    out.pow(2).sum().backward()
    grads = [model[0].weight.grad, model[4].weight.grad]
    for handle in (pre, post, back):
        handle.remove()
    model[3].p = 0.5
    model.eval()
    evaluated = model(x)
    dropout_eval = model[3](x)
    state = model.state_dict()
    return {
        "train out": out,
        "grads": grads,
        "seen": seen,
        "eval out": evaluated,
        "dropout eval": dropout_eval,
        "names": [name for name, _ in model.named_modules()],
        "state keys": list(state),
        "buffers": [state["1.running_mean"], state["1.running_var"], int(state["1.num_batches_tracked"])],
        "training": [m.training for m in model.modules()],
    }


def functional_losses(torch):
    """torch.nn.functional's losses as their docs call them: cross_entropy with class indices, label_smoothing,
    class probabilities and weights; nll_loss with weight and ignore_index; kl_div with log_target and batchmean;
    binary_cross_entropy_with_logits with pos_weight; the gradients of each."""
    F = torch.nn.functional
    logits = torch.tensor(data(1, 5, 4), requires_grad=True)
    target = torch.tensor(labels(2, 5, 4))
    probs = torch.tensor(data(3, 5, 4)).softmax(dim=1)
    weight = torch.tensor([1.0, 2.0, 0.5, 1.5])
    ignored = torch.tensor([0, -100, 3, 1, -100])
    losses = {
        "ce smoothing": F.cross_entropy(logits, target, label_smoothing=0.1),
        "ce probs": F.cross_entropy(logits, probs),
        "ce probs smoothing weight": F.cross_entropy(logits, probs, weight=weight, label_smoothing=0.2),
        "ce weight ignore": F.cross_entropy(logits, ignored, weight=weight, label_smoothing=0.1),
        "ce none": F.cross_entropy(logits, target, reduction="none"),
        "nll weight ignore": F.nll_loss(F.log_softmax(logits, dim=1), ignored, weight=weight),
        "nll ignore 3": F.nll_loss(F.log_softmax(logits, dim=1), target, ignore_index=3, reduction="sum"),
        "kl log_target": F.kl_div(F.log_softmax(logits, dim=1), probs.log(), reduction="batchmean", log_target=True),
        "kl": F.kl_div(F.log_softmax(logits, dim=1), probs, reduction="batchmean"),
        "bce pos_weight": F.binary_cross_entropy_with_logits(logits, probs, pos_weight=weight),
    }
    out = {}
    for name, loss in losses.items():
        (g,) = torch.autograd.grad(loss.sum(), logits)
        out[name] = [loss, g]
    return out


def pad_one_hot_grid_sample(torch):
    """F.pad in each mode (constant with a value, reflect, replicate, circular; negative padding crops), F.one_hot
    with and without num_classes, F.grid_sample (bilinear/nearest, zeros/border/reflection, align_corners) with
    affine_grid; values and gradients."""
    F = torch.nn.functional
    x = torch.tensor(data(1, 1, 2, 3, 4), requires_grad=True)
    out = {}
    for name, pad in {
        "constant": lambda t: F.pad(t, (1, 2), value=0.5),
        "constant 2d": lambda t: F.pad(t, (1, 1, 2, 0)),
        "crop": lambda t: F.pad(t, (-1, 1, 0, -1)),
        "reflect": lambda t: F.pad(t, (2, 1, 1, 2), mode="reflect"),
        "replicate": lambda t: F.pad(t, (3, 0, 1, 1), mode="replicate"),
        "circular": lambda t: F.pad(t, (1, 2, 2, 1), mode="circular"),
    }.items():
        y = pad(x)
        (g,) = torch.autograd.grad((y * y.detach().cos()).sum(), x)
        out[name] = [y, g]
    out["one_hot"] = [F.one_hot(torch.arange(0, 5) % 3), F.one_hot(torch.tensor([[0, 2], [1, 0]]), num_classes=4)]
    theta = torch.tensor([[[0.9, -0.2, 0.1], [0.3, 1.1, -0.2]]], requires_grad=True)
    for align in (False, True):
        grid = F.affine_grid(theta, [1, 2, 3, 4], align_corners=align)
        for mode in ("bilinear", "nearest"):
            for padding in ("zeros", "border", "reflection"):
                y = F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)
                wrt = (x, theta) if mode == "bilinear" else (x,)
                grads = torch.autograd.grad((y * y.detach().sin()).sum(), wrt)
                out[f"grid {mode} {padding} {align}"] = [y, list(grads)]
    return out


def gumbel_softmax_docs(torch):
    """F.gumbel_softmax's docs: soft samples sum to one, hard ones are one-hot with the straight-through gradient
    (the soft sample's); the draws are each library's own, so what is returned holds for any draw."""
    F = torch.nn.functional
    torch.manual_seed(0)
    logits = torch.tensor(data(1, 20, 6), requires_grad=True)
    soft = F.gumbel_softmax(logits, tau=0.5)
    hard = F.gumbel_softmax(logits, tau=1, hard=True)
    (g,) = torch.autograd.grad((hard * torch.arange(6.0)).sum(), logits)
    return {
        "soft sums": soft.sum(-1),
        "hard sums": hard.sum(-1),
        "hard values": sorted(set(hard.detach().flatten().tolist())),
        "grad sums": g.sum(-1),
        "dim0": F.gumbel_softmax(logits, dim=0).sum(0),
    }


def optimizer_extras(torch):
    """What the optimizer docs show besides `step`: an lr changed by hand in param_groups, zero_grad(set_to_none=False)
    leaving zeros, step pre- and post-hooks, LambdaLR with a lambda per group, and clip_grad_norm_'s
    error_if_nonfinite."""
    model, loss_of = _regression(torch)
    optimizer = torch.optim.SGD(
        [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.05}], lr=0.1, momentum=0.5
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=[lambda e: 0.5**e, lambda e: 1.0 / (e + 1)])
    calls = []
    pre = optimizer.register_step_pre_hook(lambda opt, args, kwargs: calls.append(("pre", len(opt.state))))
    optimizer.register_step_post_hook(lambda opt, args, kwargs: calls.append(("post", len(opt.state))))
    losses, lrs = [], []
    for step in range(4):
        optimizer.zero_grad(set_to_none=step % 2 == 0)
        if step == 1:
            zeros = [float(p.grad.abs().sum()) for p in model.parameters()]
        loss = loss_of()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step == 1:
            pre.remove()
            for group in optimizer.param_groups:
                group["lr"] *= 10
        losses.append(loss.item())
        lrs.append([g["lr"] for g in optimizer.param_groups])
    model[0].weight.grad.fill_(float("inf"))
    try:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
        raised = None
    except RuntimeError as error:
        raised = str(error)
    return {"losses": losses, "lrs": lrs, "calls": calls, "zeros": zeros, "raised": raised}


def module_introspection(torch):
    """nn.Module's docs on what a model holds: print(model), children and named_parameters, get_submodule, a
    non-persistent buffer left out of state_dict, load_state_dict(strict=False)'s missing and unexpected keys,
    parameters(recurse=False), requires_grad_(False) freezing, and to(torch.float64)."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3, padding=1, bias=False)
            self.norm = nn.BatchNorm2d(2)
            self.scale = nn.Parameter(torch.ones(1))
            self.register_buffer("steps", torch.zeros(1), persistent=False)

        def forward(self, x):
            self.steps += 1
            return self.norm(self.conv(x)).relu() * self.scale

    model = nn.Sequential(Block(), nn.Flatten(), nn.Linear(2 * 4 * 4, 3), nn.LogSoftmax(dim=1))
    init(torch, model)
    out = model(torch.tensor(data(1, 2, 1, 4, 4)))
    state = model.state_dict()
    del state["2.bias"]
    state["extra.weight"] = torch.zeros(1)
    result = model.load_state_dict(state, strict=False)
    model[0].requires_grad_(False)
    model.to(torch.float64)
    return {
        "repr": repr(model),
        "children": [type(c).__name__ for c in model.children()],
        "named": [(n, list(p.shape), p.requires_grad) for n, p in model.named_parameters()],
        "submodule": repr(model.get_submodule("0.norm")),
        "state keys": list(model.state_dict()),
        "missing": list(result.missing_keys),
        "unexpected": list(result.unexpected_keys),
        "own": [list(p.shape) for p in model[0].parameters(recurse=False)],
        "buffers": [(n, float(b.sum())) for n, b in model.named_buffers()],
        "dtypes": sorted({str(p.dtype) for p in model.parameters()}),
        "out": out,
    }


def init_deterministic(torch):
    """nn.init's deterministic functions as their docs call them: calculate_gain for each nonlinearity, eye_,
    dirac_ (grouped too), constant_, ones_, zeros_; and the scale of the random ones (their draws differ)."""
    nn, init_ = torch.nn, torch.nn.init
    gains = [
        init_.calculate_gain(name)
        for name in ("linear", "conv2d", "sigmoid", "tanh", "relu", "selu", "conv_transpose1d")
    ]
    gains += [init_.calculate_gain("leaky_relu", 0.2), init_.calculate_gain("leaky_relu")]
    w = torch.empty(3, 5)
    conv = torch.empty(4, 2, 3, 3)
    out = {"gains": gains, "eye": init_.eye_(w).clone(), "dirac": init_.dirac_(conv).clone()}
    out["dirac groups"] = init_.dirac_(torch.empty(4, 1, 3), groups=2)
    out["filled"] = [init_.constant_(torch.empty(2), 0.3), init_.ones_(torch.empty(2)), init_.zeros_(torch.empty(2))]
    big = torch.empty(400, 300)
    out["xavier"] = round(float(init_.xavier_uniform_(big, gain=init_.calculate_gain("relu")).abs().max()), 2)
    out["kaiming"] = round(float(init_.kaiming_normal_(big, mode="fan_out", nonlinearity="relu").std()), 2)
    out["trunc"] = round(float(init_.trunc_normal_(big, std=0.02, a=-0.04, b=0.04).abs().max()), 2)
    out["requires_grad"] = init_.normal_(nn.Linear(2, 2).weight).requires_grad
    return out


def spectral_norm_parametrization(torch):
    """nn.utils.parametrizations.spectral_norm: after enough training-mode forwards the power iteration (from each
    library's own random start) has converged, so the weight divided by its largest singular value, the eval-mode
    output and its gradient agree."""
    nn = torch.nn
    lin = nn.Linear(4, 3)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[3.0, 0.5, 0.0, 0.2], [0.1, 1.0, 0.3, 0.0], [0.0, 0.2, 0.5, 0.1]]))
        lin.bias.zero_()
    lin = nn.utils.parametrizations.spectral_norm(lin, n_power_iterations=3)
    x = torch.tensor(data(1, 2, 4))
    for _ in range(10):
        lin(x)
    lin.eval()
    out = lin(x)
    out.pow(2).sum().backward()
    return {
        "weight": lin.weight.detach(),
        "sigma": float(torch.linalg.matrix_norm(lin.weight.detach(), ord=2)),
        "out": out,
        "grad": lin.parametrizations.weight.original.grad,
        "names": sorted(n for n, _ in lin.named_parameters()),
    }


def functional_more(torch):
    """More torch.nn.functional docs examples with their gradients: interpolate (nearest, bilinear with and without
    align_corners, bicubic, area; size and scale_factor), unfold/fold's round trip, normalize, cosine_similarity,
    pairwise_distance, embedding with padding_idx, triplet_margin_loss and cross_entropy on (N, C, d) input."""
    F = torch.nn.functional
    x = torch.tensor(data(1, 1, 2, 3, 4), requires_grad=True)
    out = {}
    for name, call in {
        "nearest": lambda t: F.interpolate(t, scale_factor=2, mode="nearest"),
        "bilinear": lambda t: F.interpolate(t, size=(5, 7), mode="bilinear", align_corners=False),
        "bilinear aligned": lambda t: F.interpolate(t, scale_factor=1.5, mode="bilinear", align_corners=True),
        "bicubic": lambda t: F.interpolate(t, size=(4, 6), mode="bicubic", align_corners=False),
        "area": lambda t: F.interpolate(t, size=(2, 2), mode="area"),
        "unfold fold": lambda t: F.fold(
            F.unfold(t, kernel_size=2, padding=1), output_size=(3, 4), kernel_size=2, padding=1
        ),
        "normalize": lambda t: F.normalize(t, p=2.0, dim=1),
    }.items():
        y = call(x)
        (g,) = torch.autograd.grad((y * y.detach().cos()).sum(), x)
        out[name] = [y, g]
    a, b = torch.tensor(data(2, 4, 5), requires_grad=True), torch.tensor(data(3, 4, 5))
    for name, value in {
        "cosine": F.cosine_similarity(a, b, dim=1),
        "pairwise": F.pairwise_distance(a, b, p=1.5, keepdim=True),
        "triplet": F.triplet_margin_loss(a, b, a.detach().flip(0), margin=0.5, swap=True),
        "ce nd": F.cross_entropy(a.reshape(2, 2, 5), torch.tensor(labels(4, 10, 2)).reshape(2, 5), reduction="sum"),
    }.items():
        (g,) = torch.autograd.grad(value.sum(), a)
        out[name] = [value, g]
    weight = torch.tensor(data(5, 5, 3), requires_grad=True)
    emb = F.embedding(torch.tensor([[0, 2, 0, 4], [4, 3, 2, 1]]), weight, padding_idx=0)
    (out["embedding"],) = torch.autograd.grad(emb.pow(2).sum(), weight)
    return out


TENSOR_CASES = {
    "cdist": lambda m, a, b: m.cdist(a, b, p=2.0),
    "cdist1": lambda m, a, b: m.cdist(a, b, p=1.0),
    "diff": lambda m, a, b: m.diff(a, n=2, dim=1),
    "kron": lambda m, a, b: m.kron(a[:2, :2], b[:2, :3]),
    "block_diag": lambda m, a, b: m.block_diag(a[:2, :2], b[:1, :3]),
    "trapezoid": lambda m, a, b: m.trapezoid(a, dx=0.5),
    "logcumsumexp": lambda m, a, b: m.logcumsumexp(a, dim=1),
    "renorm": lambda m, a, b: a.renorm(2, 0, 1.0),
    "rot90": lambda m, a, b: m.rot90(a, 1, [0, 1]),
    "roll": lambda m, a, b: m.roll(a, shifts=(1, -2), dims=(0, 1)),
    "take_along_dim": lambda m, a, b: m.take_along_dim(a, a.argsort(dim=1), dim=1),
    "tensor unfold": lambda m, a, b: a.unfold(1, 2, 1),
    "index_put acc": lambda m, a, b: a.index_put((m.tensor([0, 0, 2]),), b[:3], accumulate=True),
    "masked_scatter": lambda m, a, b: a.masked_scatter(a > 0, b),
    "scatter_reduce amax": lambda m, a, b: m.zeros(3, 4).scatter_reduce(
        0, m.tensor([[0, 1, 2, 0]] * 3), a[:3], reduce="amax", include_self=False
    ),
    "nan_to_num": lambda m, a, b: m.nan_to_num(a.log(), nan=0.5, neginf=-3.0),
    "cartesian_prod": lambda m, a, b: m.cartesian_prod(a[0, :2], b[0, :3]),
    "tril_indices": lambda m, a, b: m.tril_indices(3, 4, offset=1).float().sum() * a.sum(),
    "searchsorted": lambda m, a, b: m.searchsorted(m.tensor([0.0, 1.0, 2.0]), a).float() * a,
    "bucketize": lambda m, a, b: m.bucketize(a, m.tensor([-1.0, 0.0, 1.0]), right=True).float() + a,
    "histc": lambda m, a, b: m.histc(a.detach(), bins=4, min=-2, max=2) + a.sum(),
    "cummax": lambda m, a, b: m.cummax(a, dim=1).values,
    "aminmax": lambda m, a, b: m.stack(list(m.aminmax(a, dim=1))),
    "quantile": lambda m, a, b: m.quantile(a, m.tensor([0.25, 0.5]), dim=1, interpolation="linear"),
    "nanmean": lambda m, a, b: m.nanmean(a.log(), dim=1),
    "logaddexp": lambda m, a, b: m.logaddexp(a, b),
    "hypot": lambda m, a, b: m.hypot(a, b),
    "copysign": lambda m, a, b: m.copysign(a, b),
    "xlogy": lambda m, a, b: m.xlogy(a.abs(), b.abs()),
    "lerp": lambda m, a, b: m.lerp(a, b, 0.3),
    "addcmul": lambda m, a, b: m.addcmul(a, a, b, value=0.5),
    "baddbmm": lambda m, a, b: m.baddbmm(
        a[:2, :2].unsqueeze(0), a[:2].unsqueeze(0), b.T[:, :2].unsqueeze(0), beta=0.5, alpha=2.0
    ),
    "einsum bilinear": lambda m, a, b: m.einsum(
        "bn,anm,bm->ba", a[:2, :3], m.cat([b, b]).reshape(2, 3, 4)[:, :, :3], a[:2, 1:4]
    ),
    "var_mean": lambda m, a, b: m.stack(list(m.var_mean(a, dim=1, correction=0))),
    "std unbiased": lambda m, a, b: a.std(dim=0, unbiased=True),
    "norm fro": lambda m, a, b: m.norm(a, p="fro"),
    "linalg.vector_norm": lambda m, a, b: m.linalg.vector_norm(a, ord=3, dim=1),
    "matrix_norm nuc": lambda m, a, b: m.linalg.matrix_norm(a[:, :3], ord="nuc"),
    "frac": lambda m, a, b: m.frac(a * 3),
    "sinc": lambda m, a, b: m.sinc(a),
    "logit": lambda m, a, b: m.logit(a.sigmoid(), eps=1e-6),
    "clamp tensor": lambda m, a, b: m.clamp(a, min=b, max=b + 1),
    "where scalar": lambda m, a, b: m.where(a > 0, a, 0.0),
    "flip": lambda m, a, b: a.flip(0, 1),
    "movedim": lambda m, a, b: a.reshape(3, 2, 2).movedim(0, -1),
    "unflatten": lambda m, a, b: a.unflatten(1, (2, 2)),
    "tensor_split": lambda m, a, b: m.stack([t.sum() for t in m.tensor_split(a, (1, 3), dim=1)]),
    "dstack": lambda m, a, b: m.dstack([a, b]),
    "trace": lambda m, a, b: m.trace(a[:, :3]),
    "outer": lambda m, a, b: m.outer(a[0], b[0]),
    "cross": lambda m, a, b: m.linalg.cross(a[:, :3], b[:, :3]),
    "cosine_embedding": lambda m, a, b: m.nn.functional.cosine_embedding_loss(a, b, m.tensor([1, -1, 1])),
    "poisson_nll": lambda m, a, b: m.nn.functional.poisson_nll_loss(a, b.abs(), log_input=True, full=True),
    "gaussian_nll": lambda m, a, b: m.nn.functional.gaussian_nll_loss(a, b, a.abs() + 0.1, full=True),
    "multilabel_soft_margin": lambda m, a, b: m.nn.functional.multilabel_soft_margin_loss(a, (b > 0).float()),
    "multi_margin": lambda m, a, b: m.nn.functional.multi_margin_loss(a, m.tensor([0, 3, 1]), p=2, margin=0.5),
    "huber delta": lambda m, a, b: m.nn.functional.huber_loss(a, b, delta=0.5),
    "smooth_l1 beta": lambda m, a, b: m.nn.functional.smooth_l1_loss(a, b, beta=0.3),
    "soft_margin": lambda m, a, b: m.nn.functional.soft_margin_loss(a, b.sign()),
    "local_response_norm": lambda m, a, b: m.nn.functional.local_response_norm(a.reshape(1, 3, 4, 1), 2),
    "glu": lambda m, a, b: m.nn.functional.glu(a, dim=1),
    "rrelu eval": lambda m, a, b: m.nn.functional.rrelu(a, training=False),
    "hardtanh": lambda m, a, b: m.nn.functional.hardtanh(a, -0.5, 0.5),
    "softmin": lambda m, a, b: m.nn.functional.softmin(a, dim=1),
    "pdist": lambda m, a, b: m.nn.functional.pdist(a),
    "channel_shuffle": lambda m, a, b: m.nn.functional.channel_shuffle(a.reshape(1, 4, 3, 1), 2),
    "pixel_unshuffle": lambda m, a, b: m.nn.functional.pixel_unshuffle(a.reshape(1, 1, 3, 4)[:, :, :2], 2),
    "adaptive_max_pool2d": lambda m, a, b: m.nn.functional.adaptive_max_pool2d(a.reshape(1, 1, 3, 4), (2, 3)),
    "lp_pool2d": lambda m, a, b: m.nn.functional.lp_pool2d(a.abs().reshape(1, 1, 3, 4), 2, 2),
    "max_unpool": lambda m, a, b: m.nn.functional.max_unpool1d(
        *m.nn.functional.max_pool1d(a.unsqueeze(0), 2, return_indices=True), 2
    ),
    "embedding_bag": lambda m, a, b: m.nn.functional.embedding_bag(
        m.tensor([0, 2, 1, 2]), a, m.tensor([0, 1]), mode="max"
    ),
    "one_hot neg": lambda m, a, b: m.nn.functional.one_hot(m.tensor([1, 2]), -1).float() * a[0, 0],
}


def tensor_and_functional_docs(torch):
    """One-liners of the torch, Tensor, torch.linalg and torch.nn.functional docs pages (distances, differences,
    products, cumulative and sorted reductions, index and masked writes, elementwise specials, the less common
    losses, poolings and rearrangements), each value and its gradient (a weighted sum's) in a's entries."""
    out = {}
    for name, call in TENSOR_CASES.items():
        a, b = torch.tensor(data(1, 3, 4), requires_grad=True), torch.tensor(data(2, 3, 4))
        y = call(torch, a, b).float()
        weights = torch.ones_like(y).cumsum(-1) if y.ndim else torch.ones_like(y)
        (g,) = torch.autograd.grad((y * weights).sum(), a, allow_unused=True)
        out[name] = [y, "none" if g is None else g]
    return out


PROGRAMS = {
    "every_optimizer": every_optimizer,
    "lbfgs": lbfgs,
    "per_parameter_options": per_parameter_options,
    "optimizer_state_dict": optimizer_state_dict,
    "lr_schedulers": lr_schedulers,
    "reduce_lr_on_plateau": reduce_lr_on_plateau,
    "clip_and_vectorize": clip_and_vectorize,
    "weight_norm_parametrization": weight_norm_parametrization,
    "anomaly_detection": anomaly_detection,
    "forward_mode_docs": forward_mode_docs,
    "module_hooks_and_modes": module_hooks_and_modes,
    "functional_losses": functional_losses,
    "pad_one_hot_grid_sample": pad_one_hot_grid_sample,
    "gumbel_softmax_docs": gumbel_softmax_docs,
    "optimizer_extras": optimizer_extras,
    "module_introspection": module_introspection,
    "init_deterministic": init_deterministic,
    "spectral_norm_parametrization": spectral_norm_parametrization,
    "functional_more": functional_more,
    "tensor_and_functional_docs": tensor_and_functional_docs,
}
