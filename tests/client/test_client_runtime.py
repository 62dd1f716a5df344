"""The process-level helpers programs call around their math (`torch.compile`, `torch.backends`, thread
counts, print options, type promotion, `torch.testing.assert_close`) on the engine, the embedded client
and a live server (`torch_like`), against PyTorch where it defines the answer."""

from __future__ import annotations

import numpy as np
import pytest

from tests.client.test_client_nn_optim import values


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def test_compile_returns_what_it_is_given_in_every_spelling(torch_like):
    model = torch_like.nn.Linear(3, 2)
    assert torch_like.compile(model) is model
    assert torch_like.compile(model, mode="reduce-overhead", fullgraph=True) is model

    @torch_like.compile
    def double(x):
        return x * 2

    @torch_like.compile(dynamic=True)
    def triple(x):
        return x * 3

    x = torch_like.ones(2)
    assert values(double(x)).tolist() == [2.0, 2.0] and values(triple(x)).tolist() == [3.0, 3.0]


def test_device_selection_and_flags_as_programs_write_them(torch_like, oracle):
    device = "cuda" if torch_like.cuda.is_available() else "mps" if torch_like.backends.mps.is_available() else "cpu"
    assert device == "cpu" and torch_like.mps.is_available() is False
    torch_like.backends.cudnn.benchmark = True
    torch_like.backends.cudnn.deterministic = True
    torch_like.backends.cuda.matmul.allow_tf32 = True
    assert torch_like.get_float32_matmul_precision() == oracle.get_float32_matmul_precision() == "highest"
    threads = torch_like.get_num_threads()
    try:
        torch_like.set_float32_matmul_precision("high")
        assert torch_like.get_float32_matmul_precision() == "high"
        with pytest.raises(RuntimeError):
            torch_like.set_float32_matmul_precision("fastest")
        torch_like.set_num_threads(1)
        assert torch_like.get_num_threads() == 1
        torch_like.use_deterministic_algorithms(True)
        assert torch_like.are_deterministic_algorithms_enabled()
    finally:
        torch_like.set_float32_matmul_precision("highest")
        torch_like.set_num_threads(threads)
        torch_like.use_deterministic_algorithms(False)
        torch_like.backends.cudnn.benchmark = torch_like.backends.cudnn.deterministic = False


@pytest.mark.parametrize("left", ["float32", "float64", "int64", "int32", "bool"])
@pytest.mark.parametrize("right", ["float32", "int64", "bool", 2.5, 3])
def test_result_type_is_the_dtype_the_ops_give(torch_like, left, right):
    a = torch_like.ones(2, dtype=getattr(torch_like, left))
    b = torch_like.ones(2, dtype=getattr(torch_like, right)) if isinstance(right, str) else right
    assert torch_like.result_type(a, b) == (a * b).dtype
    if isinstance(right, str):
        assert torch_like.promote_types(a.dtype, b.dtype) == (a * b).dtype
    assert isinstance(a.dtype, torch_like.dtype)


def test_can_cast_size_and_asarray_match_torch(torch_like, oracle):
    pairs = [("float64", "int32"), ("int32", "float64"), ("float32", "float16"), ("bool", "int64"), ("int64", "bool")]
    for a, b in pairs:
        assert torch_like.can_cast(getattr(torch_like, a), getattr(torch_like, b)) == oracle.can_cast(
            getattr(oracle, a), getattr(oracle, b)
        ), (a, b)
    size = torch_like.Size([2, 3, 4])
    assert size == (2, 3, 4) and size.numel() == 24 and repr(size) == repr(oracle.Size([2, 3, 4]))
    x = torch_like.asarray([[1.0, 2.0]], dtype=torch_like.float64, requires_grad=True)
    assert x.requires_grad and str(x.dtype) == "torch.float64" and tuple(x.shape) == (1, 2)


def _assert_close_messages(torch):
    out = []
    cases = [
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]), {}),
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0], dtype=torch.float64), {}),
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0, 3.0]), {}),
        (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]), {}),
        (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.5, 2.0, 3.0]), {"rtol": 0.0, "atol": 0.1}),
    ]
    for actual, expected, tolerances in cases:
        try:
            torch.testing.assert_close(actual, expected, **tolerances)
            out.append(None)
        except AssertionError as error:
            out.append(str(error).split("\n")[:3])
    torch.testing.assert_close(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]), equal_nan=True)
    torch.testing.assert_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-7]))
    return out


def test_assert_close_passes_and_fails_with_pytorchs_words(torch_like, oracle):
    assert _assert_close_messages(torch_like) == _assert_close_messages(oracle)


def test_set_printoptions_changes_how_variables_print(torch_like):
    x = torch_like.tensor([1.123456789])
    try:
        torch_like.set_printoptions(precision=2)
        assert "1.12" in repr(x) and "1.1234" not in repr(x)
    finally:
        torch_like.set_printoptions(profile="default")
        np.set_printoptions(precision=8)
