"""`torch.func.functional_call`: a module called with some of its parameters and buffers replaced by the
given tensors (by their `state_dict` names), put back afterwards; what `vmap(grad(...))` per-sample
gradients are written with; `torch.func.stack_module_state`, the ensembles it is called on."""

from __future__ import annotations

from engine.nn.functional import _ns
from engine.nn.module_classes import _BatchNorm
from engine.user_warnings import warn


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True, strict=False):
    dicts = parameter_and_buffer_dicts
    dicts = list(dicts) if isinstance(dicts, (list, tuple)) else [dicts]
    merged: dict = {}
    for entries in dicts:
        for name, value in entries.items():
            if name in merged:
                raise ValueError(f"{name} appeared in multiple dictionaries; behavior of functional call is ambiguous")
            merged[name] = value
    if strict:
        names = {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()}
        missing, unexpected = sorted(names - set(merged)), sorted(set(merged) - names)
        if missing or unexpected:
            lines = [
                f"\n\t{what} key(s): {', '.join(map(repr, keys))}."
                for what, keys in (("Unexpected", unexpected), ("Missing", missing))
                if keys
            ]
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}:{''.join(lines)}")
    swapped = []
    try:
        for name, value in merged.items():
            *path, attr = name.split(".")
            owner = module
            for part in path:
                owner = owner._modules[part]
            registry = owner._parameters if attr in owner._parameters else owner._buffers
            if attr not in registry:
                raise AttributeError(f"'{type(owner).__name__}' object has no parameter or buffer '{attr}' ({name})")
            swapped.append((registry, attr, registry[attr]))
            registry[attr] = value
        args = () if args is None else args if isinstance(args, tuple) else (args,)
        return module(*args, **(kwargs or {}))
    finally:
        for registry, attr, value in reversed(swapped):
            registry[attr] = value


def deprecated_functional_call(
    module, parameters_and_buffers, args=None, kwargs=None, *, tie_weights=True, strict=False
):
    """torch.nn.utils.stateless.functional_call: `functional_call`, with PyTorch's FutureWarning."""
    warn(
        "`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 and will be removed in a future "
        "version of PyTorch. Please use `torch.func.functional_call` instead which is a drop-in replacement.",
        FutureWarning,
    )
    return functional_call(module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict)


def stack_module_state(models) -> tuple[dict, dict]:
    """torch.func.stack_module_state: each parameter and buffer of `models` (modules of one class) stacked
    along a new first dimension, for `vmap` over `functional_call`; stacked parameters are new leaves that
    require grad when the models' do."""
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if len({m.training for m in models}) > 1:
        raise RuntimeError("stack_module_state: Expected all models to have the same training/eval mode.")
    if len({type(m) for m in models}) > 1:
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")

    def stacked(named: list[dict], name: str):
        tensors = [entries[name] for entries in named]
        wanted = {t.requires_grad for t in tensors}
        if len(wanted) > 1:
            raise RuntimeError(f"Expected {name} from each model to have the same .requires_grad")
        result = _ns(tensors[0]).stack(tensors)
        return result.detach().requires_grad_() if wanted == {True} else result

    params = [dict(m.named_parameters()) for m in models]
    buffers = [dict(m.named_buffers()) for m in models]
    return {k: stacked(params, k) for k in params[0]}, {k: stacked(buffers, k) for k in buffers[0]}


def replace_all_batch_norm_modules_(root):
    """torch.func's: every batch norm under `root` drops its running statistics (for vmap); `root` is returned."""
    for module in root.modules():
        if isinstance(module, _BatchNorm) and module.track_running_stats:
            module.running_mean = module.running_var = module.num_batches_tracked = None
            module.track_running_stats = False
    return root
