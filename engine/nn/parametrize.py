"""`torch.nn.utils.parametrize`, written once for every Variable class: a module's parameter (or buffer)
computed from an unconstrained `original` by parametrization modules, as PyTorch's parametrizations tutorial
writes them. `register_parametrization(module, "weight", Symmetric())` moves `weight` to
`module.parametrizations.weight.original` (through the parametrization's `right_inverse` when it has one) and
makes `module.weight` a property of a subclass made for the module, that computes the chain each time it is
read (once inside `cached()`); assigning `module.weight = X` stores `right_inverse(X)`. State dicts name
`parametrizations.weight.original`, as PyTorch's do."""

from __future__ import annotations

import contextlib

from engine.nn.sides import _ns

_CACHE: dict | None = None  # inside `cached()`: (id(module), name) -> the value computed first


@contextlib.contextmanager
def cached():
    """Each parametrized value computed once within the block (a model that reads a weight several times)."""
    global _CACHE
    outer, _CACHE = _CACHE, {} if _CACHE is None else _CACHE
    try:
        yield
    finally:
        _CACHE = outer


def _list_class(nn):
    """The side's ParametrizationList: the chain of parametrizations of one tensor, and its `original`."""
    made = getattr(nn, "_ParametrizationList", None)
    if made is not None:
        return made

    class ParametrizationList(nn.ModuleList):
        def __init__(self, modules, original, unsafe=False):
            super().__init__(modules)
            self.unsafe = unsafe
            self.is_tensor = not isinstance(original, tuple)
            originals = (original,) if self.is_tensor else original
            self._names = ["original"] if self.is_tensor else [f"original{i}" for i in range(len(originals))]
            for name, value in zip(self._names, originals):
                if isinstance(value, nn.Parameter):
                    setattr(self, name, value)
                else:
                    self.register_buffer(name, value)

        def _originals(self):
            return [getattr(self, name) for name in self._names]

        def right_inverse(self, value):
            """Store in `original` what the chain maps to `value` (each parametrization's right_inverse, last first)."""
            originals = self._originals()
            with _ns(originals[0]).no_grad():
                for module in reversed(list(self)):
                    if hasattr(module, "right_inverse"):
                        value = module.right_inverse(value)
                for original, new in zip(originals, (value,) if self.is_tensor else value):
                    original.copy_(new)

        def forward(self):
            value = self[0](*self._originals())
            for module in list(self)[1:]:
                value = module(value)
            return value

    nn._ParametrizationList = ParametrizationList
    return ParametrizationList


def is_parametrized(module, tensor_name=None) -> bool:
    parametrizations = getattr(module, "parametrizations", None)
    if parametrizations is None or not hasattr(parametrizations, "keys"):
        return False
    return bool(len(parametrizations)) if tensor_name is None else tensor_name in parametrizations


def type_before_parametrizations(module) -> type:
    return type(module).__bases__[0] if is_parametrized(module) else type(module)


def _property(name):
    def get(self):
        key = (id(self), name)
        if _CACHE is not None and key in _CACHE:
            return _CACHE[key]
        value = self.parametrizations[name]()
        if _CACHE is not None:
            _CACHE[key] = value
        return value

    def set_(self, value):
        self.parametrizations[name].right_inverse(value)

    return property(get, set_)


def register_parametrization(module, tensor_name, parametrization, *, unsafe=False):
    """Parametrize `module.<tensor_name>` by `parametrization` (appended to its chain when it has one)."""
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:  # PyTorch's check runs it once (a spectral norm's power iteration)
            parametrization(getattr(module, tensor_name))
        module.parametrizations[tensor_name].append(parametrization)
        return module
    if tensor_name not in module._parameters and tensor_name not in module._buffers:
        raise ValueError(
            f"Module '{module}' does not have a parameter, a buffer, or a parametrized element with name '{tensor_name}'"
        )
    original = getattr(module, tensor_name)
    ns = _ns(original)
    with ns.no_grad():
        try:
            value = parametrization.right_inverse(original) if hasattr(parametrization, "right_inverse") else original
        except NotImplementedError:  # taken as the identity, as PyTorch does
            value = original
        if isinstance(value, (tuple, list)):  # several originals (weight_norm's g and v): new leaves like it
            kind = ns.nn.Parameter if isinstance(original, ns.nn.Parameter) else (lambda v: v)
            original = tuple(kind(v.detach().clone()) for v in value)
        elif value is not original:
            if tuple(value.shape) == tuple(original.shape) and value.dtype == original.dtype:
                original.copy_(value)
            else:
                raise ValueError(
                    "right_inverse must keep the tensor's shape and dtype here (PyTorch's may change them)"
                )
    delattr(module, tensor_name)
    if not is_parametrized(module):
        cls = type(module)
        module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), {})
        module.parametrizations = ns.nn.ModuleDict()
    setattr(type(module), tensor_name, _property(tensor_name))
    module.parametrizations[tensor_name] = _list_class(ns.nn)([parametrization], original, unsafe)
    if not unsafe:  # PyTorch's consistency check runs the chain once
        module.parametrizations[tensor_name]()
    return module


def remove_parametrizations(module, tensor_name, leave_parametrized=True):
    """Undo `register_parametrization`: `tensor_name` a plain parameter again, holding the parametrized value
    (`leave_parametrized`) or the original."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    chain = module.parametrizations[tensor_name]
    if chain.is_tensor:
        original = chain.original
        if leave_parametrized:
            with _ns(original).no_grad():
                original.copy_(getattr(module, tensor_name))
    elif leave_parametrized:  # several originals: the parametrized value becomes the parameter
        first = chain.original0
        with _ns(first).no_grad():
            value = getattr(module, tensor_name).detach().clone()
        original = type(first)(value) if isinstance(first, _ns(first).nn.Parameter) else value
    else:
        raise ValueError(
            "Cannot leave unparametrized (`leave_parametrized=False`) a tensor that is parametrized in terms of "
            "a sequence of tensors."
        )
    delattr(type(module), tensor_name)
    del module.parametrizations[tensor_name]
    if isinstance(original, _ns(original).nn.Parameter):
        module.register_parameter(tensor_name, original)
    else:
        module.register_buffer(tensor_name, original)
    if not is_parametrized(module):
        del module.parametrizations
        module.__class__ = type(module).__bases__[0]
    return module


__all__ = [
    "cached",
    "is_parametrized",
    "register_parametrization",
    "remove_parametrizations",
    "type_before_parametrizations",
]
