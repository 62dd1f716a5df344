"""PyTorch's module paths on a side's namespace, so that a program written for torch imports as it
is written with only its first word changed: `import engine.autograd.forward_ad as fwAD`,
`from client.autograd.functional import jacobian`, `from engine.distributions import Normal`,
`from client.nn.modules.loss import _Loss`, `from engine.utils.data.dataloader import DataLoader`.

The names live on attributes (`engine.autograd.forward_ad`, `engine.distributions`, a namespace
object or a module under another file name), so `bind` enters each of torch's paths in
`sys.modules` as the object that holds its names. The files torch splits a package into
(`torch.nn.modules.loss`, `torch.distributions.normal`...) are the package's one namespace here.
A path whose object the side lacks is left out: importing it fails as any missing module does."""

from __future__ import annotations

import sys
import types

# torch's module path -> the attribute path (from the side's root) of the object holding its names
PATHS = {
    "autograd.forward_ad": "autograd.forward_ad",
    "autograd.functional": "autograd.functional",
    "autograd.function": "function",
    "autograd.gradcheck": "gradcheck",
    "autograd.anomaly_mode": "autograd.anomaly_mode",
    "autograd.graph": "autograd.graph",
    "autograd.grad_mode": "autograd",
    "autograd.profiler": "autograd.profiler",
    "profiler": "profiler",
    "distributions": "distributions",
    "testing": "testing",
    "special": "special",
    "linalg": "linalg",
    "fft": "fft",
    "amp": "amp",
    "cpu": "cpu",
    "cpu.amp": "cpu.amp",
    "cuda": "cuda",
    "cuda.amp": "cuda.amp",
    "backends": "backends",
    "func": "func",
    "random": "random",
    "optim.optimizer": "optim",
    "optim.lr_scheduler": "optim.lr_scheduler",
    "optim.swa_utils": "optim.swa_utils",
    "nn.grad": "nn.grad",
    "nn.utils": "nn.utils",
    "nn.utils.rnn": "nn.utils.rnn",
    "nn.utils.fusion": "nn.utils.fusion",
    "nn.utils.stateless": "nn.utils.stateless",
    "nn.utils.parametrize": "nn.utils.parametrize",
    "nn.utils.parametrizations": "nn.utils.parametrizations",
    "nn.utils.prune": "nn.utils.prune",
    "nn.utils.clip_grad": "nn.utils",
    "nn.parameter": "nn",
    "nn.modules": "nn",
    "utils.data.dataloader": "utils.data",
    "utils.data.dataset": "utils.data",
    "utils.data.sampler": "utils.data",
    "utils.checkpoint": "utils.checkpoint",
}
# the files of torch.nn.modules and torch.distributions: each the package's one namespace here
FILES = {
    "nn.modules": ("module", "linear", "loss", "activation", "conv", "pooling", "batchnorm", "normalization",
                   "dropout", "container", "sparse", "rnn", "transformer", "flatten", "padding", "pixelshuffle",
                   "upsampling", "distance", "fold", "instancenorm", "channelshuffle"),
    "distributions": ("normal", "uniform", "categorical", "bernoulli", "independent", "kl", "distribution"),
}  # fmt: skip


def _resolve(root, dotted: str):
    """The object at `dotted` under `root`; where that is a function or class named as its module
    (`engine.gradcheck`, the function, shadows `engine/gradcheck.py`), the module."""
    obj = root
    for part in filter(None, dotted.split(".")):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    if isinstance(obj, (types.FunctionType, type)):
        return sys.modules.get(f"{root.__name__}.{dotted}")
    return obj


def bind(root: types.ModuleType) -> None:
    """Enter torch's module paths under `root`'s name (`engine`, `client`) in `sys.modules`."""
    paths = dict(PATHS)
    for package, files in FILES.items():
        paths.update({f"{package}.{file}": PATHS.get(package, package) for file in files})
    for path, dotted in paths.items():
        name, obj = f"{root.__name__}.{path}", _resolve(root, dotted)
        if obj is None:
            continue
        if name in sys.modules:  # a file of that name (`engine/random.py`) gains the namespace's names it lacks
            module = sys.modules[name]
            if obj is not module and dotted == path and isinstance(module, types.ModuleType):
                names = {k: v for k, v in vars(obj).items() if not k.startswith("_") and not hasattr(module, k)}
                vars(module).update(names)
            continue
        sys.modules[name] = obj
        parent, _, last = path.rpartition(".")
        holder = _resolve(root, parent)
        if holder is not None and not hasattr(holder, last):  # `import engine.nn.modules.loss as m` reads attributes
            try:
                setattr(holder, last, obj)
            except (AttributeError, TypeError):
                pass
