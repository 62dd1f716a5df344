"""Session 23's second sweep on the surface the engine and the client share (`torch_like`: the engine, the client
embedded and against a live server), compared with PyTorch: refusals and the calls PyTorch refuses, the warnings
PyTorch gives (the NumPy ones it does not give: tests/engine/test_conformance_s23b.py, in fresh interpreters), finfo, torch.gradient and unique(dim=)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.engine.test_conformance_s23b import _refusal as _refused
from tests.engine.test_conformance_s23b import oracle  # noqa: F401  (the fixture)

REFUSED = {
    "ones(2, -1)": lambda t: t.ones(2, -1),
    "cat([])": lambda t: t.cat([]),
    "x[float tensor]": lambda t: t.ones(3)[t.tensor([0.0])],
    "x[::-1]": lambda t: t.arange(10)[::-1],
    ".grad of another size": lambda t: setattr(t.ones(2, 3, requires_grad=True), "grad", t.ones(3)),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refusals_as_torch(torch_like, name, oracle):  # noqa: F811
    got, want = _refused(lambda: REFUSED[name](torch_like)), _refused(lambda: REFUSED[name](oracle))
    assert isinstance(got, type(want)) and str(got) == str(want)


def test_warnings_as_torch(torch_like, oracle):  # noqa: F811
    shown = []
    for torch in (torch_like, oracle):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", category=RuntimeWarning)
            std = torch.ones(1).std()
            shape = torch.ones(2, 3, 4).T.shape  # (once a process on PyTorch: not compared)
            values = [std.isnan().item(), tuple(shape)]
        messages = [str(w.message).split(" (Triggered")[0] for w in caught if "x.T" not in str(w.message)]
        shown.append((values, messages, [w.filename for w in caught] == [__file__] * len(caught)))
    assert shown[0] == shown[1]


def test_finfo_gradient_unique_dim_as_torch(torch_like, oracle):  # noqa: F811
    results = []
    for torch in (torch_like, oracle):
        eps = torch.finfo(torch.float32).eps
        x = torch.tensor(np.array([[1.0, 2.0, 4.0], [2.0, 5.0, 9.0]]), requires_grad=True)
        parts = torch.gradient(x, spacing=2.0, edge_order=1)
        sum((p * p).sum() for p in parts).backward()
        rows = torch.unique(torch.tensor([[1, 2], [0, 1], [1, 2]]), dim=0, return_inverse=True, return_counts=True)
        results.append(
            (type(eps), eps, [p.tolist() for p in parts], x.grad.tolist(), [r.tolist() for r in rows], parts[0].dtype)
        )
    assert results[0][:5] == results[1][:5] and str(results[0][5]) == str(results[1][5])
