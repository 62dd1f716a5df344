"""`torch.nn.utils.weight_norm` and `spectral_norm`, the hook-based forms PyTorch keeps beside the
parametrizations: a forward pre-hook recomputes `module.<name>` (a plain attribute) before each call, from the
parameters `<name>_g` and `<name>_v` (weight_norm, deprecated with PyTorch's FutureWarning), or from
`<name>_orig` and the power iteration's buffers `<name>_u` and `<name>_v` (spectral_norm: one iteration a
call in training mode); `remove_weight_norm` / `remove_spectral_norm` make it a parameter again."""

from __future__ import annotations

from engine.nn.parametrizations import _norm_except_dim, _output_dim
from engine.user_warnings import warn


class WeightNorm:
    def __init__(self, name: str, dim) -> None:
        self.name, self.dim = name, -1 if dim is None else dim

    def compute_weight(self, module):
        g, v = getattr(module, self.name + "_g"), getattr(module, self.name + "_v")
        return v * (g / _norm_except_dim(v, self.dim))

    def remove(self, module) -> None:
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"], module._parameters[self.name + "_v"]
        setattr(module, self.name, module._parameter(weight.detach()))

    def __call__(self, module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


class SpectralNorm:
    def __init__(self, name="weight", n_power_iterations=1, dim=0, eps=1e-12) -> None:
        if n_power_iterations <= 0:
            raise ValueError(
                f"Expected n_power_iterations to be positive, but got n_power_iterations={n_power_iterations}"
            )
        self.name, self.dim, self.n_power_iterations, self.eps = name, dim, n_power_iterations, eps

    def reshape_weight_to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
        return weight.reshape(weight.shape[0], -1)

    def compute_weight(self, module, do_power_iteration: bool):
        ns, name = module._ns, self.name
        weight, u, v = (getattr(module, name + suffix) for suffix in ("_orig", "_u", "_v"))
        weight_mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            with ns.no_grad():
                for _ in range(self.n_power_iterations):
                    ns.nn.functional.normalize(ns.mv(weight_mat.mT, u), dim=0, eps=self.eps, out=v)
                    ns.nn.functional.normalize(ns.mv(weight_mat, v), dim=0, eps=self.eps, out=u)
                u, v = u.clone(), v.clone()
        return weight / ns.dot(u, ns.mv(weight_mat, v))

    def remove(self, module) -> None:
        with module._ns.no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        for suffix in ("", "_u", "_v", "_orig"):
            delattr(module, self.name + suffix)
        module.register_parameter(self.name, module._parameter(weight.detach()))

    def __call__(self, module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module, do_power_iteration=module.training))


def _hooked(module, kind, name, what: str) -> None:
    if any(isinstance(hook, kind) and hook.name == name for hook in module._forward_pre_hooks.values()):
        raise RuntimeError(f"Cannot register two {what} hooks on the same parameter {name}")


def weight_norm(module, name: str = "weight", dim=0):
    """Recompute `module.<name>` as g * v / ||v|| before each call (norms over every dimension but `dim`)."""
    warn(
        "`torch.nn.utils.weight_norm` is deprecated in favor of `torch.nn.utils.parametrizations.weight_norm`.",
        FutureWarning,
    )
    _hooked(module, WeightNorm, name, "weight_norm")
    fn = WeightNorm(name, dim)
    weight = module._parameters.pop(name)
    module.register_parameter(name + "_g", module._parameter(_norm_except_dim(weight, fn.dim).detach()))
    module.register_parameter(name + "_v", module._parameter(weight.detach()))
    setattr(module, name, fn.compute_weight(module))
    module.register_forward_pre_hook(fn)
    return module


def spectral_norm(module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim=None):
    """Recompute `module.<name>` as its `_orig` divided by its spectral norm before each call."""
    _hooked(module, SpectralNorm, name, "spectral_norm")
    fn = SpectralNorm(name, n_power_iterations, _output_dim(module) if dim is None else dim, eps)
    weight = module._parameters[name]
    if weight is None:
        raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
    ns = module._ns
    with ns.no_grad():
        h, w = fn.reshape_weight_to_matrix(weight).shape
        u = ns.nn.functional.normalize(weight.new_empty(h).normal_(0, 1), dim=0, eps=fn.eps)
        v = ns.nn.functional.normalize(weight.new_empty(w).normal_(0, 1), dim=0, eps=fn.eps)
    delattr(module, name)
    module.register_parameter(name + "_orig", weight)
    setattr(module, name, weight.detach())
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    module.register_forward_pre_hook(fn)
    return module


def _removed(module, kind, name: str, what: str):
    for key, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, kind) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[key]
            return module
    raise ValueError(f"{what} of '{name}' not found in {module}")


def remove_weight_norm(module, name: str = "weight"):
    return _removed(module, WeightNorm, name, "weight_norm")


def remove_spectral_norm(module, name: str = "weight"):
    return _removed(module, SpectralNorm, name, "spectral_norm")
