"""`torch.nn.utils.prune`, written once for every Variable class, as PyTorch's pruning tutorial uses it (torch 2.13's
code, on the side's namespace): pruning `module.weight` moves the parameter to `weight_orig`, keeps the mask in the
buffer `weight_mask` and makes `weight` a plain attribute, `weight_orig * weight_mask`, recomputed by the method
registered as a forward pre-hook (found in `module._forward_pre_hooks`, as PyTorch's). Pruning a tensor again
composes the masks in a `PruningContainer`; `remove` makes the pruning permanent. The random methods draw from the
side's generator (so their masks are not torch's; their counts are)."""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable

from engine.nn.sides import _ns


class BasePruningMethod(ABC):
    """A way of pruning one tensor of a module; subclasses define `compute_mask` and their `PRUNING_TYPE`."""

    _tensor_name: str

    def __call__(self, module, inputs):
        setattr(module, self._tensor_name, self.apply_mask(module))

    @abstractmethod
    def compute_mask(self, t, default_mask):
        """The mask for `t`, keeping pruned what `default_mask` prunes already."""

    def apply_mask(self, module):
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned")
        mask = getattr(module, self._tensor_name + "_mask")
        orig = getattr(module, self._tensor_name + "_orig")
        return mask.to(dtype=orig.dtype) * orig

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        """Prune `module.<name>` by a new `cls(*args, **kwargs)` (with the methods before it in a container)."""
        old_method, found = None, []
        for k, hook in module._forward_pre_hooks.items():
            if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
                old_method = hook
                found.append(k)
        if len(found) > 1:
            raise AssertionError(
                f"Avoid adding multiple pruning hooks to the same tensor {name} of module {module}. Use a PruningContainer."
            )
        for k in found:
            del module._forward_pre_hooks[k]
        method = cls(*args, **kwargs)
        method._tensor_name = name
        if isinstance(old_method, PruningContainer):
            old_method.add_pruning_method(method)
            method = old_method
        elif old_method is not None:
            container = PruningContainer(old_method)
            container.add_pruning_method(method)
            method = container
        orig = getattr(module, name)
        if importance_scores is not None:
            if importance_scores.shape != orig.shape:
                raise AssertionError(
                    f"importance_scores should have the same shape as parameter {name} of {module}, "
                    f"got {importance_scores.shape} vs {orig.shape}"
                )
        else:
            importance_scores = orig
        if not isinstance(method, PruningContainer):
            module.register_parameter(name + "_orig", orig)
            del module._parameters[name]
            default_mask = _ns(orig).ones_like(orig)
        else:
            default_mask = getattr(module, name + "_mask").detach().clone()
        try:
            mask = method.compute_mask(importance_scores, default_mask=default_mask)
            module.register_buffer(name + "_mask", mask)
            setattr(module, name, method.apply_mask(module))
            module.register_forward_pre_hook(method)
        except Exception:
            if not isinstance(method, PruningContainer):
                module.register_parameter(name, getattr(module, name + "_orig"))
                del module._parameters[name + "_orig"]
            raise
        return method

    def prune(self, t, default_mask=None, importance_scores=None):
        """`t` times its mask (computed from `importance_scores`, `t` itself by default)."""
        if importance_scores is not None:
            if importance_scores.shape != t.shape:
                raise AssertionError(
                    "importance_scores should have the same shape as tensor t, "
                    f"got {importance_scores.shape} vs {t.shape}"
                )
        else:
            importance_scores = t
        default_mask = default_mask if default_mask is not None else _ns(t).ones_like(t)
        return t * self.compute_mask(importance_scores, default_mask=default_mask)

    def remove(self, module) -> None:
        """Make the pruning permanent: `<name>` a parameter again holding the pruned values; `_orig`, `_mask` gone."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned before pruning can be removed")
        weight = self.apply_mask(module)
        if hasattr(module, self._tensor_name):
            delattr(module, self._tensor_name)
        orig = module._parameters[self._tensor_name + "_orig"]
        orig.data = weight.data
        del module._parameters[self._tensor_name + "_orig"]
        del module._buffers[self._tensor_name + "_mask"]
        setattr(module, self._tensor_name, orig)


class PruningContainer(BasePruningMethod):
    """The sequence of pruning methods applied to one tensor: the last computes its mask within what the others
    left (the kept entries, the kept channels along its `dim`, or all of it, by its PRUNING_TYPE)."""

    def __init__(self, *args) -> None:
        self._pruning_methods: tuple = ()
        if len(args) == 1:
            self._tensor_name = args[0]._tensor_name
            self.add_pruning_method(args[0])
        else:
            for method in args:
                self.add_pruning_method(method)

    def add_pruning_method(self, method) -> None:
        if not isinstance(method, BasePruningMethod) and method is not None:
            raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
        elif method is not None and self._tensor_name != method._tensor_name:
            raise ValueError(
                f"Can only add pruning methods acting on the parameter named '{self._tensor_name}' to "
                f"PruningContainer {self}. Found '{method._tensor_name}'"
            )
        self._pruning_methods += (method,)

    def __len__(self) -> int:
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    def compute_mask(self, t, default_mask):
        method, mask = self._pruning_methods[-1], default_mask
        new_mask = mask.to(dtype=t.dtype)
        if method.PRUNING_TYPE == "unstructured":
            slc = mask == 1
        elif method.PRUNING_TYPE == "structured":
            if not hasattr(method, "dim"):
                raise AttributeError(
                    'Pruning methods of PRUNING_TYPE "structured" need to have the attribute `dim` defined.'
                )
            n_dims = t.dim()
            dim = method.dim + n_dims if method.dim < 0 else method.dim
            if dim < 0:
                raise IndexError(f"Index is out of bounds for tensor with dimensions {n_dims}")
            slc = [slice(None)] * n_dims
            slc[dim] = mask.sum(dim=[d for d in range(n_dims) if d != dim]) != 0
            slc = tuple(slc)
        elif method.PRUNING_TYPE == "global":
            slc = (slice(None),) * len(t.shape)
        else:
            raise ValueError(f"Unrecognized PRUNING_TYPE {method.PRUNING_TYPE}")
        partial_mask = method.compute_mask(t[slc], default_mask=mask[slc])
        new_mask[slc] = partial_mask.to(dtype=new_mask.dtype)
        return new_mask


class Identity(BasePruningMethod):
    """Prunes nothing: a mask of ones."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        return default_mask

    @classmethod
    def apply(cls, module, name):
        return super().apply(module, name)


class _Amount(BasePruningMethod):
    def __init__(self, amount) -> None:
        _validate_pruning_amount_init(amount)
        self.amount = amount

    def _count(self, size):
        amount = self.amount
        nparams_toprune = amount if isinstance(amount, numbers.Integral) else round(amount * size)
        if isinstance(nparams_toprune, numbers.Integral) and nparams_toprune > size:
            raise ValueError(
                f"amount={nparams_toprune} should be smaller than the number of parameters to prune={size}"
            )
        return nparams_toprune

    def _unstructured(self, scores, default_mask, largest):
        mask = default_mask.clone()
        count = self._count(scores.nelement())
        if count != 0:  # (torch writes 0s through mask.view(-1); a client's view is a copy)
            indices = _ns(scores).topk(scores.view(-1), k=count, largest=largest).indices
            mask = mask.view(-1).index_fill(0, indices, 0).view_as(mask)
        return mask


class RandomUnstructured(_Amount):
    """Prunes `amount` (a count, or a fraction) of the entries not yet pruned, at random."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        return self._unstructured(_ns(t).rand_like(t), default_mask, True)

    @classmethod
    def apply(cls, module, name, amount):
        return super().apply(module, name, amount=amount)


class L1Unstructured(_Amount):
    """Prunes `amount` (a count, or a fraction) of the entries not yet pruned, the smallest in absolute value."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        return self._unstructured(_ns(t).abs(t), default_mask, False)

    @classmethod
    def apply(cls, module, name, amount, importance_scores=None):
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


class _Structured(_Amount):
    PRUNING_TYPE = "structured"

    def _channels(self, t, default_mask, kept):
        """The mask of `t` keeping the channels along `dim` that `kept(size, count)` selects, within default_mask."""
        shape = t.shape
        if len(shape) <= 1:
            raise ValueError(
                "Structured pruning can only be applied to multidimensional tensors. "
                f"Found tensor of shape {shape} with {len(shape)} dims"
            )
        if self.dim >= t.dim():
            raise IndexError(f"Invalid index {self.dim} for tensor of size {t.shape}")
        size = t.shape[self.dim]
        count = self._count(size)
        if count == 0:
            return default_mask
        mask = _ns(t).zeros_like(t)
        slc = [slice(None)] * len(shape)
        slc[self.dim] = kept(size, count)
        mask[tuple(slc)] = 1
        mask *= default_mask.to(dtype=mask.dtype)
        return mask


class RandomStructured(_Structured):
    """Prunes `amount` (a count, or a fraction) of the channels along `dim`, at random."""

    def __init__(self, amount, dim=-1) -> None:
        super().__init__(amount)
        self.dim = dim

    def compute_mask(self, t, default_mask):
        def kept(size, count):
            prob = _ns(t).rand(size)
            return prob > _ns(t).kthvalue(prob, k=count).values

        return self._channels(t, default_mask, kept)

    @classmethod
    def apply(cls, module, name, amount, dim=-1):
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(_Structured):
    """Prunes `amount` (a count, or a fraction) of the channels along `dim`, those of the smallest `n`-norm."""

    def __init__(self, amount, n, dim=-1) -> None:
        super().__init__(amount)
        self.n, self.dim = n, dim

    def compute_mask(self, t, default_mask):
        def kept(size, count):
            dims = list(range(t.dim()))
            dims.remove(dims[self.dim])
            return _ns(t).topk(_ns(t).norm(t, p=self.n, dim=dims), k=size - count, largest=True).indices

        return self._channels(t, default_mask, kept)

    @classmethod
    def apply(cls, module, name, amount, n, dim, importance_scores=None):
        return super().apply(module, name, amount=amount, n=n, dim=dim, importance_scores=importance_scores)


class CustomFromMask(BasePruningMethod):
    """Prunes where a given `mask` is 0."""

    PRUNING_TYPE = "global"

    def __init__(self, mask) -> None:
        self.mask = mask

    def compute_mask(self, t, default_mask):
        if default_mask.shape != self.mask.shape:
            raise AssertionError(
                f"default_mask shape {default_mask.shape} must match self.mask shape {self.mask.shape}"
            )
        return default_mask * self.mask.to(dtype=default_mask.dtype)

    @classmethod
    def apply(cls, module, name, mask):
        return super().apply(module, name, mask=mask)


def identity(module, name):
    Identity.apply(module, name)
    return module


def random_unstructured(module, name, amount):
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name, amount, importance_scores=None):
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module, name, amount, dim):
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module, name, amount, n, dim, importance_scores=None):
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs) -> None:
    """Prune the (module, name) tensors together: `pruning_method` (unstructured) over all of them as one vector."""
    if not isinstance(parameters, Iterable):
        raise TypeError("global_unstructured(): parameters is not an Iterable")
    importance_scores = importance_scores if importance_scores is not None else {}
    if not isinstance(importance_scores, dict):
        raise TypeError("global_unstructured(): importance_scores must be of type dict")
    parameters = list(parameters)
    first = getattr(*parameters[0])
    ns = _ns(first)
    scores = ns.nn.utils.parameters_to_vector(
        [importance_scores.get((module, name), getattr(module, name)) for module, name in parameters]
    )
    default_mask = ns.nn.utils.parameters_to_vector(
        [getattr(module, name + "_mask", ns.ones_like(getattr(module, name))) for module, name in parameters]
    )
    container = PruningContainer()
    container._tensor_name = "temp"
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError(
            'Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. '
            f"Found method {pruning_method} of type {method.PRUNING_TYPE}"
        )
    container.add_pruning_method(method)
    final_mask = container.compute_mask(scores, default_mask)
    pointer = 0
    for module, name in parameters:
        param = getattr(module, name)
        custom_from_mask(module, name, mask=final_mask[pointer : pointer + param.numel()].view_as(param))
        pointer += param.numel()


def custom_from_mask(module, name, mask):
    CustomFromMask.apply(module, name, mask)
    return module


def remove(module, name):
    """Make the pruning of `module.<name>` permanent (see BasePruningMethod.remove)."""
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before pruning can be removed")


def is_pruned(module) -> bool:
    return any(
        isinstance(hook, BasePruningMethod)
        for _, submodule in module.named_modules()
        for hook in submodule._forward_pre_hooks.values()
    )


def _validate_pruning_amount_init(amount) -> None:
    if not isinstance(amount, numbers.Real):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    if (isinstance(amount, numbers.Integral) and amount < 0) or (
        not isinstance(amount, numbers.Integral) and (float(amount) > 1.0 or float(amount) < 0.0)
    ):
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a non-negative integer")
