"""Models a user trains in PyTorch and exports with `torch.onnx.export` (the TorchScript exporter at
opset 17, and the default dynamo exporter at opset 18 for the ones whose graphs differ), loaded with
Triton's load API and served over `/v2`: their outputs equal onnxruntime's and PyTorch's, their input
gradients PyTorch's autograd on the original module (and float64 central differences of the served
forward), their metadata names each input with -1 for the dynamic batch, and an int64 input (token
ids) gives no gradient and breaks no request.

Each model here failed to load before this file: LSTM and GRU nodes (and their zero initial state of
a dynamic batch), ConvTranspose, Resize (nn.Upsample), Einsum, Trilu (a causal mask), Not (`!=`),
Softplus/Mish/HardSwish/HardSigmoid/PRelu, InstanceNormalization (GroupNorm, InstanceNorm),
ReduceLogSumExp/ReduceL2/ReduceProd, CumSum, Tile (`repeat`) and ArgMax.
"""

from __future__ import annotations

import base64
import io
import json
import warnings

import numpy as np
import pytest

from tests.onnx.onnx_testkit import randomized
from tests.service.service_testkit import asgi_client, assert_still_serves, running_server

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

TOL = {"rtol": 1e-4, "atol": 1e-5}


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.norm, self.l2 = nn.Linear(6, 16), nn.LayerNorm(16), nn.Linear(16, 3)

    def forward(self, x):
        return self.l2(F.gelu(self.norm(self.l1(x))))


class ResidualBlock(nn.Module):
    """BatchNorm in eval (kept as a node, or folded into the convolutions by the exporter), reflect padding, a skip
    connection, a strided 1x1 convolution, a depthwise one, global average pooling."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(4, 4, 3, padding=1, bias=False, padding_mode="reflect"), nn.BatchNorm2d(4)
        self.c2, self.b2 = nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False), nn.BatchNorm2d(4)
        self.down, self.fc = nn.Conv2d(4, 8, 1, stride=2), nn.Linear(8, 3)

    def forward(self, x):
        h = F.relu(self.b2(self.c2(F.relu6(self.b1(self.c1(x))))) + x)
        return self.fc(F.adaptive_avg_pool2d(F.max_pool2d(self.down(h), 2, ceil_mode=True), 1).flatten(1))


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
        self.encoder = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True, norm_first=True)

    def forward(self, x):
        return self.encoder(self.attention(x, x, x, need_weights=False)[0])


class TinyViT(nn.Module):
    """Patches by a strided convolution, a class token expanded to the batch, position embeddings, an
    encoder layer, the class token's head: the token's Expand takes the batch of the request."""

    def __init__(self):
        super().__init__()
        self.patches, self.cls = nn.Conv2d(3, 8, 2, stride=2), nn.Parameter(torch.randn(1, 1, 8))
        self.position = nn.Parameter(torch.randn(1, 5, 8))
        self.encoder = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, activation="gelu")
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        tokens = self.patches(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], 1) + self.position
        return self.head(self.encoder(tokens)[:, 0])


class LSTMClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.LSTM(5, 6, batch_first=True), nn.Linear(6, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out[:, -1])


class StackedLSTM(nn.Module):
    """Two bidirectional layers, the initial state given, the final (h, c) used."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(5, 4, num_layers=2, bidirectional=True, batch_first=True)

    def forward(self, x, h0, c0):
        out, (h, c) = self.rnn(x, (h0, c0))
        return out.sum(1) + h.sum(0).repeat(1, 2) + c.mean(0).repeat(1, 2)


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.GRU(5, 6, batch_first=True, bidirectional=True), nn.Linear(12, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out.mean(1))


class CausalAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(8, 24), nn.Linear(8, 8)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, 2, 4).transpose(1, 2) for z in self.qkv(x).split(8, dim=-1))
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        weights = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~mask, float("-inf")).softmax(-1)
        return self.out((weights @ v).transpose(1, 2).reshape(b, t, c))


class Decoder(nn.Module):
    """ConvTranspose (stride, output_padding), nearest and bilinear upsampling, pixel shuffle, GroupNorm,
    edge padding."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1)
        self.norm, self.conv = nn.GroupNorm(2, 4), nn.Conv2d(4, 2, 3, padding=1)

    def forward(self, x):
        h = F.interpolate(F.silu(self.norm(self.up(x))), scale_factor=2, mode="nearest")
        h = h + F.pixel_shuffle(h.repeat(1, 4, 1, 1)[:, :, ::2, ::2] * h[:, :1, :6, :6].repeat(1, 16, 1, 1), 2)
        skip = F.interpolate(F.pad(x[:, :2], (1, 0, 2, 1), mode="replicate"), size=(12, 12), mode="bilinear")
        return torch.sigmoid(self.conv(h)) + skip


class GroupedConvTranspose1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose1d(4, 6, 3, stride=3, padding=1, dilation=2, groups=2)
        self.norm = nn.InstanceNorm1d(6, affine=True)

    def forward(self, x):
        y = self.norm(self.up(x))
        return torch.triu(y @ y.transpose(1, 2), 1).sum(-1)


class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear, self.prelu = nn.Linear(6, 6), nn.PReLU(6)

    def forward(self, x):
        h = self.linear(x)
        return F.softplus(h) + F.mish(h) + F.hardswish(h) + F.hardsigmoid(h) + self.prelu(h) + F.silu(h)


class Reductions(nn.Module):
    def forward(self, x):
        w = torch.einsum("bij,bkj->bik", x, x)
        return torch.cat([x.logsumexp(-1), x.norm(dim=-1), x.prod(-1), x.cumsum(-1)[..., -1], w.flatten(1)], -1)


class MaskedMeanPool(nn.Module):
    """Token ids (int64, padding 0) and a float feature vector: mean of the non-padding embeddings."""

    def __init__(self):
        super().__init__()
        self.embedding, self.fc = nn.Embedding(10, 4, padding_idx=0), nn.Linear(4, 3)

    def forward(self, tokens, features):
        mask = (tokens != 0).unsqueeze(-1).float()
        pooled = (self.embedding(tokens) * mask).sum(1) / mask.sum(1).clamp(min=1)
        return self.fc(pooled * features)


class WeightedLoss(nn.Module):
    """The loss whose input gradient an adversarial attack follows: per-position class scores, labels
    (int64) with an ignored class, class weights, the weighted mean (SoftmaxCrossEntropyLoss)."""

    def __init__(self):
        super().__init__()
        self.conv, self.weight = nn.Conv1d(3, 4, 1), torch.tensor([1.0, 2.0, 0.5, 1.5])

    def forward(self, x, labels):
        return F.cross_entropy(self.conv(x), labels, weight=self.weight.to(x.dtype), ignore_index=2)


class PerExampleLoss(nn.Module):
    """log_softmax then nll_loss per example (NegativeLogLikelihoodLoss), plus a TopK of the scores."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 4)

    def forward(self, x, labels):
        scores = self.linear(x)
        return F.nll_loss(F.log_softmax(scores, -1), labels, reduction="none") + scores.topk(2, -1).values.sum(-1)


class ScoresAndClass(nn.Module):
    def forward(self, x):
        return x.softmax(-1), x.argmax(-1)


# name: (module, example inputs, the batch axis of each, dynamo too)
def _models():
    torch.manual_seed(0)
    made = {
        "mlp": (MLP(), (torch.randn(2, 6),), (0,), False),
        "residual": (ResidualBlock(), (torch.randn(2, 4, 6, 6),), (0,), True),
        "attention": (Attention(), (torch.randn(2, 5, 8),), (0,), True),
        "vit": (TinyViT(), (torch.randn(2, 3, 4, 4),), (0,), True),
        "lstm": (LSTMClassifier(), (torch.randn(2, 4, 5),), (0,), True),
        "lstm2": (StackedLSTM(), (torch.randn(2, 3, 5), torch.randn(4, 2, 4), torch.randn(4, 2, 4)), (0, 1, 1), False),
        "gru": (GRUClassifier(), (torch.randn(2, 4, 5),), (0,), True),
        "causal": (CausalAttention(), (torch.randn(2, 5, 8),), (0,), False),
        "decoder": (Decoder(), (torch.randn(2, 4, 3, 3),), (0,), True),
        "convt1d": (GroupedConvTranspose1d(), (torch.randn(2, 4, 5),), (0,), False),
        "activations": (Activations(), (torch.randn(2, 6),), (0,), False),
        "reductions": (Reductions(), (torch.randn(2, 3, 4),), (0,), False),
        "tokens": (MaskedMeanPool(), (torch.randint(0, 10, (2, 5)), torch.randn(2, 4)), (0, 0), True),
        "loss": (WeightedLoss(), (torch.randn(2, 3, 5), torch.randint(0, 4, (2, 5))), (0, 0), True),
        "nll": (PerExampleLoss(), (torch.randn(2, 6), torch.randint(0, 4, (2,))), (0, 0), False),
        "argmax": (ScoresAndClass(), (torch.randn(2, 5),), (0,), False),
    }
    randomized([module for module, *_ in made.values()])
    return made


MODELS = _models()
# the TorchScript exporter's class token (vit), refused at load before session 25, is served too
KINDS = {"vit": ["ts", "dynamo"]}
NAMES = [f"{name}-{kind}" for name, spec in MODELS.items() for kind in KINDS.get(name, ["ts", "dynamo"][: 1 + spec[3]])]


def _names(args):
    return [f"in{i}" for i in range(len(args))]


def _export(name: str, kind: str, module=None) -> bytes:
    module_, args, axes, _ = MODELS[name]
    module = module or module_
    if module is not module_:
        args = tuple(a.double() if a.is_floating_point() else a for a in args)
    names, outputs = _names(args), ["y"] + (["label"] if name == "argmax" else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "dynamo":
            pytest.importorskip("onnxscript")
            batch = torch.export.Dim("batch")
            program = torch.onnx.export(
                module,
                args,
                None,
                dynamo=True,
                opset_version=18,
                input_names=names,
                output_names=outputs,
                dynamic_shapes=tuple({a: batch} for a in axes),
                verbose=False,
            )
            return program.model_proto.SerializeToString()
        buffer = io.BytesIO()
        dynamic = {n: {a: "batch"} for n, a in zip(names, axes)} | {o: {0: "batch"} for o in outputs}
        torch.onnx.export(
            module, args, buffer, dynamo=False, opset_version=17, input_names=names, output_names=outputs,
            dynamic_axes=dynamic,
        )  # fmt: skip
        return buffer.getvalue()


def _feeds(name: str, batch: int, seed: int = 1) -> dict:
    """Inputs for a batch other than the example's: the batch axis is dynamic."""
    _, args, axes, _ = MODELS[name]
    rng = np.random.default_rng(seed)
    feeds = {}
    for n, a, axis in zip(_names(args), args, axes):
        shape = list(a.shape)
        shape[axis] = batch
        feeds[n] = (
            rng.integers(0, int(a.max()) + 1, shape)
            if a.dtype == torch.int64
            else rng.standard_normal(shape).astype(np.float32)
        )
    return feeds


def _tensor(name: str, array: np.ndarray) -> dict:
    datatype = "INT64" if array.dtype == np.int64 else "FP32"
    return {"name": name, "shape": list(array.shape), "datatype": datatype, "data": array.ravel().tolist()}


def _torch_run(name, feeds, seed):
    module = MODELS[name][0]
    leaves = {n: torch.tensor(v, requires_grad=v.dtype != np.int64) for n, v in feeds.items()}
    out = module(*leaves.values())
    out = out[0] if isinstance(out, tuple) else out
    out.backward(torch.tensor(seed))
    return out.detach().numpy(), {n: t.grad.numpy() for n, t in leaves.items() if t.requires_grad}


@pytest.fixture(scope="module")
def client():
    with asgi_client(max_nodes=5000) as c:
        yield c


@pytest.mark.parametrize("model", NAMES)
def test_exported_model_serves_pytorchs_outputs_and_input_gradients(client, model):
    name, kind = model.split("-")
    data = _export(name, kind)
    body = {"parameters": {"file:1/model.onnx": base64.b64encode(data).decode()}}
    loaded = client.post(f"/v2/repository/models/{model}/load", json=body)
    assert loaded.status_code == 200, loaded.text
    feeds = _feeds(name, batch=3)
    expected = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    seed = np.random.default_rng(5).standard_normal(expected[0].shape).astype(np.float32)
    torch_out, torch_grads = _torch_run(name, feeds, seed)
    np.testing.assert_allclose(expected[0], torch_out, rtol=1e-4, atol=1e-5)  # the two oracles agree
    metadata = client.get(f"/v2/models/{model}").json()
    floating = [n for n, v in feeds.items() if v.dtype != np.int64]
    asked = ["y"] + [f"grad:{n}" for n in floating] + (["label"] if name == "argmax" else [])
    answer = client.post(
        f"/v2/models/{model}/infer",
        json={
            "inputs": [_tensor(n, v) for n, v in feeds.items()] + [_tensor("grad_output:y", seed)],
            "outputs": [{"name": n} for n in asked],
        },
    )
    assert answer.status_code == 200, answer.text
    got = {o["name"]: np.array(o["data"]).reshape(o["shape"]) for o in answer.json()["outputs"]}
    np.testing.assert_allclose(got["y"], expected[0], **TOL)
    for n in floating:
        np.testing.assert_allclose(got[f"grad:{n}"], torch_grads[n], err_msg=n, **TOL)
    if name == "argmax":
        np.testing.assert_array_equal(got["label"], expected[1])
    # the metadata: every input with its datatype and -1 on its batch axis; a gradient per floating input only
    _, args, axes, _ = MODELS[name]
    inputs = [
        {"name": n, "datatype": "INT64" if a.dtype == torch.int64 else "FP32", "shape": _dynamic(a.shape, axis)}
        for n, a, axis in zip(_names(args), args, axes)
    ]
    assert metadata["inputs"] == inputs
    assert [o["name"] for o in metadata["outputs"]] == [o.name for o in _onnx_outputs(data)] + [
        f"grad:{n}" for n in floating
    ]
    assert metadata["outputs"][0]["shape"] == ([-1, *expected[0].shape[1:]] if expected[0].ndim else [])
    assert client.post(f"/v2/repository/models/{model}/unload").status_code == 200


def _dynamic(shape, axis):
    return [-1 if i == axis else d for i, d in enumerate(shape)]


def _onnx_outputs(data):
    import onnx

    return onnx.load_from_string(data).graph.output


def _executor_forward(imported, feeds):
    from wire.executor import Executor
    from wire.limits import Limits
    from wire.messages import Request

    return Executor(Limits(max_nodes=5000)).forward(
        Request(graph=imported.graph, inputs={**feeds, **imported.parameters})
    )


@pytest.mark.parametrize(
    "name", ["lstm", "lstm2", "gru", "residual", "decoder", "convt1d", "activations", "reductions", "loss", "nll"]
)
def test_gradients_equal_float64_central_differences(name):
    """The same modules exported in float64: the served gradient's projection on random directions
    equals the central difference of the served forward (the gradient checks independently of PyTorch)."""
    from wire.executor import Executor
    from wire.limits import Limits
    from wire.messages import Request
    from wire.onnx import import_model

    module = MODELS[name][0]
    double = type(module)()
    double.load_state_dict(module.state_dict())
    imported = import_model(_export(name, "ts", double.double().eval()))
    feeds = {n: v if v.dtype == np.int64 else v.astype(np.float64) for n, v in _feeds(name, batch=2, seed=3).items()}
    out = _executor_forward(imported, feeds).outputs["y"]
    seed = np.random.default_rng(4).standard_normal(out.shape)
    request = Request(graph=imported.graph, inputs={**feeds, **imported.parameters}, grad_outputs={"y": seed})
    grads = Executor(Limits(max_nodes=5000)).backward(request).grads
    rng, eps = np.random.default_rng(6), 1e-6
    for n, x in ((n, x) for n, x in feeds.items() if x.dtype == np.float64):
        for _ in range(2):
            v = rng.standard_normal(x.shape)
            plus = _executor_forward(imported, {**feeds, n: x + eps * v}).outputs["y"]
            minus = _executor_forward(imported, {**feeds, n: x - eps * v}).outputs["y"]
            numeric = float(np.sum((plus - minus) * seed) / (2 * eps))
            assert float(np.sum(grads[n] * v)) == pytest.approx(numeric, rel=1e-5, abs=1e-7), n


@pytest.mark.parametrize("name", ["lstm2", "gru", "decoder", "convt1d", "activations"])
def test_parameter_gradients_equal_pytorchs(name):
    """With parameter_gradients, each of the module's parameters (LSTM's and GRU's weights, which the
    exporter reorders into ONNX's gate order, ConvTranspose's, PReLU's slope) gets PyTorch's gradient."""
    from wire.executor import Executor
    from wire.limits import Limits
    from wire.messages import Request
    from wire.onnx import import_model

    module, args, axes, _ = MODELS[name]
    buffer, names = io.BytesIO(), _names(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, args, buffer, dynamo=False, opset_version=17, input_names=names, output_names=["y"],
            do_constant_folding=False, dynamic_axes={n: {a: "batch"} for n, a in zip(names, axes)},
        )  # fmt: skip
    imported = import_model(buffer.getvalue(), parameter_gradients=True)
    feeds = _feeds(name, batch=3)
    module.zero_grad()
    out = module(*(torch.tensor(v) for v in feeds.values()))
    seed = np.random.default_rng(0).standard_normal(out.shape).astype(np.float32)
    out.backward(torch.tensor(seed))
    request = Request(graph=imported.graph, inputs={**feeds, **imported.parameters}, grad_outputs={"y": seed})
    grads = Executor(Limits(max_nodes=5000)).backward(request).grads
    parameters = dict(module.named_parameters())
    assert set(parameters) <= set(grads), sorted(set(parameters) - set(grads))
    for n, p in parameters.items():
        np.testing.assert_allclose(grads[n], p.grad.numpy(), rtol=1e-4, atol=1e-4, err_msg=n)


def test_class_token_expanded_to_the_batch_gets_pytorchs_gradient():
    """The class token's gradient is the sum over the batch it was expanded to (dynamo exporter)."""
    from wire.executor import Executor
    from wire.limits import Limits
    from wire.messages import Request
    from wire.onnx import import_model

    module = MODELS["vit"][0]
    imported = import_model(_export("vit", "dynamo"), parameter_gradients=True)
    feeds = _feeds("vit", batch=5)
    module.zero_grad()
    out = module(torch.tensor(feeds["in0"]))
    seed = np.random.default_rng(0).standard_normal(out.shape).astype(np.float32)
    out.backward(torch.tensor(seed))
    request = Request(graph=imported.graph, inputs={**feeds, **imported.parameters}, grad_outputs={"y": seed})
    grads = Executor(Limits(max_nodes=5000)).backward(request).grads
    for name in ("cls", "position", "patches.weight"):
        np.testing.assert_allclose(grads[name], dict(module.named_parameters())[name].grad.numpy(), **TOL)


@pytest.mark.parametrize(("activations", "loads"), [(["Sigmoid", "Tanh"] * 2, True), (["Sigmoid", "Relu"] * 2, False)])
def test_rnn_activations_written_out_are_read(activations, loads):
    """Exporters other than torch's (tf2onnx) write the default activations out: they load; others are refused."""
    import onnx

    from wire.errors import GraphError
    from wire.onnx import import_model

    model = onnx.load_from_string(_export("gru", "ts"))
    (node,) = [n for n in model.graph.node if n.op_type == "GRU"]
    node.attribute.append(onnx.helper.make_attribute("activations", activations))
    if loads:
        feeds = _feeds("gru", batch=2)
        out = _executor_forward(import_model(model.SerializeToString()), feeds).outputs["y"]
        np.testing.assert_allclose(out, _torch_run("gru", feeds, np.ones((2, 3), np.float32))[0], **TOL)
    else:
        with pytest.raises(GraphError, match="only torch.nn's LSTM and GRU"):
            import_model(model.SerializeToString())


def test_token_ids_give_no_gradient_and_asking_for_one_is_refused(client):
    data = _export("tokens", "ts")
    body = {"parameters": {"file:1/model.onnx": base64.b64encode(data).decode()}}
    assert client.post("/v2/repository/models/tok/load", json=body).status_code == 200
    feeds = _feeds("tokens", batch=2)
    inputs = [_tensor(n, v) for n, v in feeds.items()]
    forward = client.post("/v2/models/tok/infer", json={"inputs": inputs, "outputs": [{"name": "y"}]})
    assert forward.status_code == 200, forward.text
    seed = _tensor("grad_output:y", np.ones((2, 3), np.float32))
    every = client.post("/v2/models/tok/infer", json={"inputs": [*inputs, seed]})  # no outputs: all the metadata lists
    assert every.status_code == 200, every.text
    assert [o["name"] for o in every.json()["outputs"]] == ["y", "grad:in1"]
    refused = client.post("/v2/models/tok/infer", json={"inputs": [*inputs, seed], "outputs": [{"name": "grad:in0"}]})
    assert refused.status_code == 422, refused.text
    assert "has no output 'grad:in0'" in refused.json()["error"]
    assert_still_serves(client)


def test_tritonclient_reads_the_metadata_and_gets_the_saliency(tmp_path):
    """A repository of exported models served by `python -m service`, as tritonclient sees it: the
    metadata (-1 for the batch axis, INT64 token ids with no grad: output), and infer with binary
    tensors, int64 ids included."""
    tritonclient_http = pytest.importorskip("tritonclient.http")
    for name in ("lstm2", "tokens"):
        folder = tmp_path / "models" / name / "1"
        folder.mkdir(parents=True)
        (folder / "model.onnx").write_bytes(_export(name, "ts"))
    with running_server(tmp_path / "server.log", model_repository=str(tmp_path / "models"), max_nodes=5000) as live:
        triton = tritonclient_http.InferenceServerClient(url=live.base_url.removeprefix("http://"))
        try:
            tokens = triton.get_model_metadata("tokens")
            assert tokens["inputs"] == [
                {"name": "in0", "datatype": "INT64", "shape": [-1, 5]},
                {"name": "in1", "datatype": "FP32", "shape": [-1, 4]},
            ]
            assert tokens["outputs"] == [
                {"name": "y", "datatype": "FP32", "shape": [-1, 3]},
                {"name": "grad:in1", "datatype": "FP32", "shape": [-1, 4]},
            ]
            stacked = triton.get_model_metadata("lstm2")
            assert [i["shape"] for i in stacked["inputs"]] == [[-1, 3, 5], [4, -1, 4], [4, -1, 4]]
            config = triton.get_model_config("tokens")
            assert json.loads(json.dumps(config))["input"][0]["data_type"] == "TYPE_INT64"
            for name in ("tokens", "lstm2"):
                feeds = _feeds(name, batch=3, seed=9)
                seed = np.random.default_rng(8).standard_normal((3, 3 if name == "tokens" else 8)).astype(np.float32)
                inputs = []
                for n, v in {**feeds, "grad_output:y": seed}.items():
                    tensor = tritonclient_http.InferInput(n, list(v.shape), "INT64" if v.dtype == np.int64 else "FP32")
                    tensor.set_data_from_numpy(v, binary_data=True)
                    inputs.append(tensor)
                floating = [n for n, v in feeds.items() if v.dtype != np.int64]
                wanted = [
                    tritonclient_http.InferRequestedOutput(n, binary_data=True)
                    for n in ["y"] + [f"grad:{f}" for f in floating]
                ]
                result = triton.infer(name, inputs, outputs=wanted)
                torch_out, torch_grads = _torch_run(name, feeds, seed)
                np.testing.assert_allclose(result.as_numpy("y"), torch_out, **TOL)
                for n in floating:
                    np.testing.assert_allclose(result.as_numpy(f"grad:{n}"), torch_grads[n], err_msg=n, **TOL)
        finally:
            triton.close()


class ScoresAndScore(nn.Module):
    """Two floating outputs: per-example scores and a scalar (an energy, a loss)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        scores = torch.tanh(self.linear(x))
        return scores, (scores**2).sum()


@pytest.mark.parametrize("kind", ["lstm_states", "scalar_too"])
def test_a_model_with_several_outputs_differentiates_each(client, kind):
    """An nn.LSTM exported as is has three outputs (out, h_n, c_n); a model may return scores and a
    scalar. As torch.autograd.backward over all the outputs, each floating output is differentiated:
    a non-scalar one without a seed is refused naming its grad_output tensor, a scalar one counts with
    1; zero seeds leave them out, which gives torch.autograd.grad(y, x, seed) (docs/onnx.md)."""
    torch.manual_seed(3)
    module = nn.LSTM(5, 4, batch_first=True) if kind == "lstm_states" else ScoresAndScore()
    outputs = ["y", "h", "c"] if kind == "lstm_states" else ["y", "s"]
    example = torch.randn(2, 3, 5) if kind == "lstm_states" else torch.randn(2, 4)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (example,), buffer, dynamo=False, opset_version=17, input_names=["x"],
                          output_names=outputs, dynamic_axes={"x": {0: "batch"}})  # fmt: skip
    name = f"several-{kind}"
    body = {"parameters": {"file:1/model.onnx": base64.b64encode(buffer.getvalue()).decode()}}
    assert client.post(f"/v2/repository/models/{name}/load", json=body).status_code == 200
    x = np.random.default_rng(0).standard_normal(example.shape).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    results = module(xt)
    results = [results[0], *results[1]] if kind == "lstm_states" else list(results)
    seed = np.random.default_rng(1).standard_normal(results[0].shape).astype(np.float32)
    seeded = [_tensor("x", x), _tensor("grad_output:y", seed)]
    answer = client.post(f"/v2/models/{name}/infer", json={"inputs": seeded, "outputs": [{"name": "grad:x"}]})
    if kind == "lstm_states":
        assert answer.status_code == 422 and "grad_output:h" in answer.json()["error"]
    else:  # the scalar counts with 1
        (expected,) = torch.autograd.grad((results[0] * torch.tensor(seed)).sum() + results[1], xt, retain_graph=True)
        (got,) = answer.json()["outputs"]
        np.testing.assert_allclose(np.array(got["data"]).reshape(got["shape"]), expected.numpy(), **TOL)
    zeros = [_tensor(f"grad_output:{o}", np.zeros(r.shape, np.float32)) for o, r in zip(outputs[1:], results[1:])]
    (expected,) = torch.autograd.grad(results[0], xt, torch.tensor(seed))
    request = {"inputs": seeded + zeros, "outputs": [{"name": "grad:x"}]}
    for _ in range(3):  # the first requests run on the engine, later ones the recorded program
        answer = client.post(f"/v2/models/{name}/infer", json=request)
        assert answer.status_code == 200, answer.text
        (got,) = answer.json()["outputs"]
        np.testing.assert_allclose(np.array(got["data"]).reshape(got["shape"]), expected.numpy(), **TOL)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_both_modes_match_onnxruntime(mode):
    """torch writes CRD (pixel_shuffle); TensorFlow's exporters write DCR, the ONNX default."""
    import onnx
    from onnx import TensorProto
    from onnx import helper as oh

    from wire.onnx import import_model

    node = oh.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode=mode)
    graph = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 2, 3])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 4, 6])],
    )
    data = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]).SerializeToString()
    onnx.checker.check_model(onnx.load_from_string(data))
    x = np.random.default_rng(0).standard_normal((3, 8, 2, 3)).astype(np.float32)
    expected = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(_executor_forward(import_model(data), {"x": x}).outputs["y"], expected)


def _one_node_model(node, x_shape, initializers=()):
    from onnx import TensorProto, numpy_helper
    from onnx import helper as oh

    graph = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]).SerializeToString()


def _hostile(kind):
    from onnx import helper as oh

    if kind == "lstm":  # a sequence of a million steps, unrolled at import
        w, r = np.zeros((1, 4, 1), np.float32), np.zeros((1, 4, 1), np.float32)
        node = oh.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=1)
        return _one_node_model(node, [1_000_000, 1, 1], [("w", w), ("r", r)]), "max_nodes"
    if kind == "resize":  # a [4 * 10^6, 4] interpolation matrix
        node = oh.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
        return _one_node_model(node, [1, 1, 4, 4], [("scales", np.array([1, 1, 1e6, 1], np.float32))]), "Resize"
    node = oh.make_node("Pad", ["x", "pads"], ["y"], mode="edge")  # an index of 2 * 10^9 entries
    return _one_node_model(node, [1, 1, 4], [("pads", np.array([0, 0, 10**9, 0, 0, 10**9]))]), "Pad edge"


@pytest.mark.parametrize("kind", ["lstm", "resize", "pad"])
def test_a_small_model_cannot_make_the_new_converters_build_much(client, kind):
    """A few hundred bytes asking for what the new converters build at import (an RNN's unrolled
    steps, a Resize's interpolation matrix, a reflect or edge Pad's index) are refused at load."""
    data, named = _hostile(kind)
    body = {"parameters": {"file:1/model.onnx": base64.b64encode(data).decode()}}
    answer = client.post(f"/v2/repository/models/hostile-{kind}/load", json=body)
    assert answer.status_code == 422, answer.text
    assert named in answer.json()["error"]
    assert_still_serves(client)
