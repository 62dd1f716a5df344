"""`save`/`load` in PyTorch's own file format, with torch as the oracle both ways, on the engine, the embedded
client and a live server: what `torch.save` writes loads here (values, dtypes, shapes, Parameters, key order,
`_metadata`, strided views and shared storages, bfloat16 as float32), what `save` writes loads in
`torch.load(weights_only=True)`, models and optimizers resume across the two, hostile files are refused as
torch's weights-only unpickler refuses them, and gradserve's earlier `.npz` files still load."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import engine

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool"]


def _written_by_torch(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _rewritten(data: bytes, change) -> bytes:
    """`data` (a torch.save zip) with `change(name, bytes)` applied to each record."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for name in source.namelist():
            target.writestr(name, change(name, source.read(name)))
    return out.getvalue()


def _array(x) -> np.ndarray:
    return np.asarray(x.detach().numpy())


def test_a_torch_checkpoint_loads_with_its_dtypes_parameters_order_and_metadata(torch_like):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    model.register_buffer("counts", torch.arange(4))
    state = model.state_dict()
    tensors = {name: (torch.arange(6) % 3).to(getattr(torch, name)).reshape(2, 3) for name in DTYPES}
    data = _written_by_torch({"state": state, "tensors": tensors, "weight": model[0].weight, "step": 7, "lr": 0.5})
    got = torch_like.load(io.BytesIO(data))
    assert list(got["state"]) == list(state) and type(got["state"]) is OrderedDict
    assert got["state"]._metadata == state._metadata
    for name, want in state.items():
        assert not got["state"][name].requires_grad and type(got["state"][name]) is not torch_like.nn.Parameter
        np.testing.assert_array_equal(_array(got["state"][name]), want.numpy())
    for name, want in tensors.items():
        assert str(got["tensors"][name].dtype) == str(want.dtype) and tuple(got["tensors"][name].shape) == (2, 3)
        np.testing.assert_array_equal(_array(got["tensors"][name]), want.numpy())
    weight = got["weight"]
    assert isinstance(weight, torch_like.nn.Parameter) and weight.requires_grad and (got["step"], got["lr"]) == (7, 0.5)
    np.testing.assert_array_equal(_array(weight), model[0].weight.detach().numpy())


def test_strided_views_load_with_their_values_and_share_one_buffer_on_the_engine(torch_like):
    base = torch.arange(24.0).reshape(4, 6)
    views = {"base": base, "t": base.t(), "step": base[1:, ::2], "row": base[2], "expanded": base[0, :1].expand(3, 2)}
    got = torch_like.load(io.BytesIO(_written_by_torch(views)))
    for name, want in views.items():
        assert tuple(got[name].shape) == tuple(want.shape)
        np.testing.assert_array_equal(_array(got[name]), want.numpy())
    if torch_like is engine:  # one storage, one buffer: writing through a view shows in the others, as in torch
        got["row"].add_(100.0)
        assert got["base"][2, 0].item() == 112.0 and got["t"][0, 2].item() == 112.0


def test_bfloat16_loads_as_float32_exactly_with_a_warning():
    values = torch.tensor([1.5, -2.25, 3.0e38, 1.0e-38], dtype=torch.bfloat16)
    with pytest.warns(UserWarning, match="bfloat16 tensor loads as float32"):
        got = engine.load(io.BytesIO(_written_by_torch({"w": values})))
    assert got["w"].dtype == engine.float32
    np.testing.assert_array_equal(got["w"].numpy(), values.float().numpy())


def test_a_tensors_python_attributes_are_not_set_with_a_warning(torch_like):
    tensor, parameter = torch.ones(2), torch.nn.Parameter(torch.zeros(2))
    tensor.note, parameter.note = "a", "b"  # pickled through _rebuild_from_type_v2 and _rebuild_parameter_with_state
    with pytest.warns(UserWarning, match="a Variable takes no attribute note: not set"):
        got = torch_like.load(io.BytesIO(_written_by_torch([tensor, parameter])))
    assert got[0].tolist() == [1.0, 1.0] and isinstance(got[1], torch_like.nn.Parameter) and got[1].requires_grad


def test_what_save_writes_loads_in_torch_weights_only(torch_like):
    linear = torch_like.nn.Linear(3, 2)
    weight = linear.weight
    made = torch_like.tensor([1.0, 2.0], requires_grad=True) * 2
    tensors = {name: torch_like.tensor(np.arange(4).astype(name)) for name in DTYPES}
    obj = {
        "state": linear.state_dict(),
        "weight": weight,
        "again": weight,
        "made": made,
        "tensors": tensors,
        "nested": [1, (2.5, "x", None, True), {"k": [b"by", -(2**70)]}, OrderedDict(a=np.float32(0.5))],
        "array": np.arange(3.0),
        "where": torch_like.device("cpu"),
    }
    buffer = io.BytesIO()
    torch_like.save(obj, buffer)
    got = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    assert type(got["state"]) is OrderedDict and list(got["state"]) == ["weight", "bias"]
    np.testing.assert_array_equal(got["state"]["weight"].numpy(), _array(weight))
    assert (
        isinstance(got["weight"], torch.nn.Parameter) and got["weight"].requires_grad and got["again"] is got["weight"]
    )
    assert type(got["made"]) is torch.Tensor and got["made"].requires_grad and got["made"].tolist() == [2.0, 4.0]
    for name, tensor in got["tensors"].items():
        assert tensor.dtype == getattr(torch, name) and tensor.tolist() == np.arange(4).astype(name).tolist()
    assert got["nested"] == [1, (2.5, "x", None, True), {"k": [b"by", -(2**70)]}, OrderedDict(a=0.5)]
    assert got["array"].dtype == torch.float64 and got["array"].tolist() == [0.0, 1.0, 2.0]
    assert got["where"] == torch.device("cpu")


def test_views_of_one_buffer_are_saved_as_one_storage():
    base = engine.tensor(np.arange(12.0).reshape(3, 4))
    buffer = io.BytesIO()
    engine.save({"base": base, "t": base.t(), "row": base[1], "step": base[:, ::2]}, buffer)
    got = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    assert len({t.untyped_storage().data_ptr() for t in got.values()}) == 1
    assert got["t"].stride() == (1, 4) and got["row"].storage_offset() == 4 and got["step"].stride() == (4, 2)
    for name, tensor in got.items():
        want = {"base": base, "t": base.t(), "row": base[1], "step": base[:, ::2]}[name]
        np.testing.assert_array_equal(tensor.numpy(), want.numpy())


def test_a_model_round_trips_through_both_libraries(torch_like, tmp_path):
    x = np.linspace(-1, 1, 12).reshape(4, 3)
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    torch.save(theirs.state_dict(), tmp_path / "theirs.pt")
    ours = torch_like.nn.Sequential(torch_like.nn.Linear(3, 5), torch_like.nn.Tanh(), torch_like.nn.Linear(5, 2))
    ours.load_state_dict(torch_like.load(tmp_path / "theirs.pt"))
    want = theirs(torch.tensor(x, dtype=torch.float32)).detach().numpy()
    np.testing.assert_allclose(_array(ours(torch_like.tensor(x, dtype=torch_like.float32))), want, rtol=1e-5, atol=1e-6)
    with torch_like.no_grad():
        ours[0].weight.mul_(2.0)
    torch_like.save(ours.state_dict(), os.fspath(tmp_path / "ours.pt"))
    theirs.load_state_dict(torch.load(tmp_path / "ours.pt", weights_only=True))
    want = theirs(torch.tensor(x, dtype=torch.float32)).detach().numpy()
    np.testing.assert_allclose(_array(ours(torch_like.tensor(x, dtype=torch_like.float32))), want, rtol=1e-5, atol=1e-6)


def _adam_losses(m, state=None):
    model = m.nn.Linear(3, 1).double()
    with m.no_grad():
        model.weight.copy_(m.tensor([[0.1, -0.2, 0.3]], dtype=m.float64))
        model.bias.zero_()
    optimizer = m.optim.Adam(model.parameters(), lr=0.05)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    x, y = m.tensor(np.linspace(-1, 1, 12).reshape(4, 3)), m.tensor(np.ones((4, 1)))
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}, losses


def test_an_optimizers_state_resumes_across_the_two_libraries(torch_like):
    theirs, _ = _adam_losses(torch)
    written = _written_by_torch(theirs)  # before resuming from it: an optimizer resumed updates the states in place
    _, want = _adam_losses(torch, torch.load(io.BytesIO(written)))
    _, got = _adam_losses(torch_like, torch_like.load(io.BytesIO(written)))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    ours, _ = _adam_losses(torch_like)
    buffer = io.BytesIO()
    torch_like.save(ours, buffer)
    state = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    assert state["optimizer"]["param_groups"][0]["params"] == [0, 1] and state["optimizer"]["state"][0]["step"] == 3
    _, resumed = _adam_losses(torch, state)
    np.testing.assert_allclose(resumed, want, rtol=1e-12)


class _Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


class _Eval:
    def __reduce__(self):
        return (eval, ("1 + 1",))


def test_a_hostile_file_is_refused_as_torchs_weights_only_load_refuses_it(torch_like, tmp_path):
    marker = tmp_path / "owned"
    hostile = {
        "zip": _written_by_torch({"w": torch.ones(2), "x": _Evil(marker)}),
        "pickle": pickle.dumps(_Evil(marker), protocol=2),
        "builtin": _written_by_torch([_Eval()]),
    }
    for kind, data in hostile.items():
        for m in (torch_like, torch):
            with pytest.raises(pickle.UnpicklingError, match="Weights only load failed") as error:
                m.load(io.BytesIO(data), weights_only=True)
            assert (
                "GLOBAL eval was not an allowed global" if kind == "builtin" else "whose module posix is blocked"
            ) in str(error.value)
    assert not marker.exists()


def test_a_storage_too_small_for_its_tensor_is_refused():
    written = _written_by_torch(torch.arange(6.0))
    short = _rewritten(written, lambda name, body: body[:8] if "/data/" in name else body)
    longer = _rewritten(
        written, lambda name, body: body.replace(b"K\x06\x85", b"K\x07\x85") if name.endswith(".pkl") else body
    )
    for m in (engine, torch):
        with pytest.raises(RuntimeError, match=r"record size \(8 bytes\) does not match expected size \(24 bytes"):
            m.load(io.BytesIO(short), weights_only=True)
        with pytest.raises(RuntimeError, match="Trying to resize storage that is not resizable"):
            m.load(io.BytesIO(longer), weights_only=True)


def test_map_location_maps_a_cuda_checkpoint_to_the_cpu(torch_like):
    cpu = _written_by_torch({"w": torch.arange(3.0)})
    on_cuda = _rewritten(cpu, lambda name, body: body.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0"))
    for m in (torch_like, torch):
        with pytest.raises(RuntimeError, match="torch.cuda.is_available\\(\\) is False"):
            m.load(io.BytesIO(on_cuda), weights_only=True)
        for where in ("cpu", m.device("cpu"), {"cuda:0": "cpu"}, lambda storage, location: storage):
            assert m.load(io.BytesIO(on_cuda), map_location=where)["w"].tolist() == [0.0, 1.0, 2.0]


def test_a_file_gradserves_earlier_save_wrote_still_loads(torch_like):
    """The `.npz` archive gradserve's `save` wrote until this format: the arrays, and the structure as JSON."""
    tree = {
        "odict": [
            ["weight", {"parameter": 0, "requires_grad": True}],
            ["step", {"tensor": 1, "requires_grad": False}],
            ["rest", {"list": [{"array": 2}, {"scalar": 3}, "s", None, {"tuple": [1, 2.5]}]}],
        ]
    }
    buffer = io.BytesIO()
    arrays = {"a0": np.ones((2, 2)), "a1": np.array(3.0), "a2": np.arange(3), "a3": np.array(0.5)}
    np.savez(buffer, tree=np.frombuffer(json.dumps(tree).encode(), np.uint8), **arrays)
    got = torch_like.load(io.BytesIO(buffer.getvalue()))
    assert list(got) == ["weight", "step", "rest"] and isinstance(got["weight"], torch_like.nn.Parameter)
    assert got["step"].item() == 3.0 and got["rest"][1] == 0.5 and got["rest"][2:] == ["s", None, (1, 2.5)]
    np.testing.assert_array_equal(got["rest"][0], [0, 1, 2])
