"""Conv1d/2d/3d's `padding_mode` (reflect, replicate, circular), MaxUnpool1d/2d/3d after a max pool's indices,
LPPool1d/2d/3d and ChannelShuffle against torch, on the engine, the embedded client and a live server: values,
gradients of the input and the weight, reprs and torch's errors. (The functions' own cases, with their finite
differences, are rows of tests/nn_functional_cases.py.)"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _seeded(m, out):
    return (out * m.tensor(np.cos(np.arange(out.numel())).reshape(tuple(out.shape)))).sum()


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("dims, padding", [(1, 2), (2, (1, 2)), (3, 1), (2, "same")])
def test_conv_padding_modes_are_torchs(torch_like, mode, dims, padding):
    x = np.sin(np.arange(2 * 2 * 4**dims)).reshape((2, 2) + (4,) * dims)
    results = []
    for m in (torch_like, torch):
        conv = getattr(m.nn, f"Conv{dims}d")(
            2, 3, 3 if padding != "same" else (3,) * (dims - 1) + (2,), padding=padding, padding_mode=mode
        )
        conv = conv.double()
        with m.no_grad():
            conv.weight.copy_(m.tensor(np.arange(conv.weight.numel()).reshape(tuple(conv.weight.shape)) * 0.01))
            conv.bias.copy_(m.tensor([0.5, -0.5, 0.25], dtype=m.float64))
        input = m.tensor(x, requires_grad=True)
        out = conv(input)
        grads = m.autograd.grad(_seeded(m, out), [input, conv.weight, conv.bias])
        results.append([out.detach().numpy(), *(g.numpy() for g in grads), repr(conv)])
    got, want = results
    for g, w in zip(got[:-1], want[:-1]):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert got[-1] == want[-1]


def test_conv_padding_mode_errors_are_torchs(torch_like):
    with pytest.raises(ValueError, match="padding_mode must be one of .* but got padding_mode='mirror'"):
        torch_like.nn.Conv2d(1, 1, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match='Only "zeros" padding mode is supported for ConvTranspose2d'):
        torch_like.nn.ConvTranspose2d(1, 1, 3, padding_mode="reflect")


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_unpooling_lp_pooling_and_channel_shuffle_modules_are_torchs(torch_like, dims):
    x = np.sin(np.arange(2 * 4 * 4**dims) * 0.7).reshape((2, 4) + (4,) * dims)
    results = []
    for m in (torch_like, torch):
        input = m.tensor(x, requires_grad=True)
        pooled, indices = getattr(m.nn.functional, f"max_pool{dims}d")(input, 2, return_indices=True)
        unpool = getattr(m.nn, f"MaxUnpool{dims}d")(2)
        outs = [
            unpool(pooled, indices, output_size=tuple(input.shape)),
            getattr(m.nn, f"LPPool{dims}d")(2, 2, stride=1)(input),
            getattr(m.nn, f"LPPool{dims}d")(float("inf"), 2)(input),
            m.nn.ChannelShuffle(2)(input),
        ]
        (grad,) = m.autograd.grad(sum(_seeded(m, out) for out in outs), [input])
        reprs = [repr(unpool), repr(getattr(m.nn, f"LPPool{dims}d")(1.5, 2, 1, True)), repr(m.nn.ChannelShuffle(2))]
        results.append([*(out.detach().numpy() for out in outs), grad.numpy(), reprs])
    got, want = results
    for g, w in zip(got[:-1], want[:-1]):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert got[-1] == want[-1]


def test_unpooling_and_shuffle_errors_are_torchs(torch_like):
    F = torch_like.nn.functional
    with pytest.raises(RuntimeError, match="Expected shape of indices to be same as that of the input tensor"):
        F.max_unpool2d(torch_like.zeros(1, 1, 2, 2), torch_like.zeros(1, 1, 2, 1, dtype=torch_like.int64), 2)
    with pytest.raises(ValueError, match=r"invalid output_size \"\[7, 4\]\" \(dim 0 must be between 2 and 6\)"):
        F.max_unpool2d(
            torch_like.zeros(1, 1, 2, 2), torch_like.zeros(1, 1, 2, 2, dtype=torch_like.int64), 2, output_size=[7, 4]
        )
    with pytest.raises(
        RuntimeError, match="Number of channels must be divisible by groups. Got 3 channels and 2 groups."
    ):
        F.channel_shuffle(torch_like.zeros(2, 3, 2), 2)
    with pytest.raises(
        RuntimeError, match=r"channel_shuffle expects input with > 2 dims, but got input with sizes \[2, 3\]"
    ):
        F.channel_shuffle(torch_like.zeros(2, 3), 2)
