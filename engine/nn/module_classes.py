"""`torch.nn`'s `Parameter` and modules, written once for every Variable implementation.

The classes here are generic: a module's forward calls `engine.nn.functional` (which computes on whatever
Variables it is given) and a module creates its parameters and buffers through `self._ns`, the package of
the side it belongs to. `bind(namespace)` makes one side's classes: a `Parameter` subclass of that side's
Variable, and for each generic class a subclass of it and of the side's `Module` carrying the namespace, so
`engine.nn.Linear` makes engine Variables, `client.nn.Linear` client ones, and
`isinstance(client.nn.Linear(2, 3), client.nn.Module)` holds. A program's own `class Net(torch.nn.Module)`
inherits the side from the `Module` it names.

Parameters are updated in place under `no_grad()` (initialisation, `load_state_dict`, an optimizer's step),
so a parameter stays the same object: on the client a leaf whose array the client holds, so initialising
or loading sends nothing.
"""

from __future__ import annotations

import math
from collections import OrderedDict, namedtuple
from typing import Any

import numpy

from engine.devices import Device
from engine.nn import functional as F
from engine.nn import hooks, init
from engine.nn.activation_modules import ACTIVATIONS
from engine.nn.layer_modules import LAYERS, _Table
from engine.nn.loss_modules import LOSSES, _Loss, _WeightedLoss
from engine.nn.norm_modules import NORMS, affine_parameters
from engine.nn.sequence import GRU, LSTM, RNN, GRUCell, LSTMCell, MultiheadAttention, RNNBase, RNNCell, RNNCellBase
from engine.nn.transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from engine.optim.optimizer import realise_with_next_step
from engine.user_warnings import warn

HOOK_KINDS = (
    "_forward_pre_hooks",
    "_forward_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_load_state_dict_post_hooks",
)
LOAD_HOOK_RETURNED = (
    "Hooks registered with ``register_load_state_dict_post_hook`` are not expected to return new values, if "
    "incompatible_keys need to be modified, it should be done inplace."
)


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    def __repr__(self):  # PyTorch's
        return super().__repr__() if self.missing_keys or self.unexpected_keys else "<All keys matched successfully>"


class ParameterKind:
    """What every side's `Parameter` class derives from (with that side's Variable): a Variable that a
    Module registers as a parameter when it is assigned as an attribute."""

    __slots__ = ()

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = numpy.zeros((0,), dtype=numpy.float32)
        super().__init__(data, requires_grad=requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__


class BufferKind:
    """What every side's `Buffer` derives from (with that side's Variable): a detached Variable that a Module
    registers as a buffer, `persistent` or not, when it is assigned as an attribute (torch.nn.Buffer)."""

    __slots__ = ()

    def __init__(self, data=None, *, persistent=True):
        empty = data is None
        super().__init__(numpy.zeros((0,), numpy.float32) if empty else data.detach(), requires_grad=False)
        self.requires_grad_(not empty and data.requires_grad)
        self.persistent = persistent


def _size(shape) -> str:
    return f"torch.Size({list(shape)})"


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    return lines[0] + "\n" + "\n".join(" " * spaces + line for line in lines[1:])


class Module:
    """Base class of every module: parameters, buffers and submodules registered by attribute assignment,
    `__call__` -> `forward`, train/eval, state_dict/load_state_dict, `to()` (PyTorch's behaviour)."""

    _ns: Any = None  # the side's package (`engine` or `client`), set by `bind`
    _parameter: Any = None  # the side's Parameter class
    training: bool

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", OrderedDict())
        for kind in HOOK_KINDS:
            object.__setattr__(self, kind, OrderedDict())
        object.__setattr__(self, "_hooked", False)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args, **kwargs):
        if self._hooked:
            return hooks.call(self, args, kwargs)
        return self.forward(*args, **kwargs)

    # --- hooks (engine.nn.hooks) ---------------------------------------------------------------
    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False):
        return hooks.add(self, "_forward_pre_hooks", hook, prepend, with_kwargs=with_kwargs)

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False, always_call=False):
        return hooks.add(self, "_forward_hooks", hook, prepend, with_kwargs=with_kwargs)

    def register_full_backward_hook(self, hook, prepend: bool = False):
        return hooks.add(self, "_backward_hooks", hook, prepend, full=True)

    def register_backward_hook(self, hook):
        """PyTorch's deprecated kind: the node that made the output's gradients (engine.nn.hooks)."""
        return hooks.add(self, "_backward_hooks", hook, full=False)

    def register_full_backward_pre_hook(self, hook, prepend: bool = False):
        return hooks.add(self, "_backward_pre_hooks", hook, prepend)

    def register_load_state_dict_post_hook(self, hook):
        """`hook(module, incompatible_keys)` once `load_state_dict` has loaded (before its strict checks: the hook may
        change the keys in place), children's before their parent's, as PyTorch's."""
        handle = hooks.RemovableHandle(self._load_state_dict_post_hooks)
        self._load_state_dict_post_hooks[handle.id] = hook
        return handle

    def _loaded(self, keys) -> None:
        for child in self._modules.values():
            if child is not None:
                child._loaded(keys)
        for hook in self._load_state_dict_post_hooks.values():
            if hook(self, keys) is not None:
                raise AssertionError(LOAD_HOOK_RETURNED)

    # --- registration --------------------------------------------------------------------------
    def _registry(self, name):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {name} before Module.__init__() call")

    def register_parameter(self, name: str, param) -> None:
        self._registry("parameter")
        if param is not None and not isinstance(param, ParameterKind):
            raise TypeError(
                f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                "(torch.nn.Parameter or None required)"
            )
        self.__dict__.pop(name, None)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        self._registry("buffers")
        self.__dict__.pop(name, None)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._registry("module")
        self.__dict__.pop(name, None)
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name, value):
        params = self.__dict__.get("_parameters")
        if isinstance(value, ParameterKind):
            self._registry("parameters")
            self._forget(name)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                    "(torch.nn.Parameter or None expected)"
                )
            params[name] = None
        elif isinstance(value, BufferKind):
            self.register_buffer(name, value, value.persistent)
        elif isinstance(value, Module):
            self._registry("module")
            self._forget(name)
            self._modules[name] = value
        elif params is not None and name in self._modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}'")
            self._modules[name] = None
        elif params is not None and name in self._buffers:
            if value is not None and not self._ns.is_tensor(value):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' (Tensor or None expected)")
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name):
        self.__dict__.pop(name, None)
        for registry in (self._parameters, self._buffers, self._modules):
            registry.pop(name, None)
        self._non_persistent_buffers_set.discard(name)

    def __getattr__(self, name):
        for registry in ("_parameters", "_buffers", "_modules"):
            entries = self.__dict__.get(registry)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for registry in ("_parameters", "_buffers", "_modules"):
            entries = self.__dict__.get(registry)
            if entries is not None and name in entries:
                del entries[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    # --- traversal -----------------------------------------------------------------------------
    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def get_submodule(self, target: str):
        """The submodule at a dotted path (`"layer1.0"`); "" is this module."""
        module = self
        for item in target.split(".") if target else ():
            if not hasattr(module, item):
                raise AttributeError(module._get_name() + " has no attribute `" + item + "`")
            module = getattr(module, item)
            if not isinstance(module, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return module

    def get_parameter(self, target: str):
        return self._get_tensor(
            target, lambda module, name: isinstance(getattr(module, name), self._parameter), "an nn.Parameter"
        )

    def get_buffer(self, target: str):
        return self._get_tensor(target, lambda module, name: name in module._buffers, "a buffer")

    def _get_tensor(self, target, belongs, what):
        path, _, name = target.rpartition(".")
        module = self.get_submodule(path)
        if not hasattr(module, name):
            raise AttributeError(module._get_name() + " has no attribute `" + name + "`")
        if not belongs(module, name):
            raise AttributeError("`" + name + "` is not " + what)
        return getattr(module, name)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self):
        for _, module in self.named_children():
            yield module

    def _named_members(self, registry, prefix, recurse, remove_duplicate=True):
        seen = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in getattr(module, registry).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield module_prefix + ("." if module_prefix else "") + name, value

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True):
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True):
        for _, buffer in self.named_buffers(recurse=recurse):
            yield buffer

    def apply(self, fn):
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # --- modes and gradients -------------------------------------------------------------------
    def train(self, mode: bool = True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True):
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.parameters():
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                if param.grad.grad_fn is not None:
                    param.grad.detach_()
                else:
                    param.grad.requires_grad_(False)
                param.grad.zero_()

    # --- state ---------------------------------------------------------------------------------
    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        """An OrderedDict of every parameter and persistent buffer, by dotted name, detached (sharing
        memory with them, as PyTorch's does) unless `keep_vars`."""
        if args:
            destination, prefix, keep_vars = (list(args) + [prefix, keep_vars])[:3]
        if destination is None:
            destination = OrderedDict()
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buffer in self._buffers.items():
            if buffer is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buffer if keep_vars else buffer.detach()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        return destination

    def _state_entries(self):
        """{dotted name: (owning module, registry, name)} of what state_dict holds."""
        entries = {}
        for prefix, module in self.named_modules(remove_duplicate=False):
            dotted = prefix + "." if prefix else ""
            for name, param in module._parameters.items():
                if param is not None:
                    entries[dotted + name] = (module, "_parameters", name)
            for name, buffer in module._buffers.items():
                if buffer is not None and name not in module._non_persistent_buffers_set:
                    entries[dotted + name] = (module, "_buffers", name)
        return entries

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy each entry into the parameter or buffer of that name, in place under no_grad (values of
        another package, or arrays, are converted); PyTorch's errors for missing, unexpected and
        mis-shaped entries. Returns (missing_keys, unexpected_keys)."""
        entries = self._state_entries()
        missing = [  # (a norm's num_batches_tracked may be absent, as from torch < 0.4.1: torch keeps its own)
            key
            for key, (module, _, name) in entries.items()
            if key not in state_dict and not (name == "num_batches_tracked" and isinstance(module, _NormBase))
        ]
        unexpected = [key for key in state_dict if key not in entries]
        errors = []
        updates = []
        for key, (module, registry, name) in entries.items():
            if key not in state_dict:
                continue
            current = getattr(module, registry)[name]
            value = self._ns.as_tensor(numpy.asarray(state_dict[key]), dtype=current.dtype)
            if tuple(value.shape) != tuple(current.shape):
                errors.append(
                    f"size mismatch for {key}: copying a param with shape {_size(value.shape)} from checkpoint, "
                    f"the shape in current model is {_size(current.shape)}."
                )
                continue
            updates.append((module, registry, name, current, value))
        with self._ns.no_grad():  # (what matches is loaded, as PyTorch's, however the checks below end)
            for module, registry, name, current, value in updates:
                if assign and registry == "_parameters":
                    module._parameters[name] = self._parameter(value, requires_grad=current.requires_grad)
                elif assign:
                    module._buffers[name] = value
                else:
                    current.copy_(value)
        found = _IncompatibleKeys(missing, unexpected)
        self._loaded(found)
        if strict:
            if unexpected:
                errors.insert(
                    0, "Unexpected key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in unexpected))
                )
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError(
                "Error(s) in loading state_dict for {}:\n\t{}".format(type(self).__name__, "\n\t".join(errors))
            )
        return found

    # --- conversion ----------------------------------------------------------------------------
    def _apply(self, convert):
        """Give every parameter (and its grad) and buffer `convert(array)`'s values: parameters keep
        their identity (their data is replaced), buffers are replaced."""
        for module in self.modules():
            for param in module._parameters.values():
                if param is None:
                    continue
                new = convert(param.detach().numpy())
                if new is not None:
                    param.data = new
                    if param.grad is not None:
                        param.grad.data = convert(param.grad.detach().numpy())
            for name, buffer in module._buffers.items():
                if buffer is None:
                    continue
                new = convert(buffer.detach().numpy())
                if new is not None:
                    module._buffers[name] = self._ns.as_tensor(new)
        return self

    def to(self, *args, **kwargs):
        """`to(dtype)`, `to(device)`, `to(device, dtype)`, `to(tensor)`: floating parameters and buffers take
        the dtype; a device is checked (a side computes on one device)."""
        dtype, device = kwargs.pop("dtype", None), kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for arg in args:
            if self._ns.is_tensor(arg):
                dtype, device = arg.dtype, arg.device
            elif isinstance(arg, (str, int, Device)):
                device = arg
            else:
                dtype = arg
        if device is not None:
            self._ns.zeros(0, device=device)  # checks the device as a constructor does
        if dtype is None:
            return self
        dtype = numpy.dtype(dtype)
        if dtype.kind != "f":
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dtype}")
        return self._apply(lambda a: a.astype(dtype) if a.dtype.kind == "f" and a.dtype != dtype else None)

    def float(self):
        return self.to(numpy.float32)

    def double(self):
        return self.to(numpy.float64)

    def half(self):
        return self.to(numpy.float16)

    def type(self, dst_type):  # `model.type(torch.float64)`
        return self.to(dst_type)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else device)

    # --- printing ------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [
            f"({key}): " + _addindent(repr(module), 2) for key, module in self._modules.items() if module is not None
        ]
        lines = extra_lines + child_lines
        text = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                text += extra_lines[0]
            else:
                text += "\n  " + "\n  ".join(lines) + "\n"
        return text + ")"

    def __dir__(self):
        names = list(super().__dir__())
        for registry in (self._parameters, self._buffers, self._modules):
            names += list(registry)
        return sorted(set(names))


# --- containers ---------------------------------------------------------------------------------


def _position(size: int, idx: int) -> int:
    """`idx` (negative from the end) as a position among `size` entries; PyTorch's IndexError outside."""
    if not -size <= idx < size:
        raise IndexError(f"index {idx} is out of range")
    return idx % size


class Sequential(Module):
    """Modules applied in order (given as arguments or an OrderedDict); indexing, slicing, len, iteration."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[_position(len(self), idx)]

    def __setitem__(self, idx, module):
        key = list(self._modules)[_position(len(self), idx)]
        setattr(self, key, module)

    def __delitem__(self, idx):
        keys = list(self._modules)
        for key in keys[idx] if isinstance(idx, slice) else [keys[_position(len(self), idx)]]:
            del self._modules[key]
        values = list(self._modules.values())
        self._modules.clear()
        for i, module in enumerate(values):
            self._modules[str(i)] = module

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input):
        for module in self:
            input = module(input)
        return input


class ModuleList(Module):
    """A list of modules, registered as children named by position."""

    def __init__(self, modules=None):
        super().__init__()
        for module in modules or ():
            self.append(module)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return list(self._modules.values())[idx]

    def __setitem__(self, idx, module):
        self.add_module(list(self._modules)[idx], module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self

    def __repr__(self):
        """PyTorch's: a run of entries that print alike printed once, as `(i-j): n x ...`."""
        runs: list[list] = []
        for i, module in enumerate(self):
            if runs and runs[-1][2] == repr(module):
                runs[-1][1] = i
            else:
                runs.append([i, i, repr(module)])
        if not runs:
            return self._get_name() + "()"
        lines = [_addindent(f"({a}-{b}): {b - a + 1} x {r}" if b > a else f"({a}): {r}", 2) for a, b, r in runs]
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


class _Mapping:
    """The dict methods of ModuleDict and ParameterDict, over their registry `_store`; `__setitem__` is theirs."""

    _store = "_modules"

    def _entries(self) -> OrderedDict:
        return getattr(self, self._store)

    def __getitem__(self, key):
        return self._entries()[key]

    def __delitem__(self, key):
        del self._entries()[key]

    def __len__(self):
        return len(self._entries())

    def __iter__(self):
        return iter(self._entries())

    def __contains__(self, key):
        return key in self._entries()

    def keys(self):
        return self._entries().keys()

    def items(self):
        return self._entries().items()

    def values(self):
        return self._entries().values()

    def pop(self, key):
        value = self[key]
        del self[key]
        return value

    def clear(self) -> None:
        self._entries().clear()

    def update(self, entries) -> None:
        for key, value in entries.items() if hasattr(entries, "items") else entries:
            self[key] = value  # type: ignore[index]  # (the container's own __setitem__)


class ModuleDict(_Mapping, Module):
    """Modules by name, registered as children."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __setitem__(self, key: str, module) -> None:
        self.add_module(key, module)


def _as_parameter(module, value):
    """PyTorch's parameter containers: a tensor that is not a Parameter is made one."""
    if module._ns.is_tensor(value) and not isinstance(value, ParameterKind):
        return module._parameter(value)
    return value


def _describe(key, value, type_name: str) -> str:
    """An entry of a parameter container's repr, as PyTorch writes it."""
    shape = getattr(value, "shape", None)
    if not isinstance(value, ParameterKind) or shape is None:
        return f"  ({key}): Object of type: {type(value).__name__}"
    return f"  ({key}): Parameter containing: [{type_name} of size {'x'.join(map(str, shape))}]"


class ParameterList(Module):
    """A list of parameters registered by position (tensors are made Parameters)."""

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        self.extend(values or ())

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)([self[i] for i in range(len(self))[idx]])
        return getattr(self, str(_position(len(self), idx)))

    def __setitem__(self, idx: int, value) -> None:
        setattr(self, str(_position(len(self), idx)), _as_parameter(self, value))

    def __len__(self):
        return self._size

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __iadd__(self, values):
        return self.extend(values)

    def append(self, value):
        self._size += 1
        self[-1] = value
        return self

    def extend(self, values):
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        return "\n".join(_describe(i, p, str(getattr(p, "dtype", ""))) for i, p in enumerate(self))

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterList should not be called.")


class ParameterDict(_Mapping, Module):
    """Parameters by name (tensors are made Parameters)."""

    _store = "_parameters"

    def __init__(self, parameters=None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __setitem__(self, key: str, value) -> None:
        self.register_parameter(key, _as_parameter(self, value))

    def extra_repr(self) -> str:
        return "\n".join(_describe(k, p, p.type()) for k, p in self.items())

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterDict should not be called.")


# --- layers -------------------------------------------------------------------------------------


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class DataParallel(Module):
    """PyTorch's, on one device: the wrapped `module` runs the whole batch, as PyTorch's does without several GPUs."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        self.module, self.dim = module, dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


class Linear(Module):
    """y = x @ weight.T + bias; weight [out_features, in_features] from kaiming_uniform_(a=sqrt(5)) and
    bias from U(-1/sqrt(in_features), 1/sqrt(in_features)), as PyTorch initialises them."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = self._parameter(self._ns.empty((out_features, in_features), device=device, dtype=dtype))
        if bias:
            self.bias = self._parameter(self._ns.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class LazyLinear(Linear):
    """A Linear whose in_features is its first input's last size: weight [out_features, 0] until that call gives
    it its shape in place (the same Parameter, so an optimizer made before holds it) and PyTorch's initialisation,
    and the module becomes a Linear, as PyTorch's `cls_to_become`."""

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__(0, out_features, bias, device, dtype)

    def reset_parameters(self) -> None:
        if self.in_features:
            super().reset_parameters()

    def forward(self, input):
        if self.in_features == 0:
            self.in_features = input.shape[-1]
            self.weight.data = self._ns.empty((self.out_features, self.in_features), dtype=self.weight.dtype).data
            self.reset_parameters()
            self.__class__ = self._ns.nn.Linear
        return F.linear(input, self.weight, self.bias)


class Embedding(_Table, Module):
    """Rows of weight [num_embeddings, embedding_dim] (from N(0, 1); the padding_idx row zero) at the indices."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx=None,
        max_norm=None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight=None,
        _freeze: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        self._table(num_embeddings, embedding_dim, padding_idx, _weight, _freeze, device, dtype)

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx=None, **kwargs):
        rows, cols = cls._pretrained(embeddings)
        return cls(rows, cols, padding_idx=padding_idx, _weight=embeddings, _freeze=freeze, **kwargs)

    def forward(self, input):
        return F.embedding(
            input, self.weight, self.padding_idx, self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse
        )

    def extra_repr(self) -> str:
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            text += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            text += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            text += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            text += ", scale_grad_by_freq=True"
        if self.sparse:
            text += ", sparse=True"
        return text


class LayerNorm(Module):
    """Normalises over the last dimensions (`normalized_shape`), then * weight (ones) + bias (zeros)."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        affine_parameters(self, elementwise_affine, bias, self.normalized_shape, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
            f"bias={self.bias is not None}"
        )


class _NormBase(Module):
    """Batch normalisation per channel (dimension 1) of `_ndims`-dimensional input, with running statistics as
    buffers (`running_mean`, `running_var`, `num_batches_tracked`) updated in training (momentum None: the
    cumulative average) and used in eval. On a remote client their updates are computed with the next
    optimizer step's request (`engine.optim.optimizer.realise_with_next_step`)."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum=0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        ns = self._ns
        affine_parameters(self, affine, bias, num_features, device, dtype)
        if track_running_stats:
            self.register_buffer("running_mean", ns.zeros(num_features, device=device, dtype=dtype))
            self.register_buffer("running_var", ns.ones(num_features, device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked", ns.tensor(0, dtype=ns.long, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with self._ns.no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    _ndims: tuple[int, ...] = (2, 3)

    def forward(self, input):
        if input.ndim not in self._ndims:
            raise ValueError(f"expected {' or '.join(f'{n}D' for n in self._ndims)} input (got {input.ndim}D input)")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with self._ns.no_grad():
                self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        tracked = not self.training or self.track_running_stats
        out = F.batch_norm(
            input,
            self.running_mean if tracked else None,
            self.running_var if tracked else None,
            self.weight,
            self.bias,
            use_batch,
            factor,
            self.eps,
        )
        if self.training and self.track_running_stats:
            for buffer in (self.running_mean, self.running_var, self.num_batches_tracked):
                if buffer is not None:
                    realise_with_next_step(buffer)
        return out

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
            f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}"
        )


class _BatchNorm(_NormBase):
    """What BatchNorm1d/2d/3d are, as PyTorch's `nn.modules.batchnorm._BatchNorm` (a program freezing its batch norms
    asks `isinstance(m, _BatchNorm)`; an instance norm is none)."""


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of [N, C] or [N, C, L] input (`_BatchNorm`)."""


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of [N, C, H, W] input (`_BatchNorm`)."""

    _ndims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalisation of [N, C, D, H, W] input (`_BatchNorm`)."""

    _ndims = (5,)


class _InstanceNorm(_NormBase):
    """Instance normalisation (`F.instance_norm`) of [N, C, *] or one sample [C, *]: `_NormBase`'s parameters
    and buffers (none by default), the running statistics used in eval only when tracked."""

    def __init__(
        self,
        num_features: int,
        eps=1e-5,
        momentum=0.1,
        affine=False,
        track_running_stats=False,
        device=None,
        dtype=None,
    ):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, input):
        if input.ndim not in self._ndims:
            raise ValueError(f"expected {' or '.join(f'{n}D' for n in self._ndims)} input (got {input.ndim}D input)")
        feature_dim = input.ndim - self._ndims[0]
        if input.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(
                    f"expected input's size at dim={feature_dim} to match num_features ({self.num_features}), "
                    f"but got: {input.shape[feature_dim]}."
                )
            warn(
                f"input's size at dim={feature_dim} does not match num_features. You can silence this warning by "
                "not passing in num_features, which is not used because affine=False"
            )
        batched = input if feature_dim else input.unsqueeze(0)
        use_input_stats = self.training or not self.track_running_stats
        momentum = 0.0 if self.momentum is None else self.momentum
        stats = (self.running_mean, self.running_var)
        out = F.instance_norm(batched, *stats, self.weight, self.bias, use_input_stats, momentum, self.eps)
        if self.training and self.track_running_stats:
            for buffer in stats:
                realise_with_next_step(buffer)
        return out if feature_dim else out.squeeze(0)


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation of [N, C, L] or [C, L] input."""


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation of [N, C, H, W] or [C, H, W] input."""

    _ndims = (3, 4)


class InstanceNorm3d(_InstanceNorm):
    """Instance normalisation of [N, C, D, H, W] or [C, D, H, W] input."""

    _ndims = (4, 5)


class Dropout(Module):
    _function: Any = staticmethod(F.dropout)

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return self._function(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zeroes whole channels of [N, C, L] or [C, L] input (training only)."""

    _function = staticmethod(F.dropout1d)


class Dropout2d(Dropout):
    _function = staticmethod(F.dropout2d)


class Dropout3d(Dropout):
    _function = staticmethod(F.dropout3d)


class AlphaDropout(Dropout):
    _function = staticmethod(F.alpha_dropout)


class FeatureAlphaDropout(Dropout):
    _function = staticmethod(F.feature_alpha_dropout)


# --- convolution and pooling --------------------------------------------------------------------


def _ntuple(value, n: int) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


PADDING_MODES = {"zeros", "reflect", "replicate", "circular"}


class _ConvNd(Module):
    """Conv1d/2d/3d and their transposes: weight [out_channels, in_channels / groups, *kernel_size] (transposed:
    [in_channels, out_channels / groups, *kernel_size]) from kaiming_uniform_(a=sqrt(5)), and bias from
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as PyTorch initialises them."""

    _dims = 2
    _transposed = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
        output_padding=0,
    ):
        super().__init__()
        n = self._dims
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {PADDING_MODES}, but got padding_mode='{padding_mode}'")
        if padding_mode != "zeros" and self._transposed:
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
            if padding == "same" and any(s != 1 for s in _ntuple(stride, n)):
                raise ValueError("padding='same' is not supported for strided convolutions")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.dilation = _ntuple(kernel_size, n), _ntuple(stride, n), _ntuple(dilation, n)
        self.padding = padding if isinstance(padding, str) else _ntuple(padding, n)
        self.output_padding, self.transposed, self.padding_mode = (
            _ntuple(output_padding, n),
            self._transposed,
            padding_mode,
        )
        shape = (in_channels, out_channels // groups) if self._transposed else (out_channels, in_channels // groups)
        self.weight = self._parameter(self._ns.empty((*shape, *self.kernel_size), device=device, dtype=dtype))
        if bias:
            self.bias = self._parameter(self._ns.empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        function, padding = getattr(F, f"conv{self._dims}d"), self.padding
        if self.padding_mode != "zeros":  # PyTorch's: F.pad in the mode, then an unpadded convolution
            input, padding = F.pad(input, self._padded_sides(), mode=self.padding_mode), 0
        return function(input, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)

    def _padded_sides(self):
        """F.pad's amounts (last dimension first) of this convolution's padding ('same': the larger half after)."""
        if self.padding == "valid":
            return (0, 0) * self._dims
        if self.padding == "same":
            totals = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            return tuple(v for total in reversed(totals) for v in (total // 2, total - total // 2))
        return tuple(p for p in reversed(self.padding) for _ in range(2))

    def extra_repr(self) -> str:
        n = self._dims
        text = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * n:
            text += f", padding={self.padding}"
        if self.dilation != (1,) * n:
            text += f", dilation={self.dilation}"
        if self.output_padding != (0,) * n:
            text += f", output_padding={self.output_padding}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        if self.padding_mode != "zeros":
            text += f", padding_mode={self.padding_mode}"
        return text


class Conv1d(_ConvNd):
    """1-d convolution of [N, C_in, L] (`F.conv1d`)."""

    _dims = 1


class Conv2d(_ConvNd):
    """2-d convolution of [N, C_in, H, W] (`F.conv2d`)."""


class Conv3d(_ConvNd):
    """3-d convolution of [N, C_in, D, H, W] (`F.conv3d`)."""

    _dims = 3


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__}: padding must be integers, got {padding!r}")
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device,
            dtype,
            output_padding,
        )

    def forward(self, input, output_size=None):
        if output_size is not None:
            raise NotImplementedError(f"{type(self).__name__}: output_size= is not supported (give output_padding)")
        function = getattr(F, f"conv_transpose{self._dims}d")
        return function(
            input, self.weight, self.bias, self.stride, self.padding, self.output_padding, self.groups, self.dilation
        )


class ConvTranspose1d(_ConvTransposeNd):
    """The transposed 1-d convolution (`F.conv_transpose1d`): weight [C_in, C_out / groups, k]."""

    _dims = 1


class ConvTranspose2d(_ConvTransposeNd):
    """The transposed 2-d convolution (`F.conv_transpose2d`): weight [C_in, C_out / groups, kh, kw]."""


class ConvTranspose3d(_ConvTransposeNd):
    """The transposed 3-d convolution (`F.conv_transpose3d`): weight [C_in, C_out / groups, kd, kh, kw]."""

    _dims = 3


class _MaxPoolNd(Module):
    _dims = 2

    def __init__(
        self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False, ceil_mode: bool = False
    ):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        function = getattr(F, f"max_pool{self._dims}d")
        return function(
            input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, self.return_indices
        )

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class MaxPool1d(_MaxPoolNd):
    """Each window's maximum over [N, C, L] (`F.max_pool1d`)."""

    _dims = 1


class MaxPool2d(_MaxPoolNd):
    """Each window's maximum over [N, C, H, W] (`F.max_pool2d`)."""


class MaxPool3d(_MaxPoolNd):
    """Each window's maximum over [N, C, D, H, W] (`F.max_pool3d`)."""

    _dims = 3


class AvgPool1d(Module):
    """Each window's mean over [N, C, L] (`F.avg_pool1d`)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
        super().__init__()
        self.kernel_size = _ntuple(kernel_size, 1)
        self.stride = _ntuple(stride if stride is not None else kernel_size, 1)
        self.padding = _ntuple(padding, 1)
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """Each window's mean over [N, C, H, W] (`F.avg_pool2d`)."""

    _dims = 2

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override=None,
    ):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input):
        return getattr(F, f"avg_pool{self._dims}d")(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool3d(AvgPool2d):
    """Each window's mean over [N, C, D, H, W] (`F.avg_pool3d`)."""

    _dims = 3


class _AdaptiveAvgPoolNd(Module):
    _dims = 2

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return getattr(F, f"adaptive_avg_pool{self._dims}d")(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    """Average pooling of [N, C, L] to `output_size` (`F.adaptive_avg_pool1d`)."""

    _dims = 1


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """Average pooling of [N, C, H, W] to `output_size` (`F.adaptive_avg_pool2d`; 1: a global average)."""


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    _dims = 3


class Flatten(Module):
    """Merges dimensions start_dim..end_dim into one (by default all but the batch dimension)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Splits dimension `dim` into `unflattened_size` (the inverse of Flatten)."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        if not isinstance(unflattened_size, (tuple, list)):
            raise TypeError(
                f"unflattened_size must be a tuple of ints, but found type {type(unflattened_size).__name__}"
            )
        for i, size in enumerate(unflattened_size):
            if not isinstance(size, int):
                raise TypeError(
                    f"unflattened_size must be tuple of ints, but found element of type {type(size).__name__} at pos {i}"
                )
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


# --- activations --------------------------------------------------------------------------------


class ReLU(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    def forward(self, input):
        return F.tanh(input)


class Sigmoid(Module):
    def forward(self, input):
        return F.sigmoid(input)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class SiLU(ReLU):
    def forward(self, input):
        return F.silu(input, inplace=self.inplace)


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim, _stacklevel=5)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, input):
        return F.log_softmax(input, self.dim, _stacklevel=5)


# --- losses -------------------------------------------------------------------------------------


class MSELoss(_Loss):
    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class BCELoss(_WeightedLoss):
    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean", pos_weight=None):
        super().__init__(weight, size_average, reduce, reduction)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(
            input, target, self.weight, pos_weight=self.pos_weight, reduction=self.reduction
        )


class NLLLoss(_WeightedLoss):
    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None, reduction: str = "mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class NLLLoss2d(NLLLoss):
    def __init__(self, *args, **kwargs):
        warn(NLL2D_DEPRECATED, FutureWarning)
        super().__init__(*args, **kwargs)


NLL2D_DEPRECATED = (
    "`NLLLoss2d` has been deprecated. Please use `NLLLoss` instead as a drop-in replacement and see "
    "https://pytorch.org/docs/main/nn.html#torch.nn.NLLLoss for more details."
)


class CrossEntropyLoss(_WeightedLoss):
    def __init__(
        self,
        weight=None,
        size_average=None,
        ignore_index: int = -100,
        reduce=None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(
            input,
            target,
            weight=self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
        )


GENERIC = (
    *(Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict),
    *(Identity, DataParallel, Linear, LazyLinear, Embedding, LayerNorm, BatchNorm1d, BatchNorm2d, BatchNorm3d, Dropout),
    *(Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d),
    *(MaxPool1d, MaxPool2d, MaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d),
    *(AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, Flatten, Unflatten),
    *(ReLU, GELU, Tanh, Sigmoid, LeakyReLU, ELU, SiLU, Softplus, Softmax, LogSoftmax),
    *(MSELoss, L1Loss, SmoothL1Loss, HuberLoss, BCELoss, BCEWithLogitsLoss, NLLLoss, NLLLoss2d, CrossEntropyLoss),
    *(RNN, LSTM, GRU, RNNCell, LSTMCell, GRUCell, MultiheadAttention),
    *(Transformer, TransformerEncoder, TransformerDecoder, TransformerEncoderLayer, TransformerDecoderLayer),
    *ACTIVATIONS,
    *LOSSES,
    *(InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, Dropout1d, Dropout2d, Dropout3d, AlphaDropout),
    *(FeatureAlphaDropout, *NORMS, *LAYERS),
)


def bind(namespace, module_name: str) -> dict:
    """One side's `torch.nn` classes: `Parameter` (a subclass of `namespace.Variable`), `Module` and every
    generic module class above, each a subclass of the generic class and of this side's `Module`."""
    parameter = type(
        "Parameter",
        (ParameterKind, namespace.Variable),
        {"__slots__": (), "__module__": module_name, "__doc__": ParameterKind.__doc__},
    )
    side_module = type(
        "Module",
        (Module,),
        {"_ns": namespace, "_parameter": parameter, "__module__": module_name, "__doc__": Module.__doc__},
    )
    buffer = type("Buffer", (BufferKind, namespace.Variable), {"__slots__": ("persistent",), "__module__": module_name})
    classes = {"Parameter": parameter, "Module": side_module, "Buffer": buffer}
    classes.update(RNNBase=RNNBase, RNNCellBase=RNNCellBase)  # (the generic bases: isinstance works on both sides)
    classes.update({base.__name__: base for base in (_NormBase, _BatchNorm, _InstanceNorm, _ConvNd, _ConvTransposeNd)})
    classes.update(_MaxPoolNd=_MaxPoolNd)  # (`nn.modules.batchnorm._BatchNorm`...: engine.nn is nn.modules too)
    for generic in (*GENERIC, _Loss, _WeightedLoss):  # (torch.nn.modules.loss's bases: a program's own losses)
        classes[generic.__name__] = type(
            generic.__name__, (generic, side_module), {"__module__": module_name, "__doc__": generic.__doc__}
        )
    return classes
