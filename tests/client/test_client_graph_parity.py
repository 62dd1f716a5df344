"""PyTorch-parity of autograd's graph surface on the engine and the client (embedded and through a live server),
each compared with what PyTorch 2.13 gives: inference tensors, multi-grad hooks, gradient edges."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def _inference_flags(torch):
    x = torch.ones(2, 2, requires_grad=True)
    with torch.inference_mode():
        made = [torch.ones(2), x * 2, torch.tensor([1.0]), (x * 2)[0], torch.nn.functional.relu(x).sum()]
        with torch.inference_mode(False):
            made.append(torch.ones(2))
        with torch.no_grad():
            made.append(torch.zeros(1))
    with torch.no_grad():
        made.append(torch.zeros(1))
    base = made[1]
    made += [x, base + 1, base.clone(), base.view(4), base[1], base.t()]
    return [t.is_inference() for t in made] + [torch.is_inference(base), base.requires_grad]


def test_tensors_made_in_inference_mode_are_inference_tensors_as_torchs(torch_like, oracle):
    assert _inference_flags(torch_like) == _inference_flags(oracle)


SCALARS = """
x = torch.ones(1, requires_grad=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    int(x)
    with torch.no_grad():
        float(x)
    float(x * 2)
    complex(x)
seen = [(str(w.message), w.category.__name__) for w in caught]
"""


def test_float_of_a_tensor_requiring_grad_warns_once_as_torchs(torch_like, oracle):
    from engine import surface

    surface.SCALAR_WARNED.clear()  # (once a process, as PyTorch's TORCH_WARN_ONCE: its own runs in a new one)
    scope = {"torch": torch_like, "warnings": warnings}
    exec(SCALARS, scope)  # noqa: S102
    program = f"import torch, warnings\n{SCALARS}\nprint(repr(seen))"
    torchs = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    ((want, want_category),) = eval(torchs.stdout)  # noqa: S307  (the repr of a list of strings)
    ((message, category),) = scope["seen"]
    assert category == want_category == "UserWarning"
    assert want.startswith(message + " (Triggered internally at ")  # (PyTorch's names its C++ source line)
