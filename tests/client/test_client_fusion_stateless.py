"""torch.nn.utils.fusion (a Conv/Linear layer and the eval-mode BatchNorm after it folded into one layer) and
torch.nn.utils.stateless.functional_call (torch.func.functional_call with its FutureWarning), through the engine,
the embedded client and a live server (`torch_like`), against torch in float64: the fused weights and biases, the
fused layer's output equal to the pair's, the gradient of the fused weight, and torch's errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.client.test_client_nn_sequence import _raises_like

torch = pytest.importorskip("torch")

CLOSE = dict(rtol=1e-12, atol=1e-13)


def _values(v):
    return np.array(v.detach().numpy())


def _pair(m, kind):
    """(layer, BatchNorm, input) with NumPy's draws for every value, both in eval mode."""
    rng = np.random.default_rng(0)
    nn = m.nn
    layer, bn, shape = {
        "conv2d": (nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), (2, 2, 5, 5)),
        "conv_transpose2d_no_bias": (nn.ConvTranspose2d(2, 3, 2, bias=False), nn.BatchNorm2d(3), (2, 2, 4, 4)),
        "conv1d_bn_no_affine": (nn.Conv1d(2, 3, 2), nn.BatchNorm1d(3, affine=False), (2, 2, 6)),
        "linear": (nn.Linear(4, 3), nn.BatchNorm1d(3), (5, 4)),
        "linear_no_bias_bn_of_one": (nn.Linear(4, 3, bias=False), nn.BatchNorm1d(1), (5, 4)),
    }[kind]
    for module in (layer, bn):
        module.double().eval()
        module.load_state_dict(
            {
                k: m.tensor(rng.uniform(0.5, 1.5, tuple(v.shape)) if "var" in k else rng.uniform(-1, 1, tuple(v.shape)))
                for k, v in module.state_dict().items()
                if "num_batches" not in k
            },
            strict=False,
        )
    return layer, bn, m.tensor(rng.standard_normal(shape))


def _fused(m, kind):
    layer, bn, x = _pair(m, kind)
    fusion = m.nn.utils.fusion
    if "linear" in kind:
        fused = fusion.fuse_linear_bn_eval(layer, bn)
    else:
        fused = fusion.fuse_conv_bn_eval(layer, bn, transpose="transpose" in kind)
    assert type(fused) is type(layer) and fused is not layer and isinstance(fused.weight, m.nn.Parameter)
    assert fused.weight.is_leaf and fused.weight.requires_grad
    out = fused(x)
    (out * out).sum().backward()
    pair = None if bn.num_features != out.shape[1] else _values(bn(layer(x)))  # (a BatchNorm1d(1) fuses, broadcast)
    return _values(fused.weight), _values(fused.bias), _values(out), _values(fused.weight.grad), pair


@pytest.mark.parametrize(
    "kind", ["conv2d", "conv_transpose2d_no_bias", "conv1d_bn_no_affine", "linear", "linear_no_bias_bn_of_one"]
)
def test_fused_layers_are_torchs(torch_like, kind):
    got, want = _fused(torch_like, kind), _fused(torch, kind)
    if got[4] is not None:
        np.testing.assert_allclose(got[2], got[4], rtol=1e-10, atol=1e-12)  # the fused layer is the pair
    for ours, theirs in zip(got[:4], want[:4], strict=True):
        np.testing.assert_allclose(ours, theirs, **CLOSE)


def test_fusion_errors_are_torchs(torch_like):
    def bad_calls(m):
        nn, fusion = m.nn, m.nn.utils.fusion
        return [
            lambda: fusion.fuse_conv_bn_eval(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2).eval()),
            lambda: fusion.fuse_linear_bn_eval(nn.Linear(2, 3).eval(), nn.BatchNorm1d(2).eval()),
            lambda: fusion.fuse_linear_bn_eval(nn.Linear(2, 3).eval(), nn.BatchNorm1d(3)),
            lambda: fusion.fuse_conv_bn_eval(
                nn.Conv2d(1, 2, 1).eval(), nn.BatchNorm2d(2, track_running_stats=False).eval()
            ),
        ]

    for ours, theirs in zip(bad_calls(torch_like), bad_calls(torch), strict=True):
        _raises_like(ours, theirs)


def test_stateless_functional_call_warns_and_calls_with_the_given_tensors(torch_like):
    results = []
    for m in (torch_like, torch):
        linear = m.nn.Linear(2, 2).double()
        weight = m.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=m.float64, requires_grad=True)
        with pytest.warns(FutureWarning, match=r"^`torch\.nn\.utils\.stateless\.functional_call` is deprecated"):
            out = m.nn.utils.stateless.functional_call(
                linear, {"weight": weight, "bias": m.zeros(2, dtype=m.float64)}, (m.ones(2, dtype=m.float64),)
            )
        out.sum().backward()
        results.append((_values(out), _values(weight.grad)))
        assert linear.weight.grad is None
    for ours, theirs in zip(*results, strict=True):
        np.testing.assert_allclose(ours, theirs, **CLOSE)


def test_fusion_and_stateless_import_by_torchs_path(torch_like):
    import importlib

    fusion = importlib.import_module(f"{torch_like.__name__}.nn.utils.fusion")
    stateless = importlib.import_module(f"{torch_like.__name__}.nn.utils.stateless")
    assert fusion.fuse_linear_bn_weights is torch_like.nn.utils.fusion.fuse_linear_bn_weights
    assert stateless.functional_call is torch_like.nn.utils.stateless.functional_call
