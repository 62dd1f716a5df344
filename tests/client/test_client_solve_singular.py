"""`torch.linalg.solve` of a singular matrix through the client (embedded and against a server) raises PyTorch's
LinAlgError with solve's words, not those of the `inv` the client records it with; a singular `inv` called
directly in the same program keeps inv's words."""

from __future__ import annotations

import pytest

import client

SINGULAR = [[1.0, 2.0], [2.0, 4.0]]


def _raised(torch, program):
    with pytest.raises(torch.linalg.LinAlgError) as info:
        program(torch)
    return info.value


PROGRAMS = {
    "matrix right side": lambda t: t.linalg.solve(t.tensor(SINGULAR), t.ones(2, 3)).tolist(),
    "vector right side": lambda t: t.linalg.solve(t.tensor(SINGULAR), t.ones(2)).tolist(),
    "left=False": lambda t: t.linalg.solve(t.tensor(SINGULAR), t.ones(3, 2), left=False).tolist(),
    "solve_ex check_errors": lambda t: t.linalg.solve_ex(t.tensor(SINGULAR), t.ones(2, 1), check_errors=True)[
        0
    ].tolist(),
    "result used later": lambda t: (t.linalg.solve(t.tensor(SINGULAR) * 2, t.ones(2, 1)) + 1).sum().item(),
    "batched": lambda t: t.linalg.solve(t.stack([t.eye(2), t.tensor(SINGULAR)]), t.ones(2, 2, 1)).tolist(),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_solve_of_a_singular_matrix_has_torchs_words(session, name):
    torch = pytest.importorskip("torch")
    want = _raised(torch, PROGRAMS[name])
    got = _raised(client, PROGRAMS[name])
    assert isinstance(got, RuntimeError) and isinstance(got, client.ServerError)
    assert "solver failed" in str(want)
    assert str(want) in str(got), (str(want), str(got))
    assert got.message == str(got) and "linalg.inv" not in str(got)


def test_solve_in_a_backward_has_torchs_words(session):
    """The singular matrix met by the /backward of a loss that a solve computes (the backward's forward pass)."""
    torch = pytest.importorskip("torch")

    def program(t):
        A = t.tensor(SINGULAR, requires_grad=True)
        t.linalg.solve(A, t.ones(2, 1)).pow(2).sum().backward()

    assert str(_raised(torch, program)) in str(_raised(client, program))


def test_inv_beside_a_solve_keeps_invs_words(session):
    """Only the `inv` a solve recorded is reworded: a program that solves a regular system and inverts a singular
    matrix reports the inverse's failure as PyTorch's inv does."""
    torch = pytest.importorskip("torch")

    def program(t):
        x = t.linalg.solve(t.eye(2) * 2, t.ones(2, 1))
        return (x.sum() + t.linalg.inv(t.tensor(SINGULAR)).sum()).item()

    want, got = _raised(torch, program), _raised(client, program)
    assert str(want).startswith("linalg.inv:") and str(want) in str(got)
    assert "solve" not in str(got)
