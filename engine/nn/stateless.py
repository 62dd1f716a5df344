"""`torch.func.functional_call`: a module called with some of its parameters and buffers replaced by the
given tensors (by their `state_dict` names), put back afterwards; what `vmap(grad(...))` per-sample
gradients are written with."""

from __future__ import annotations


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
