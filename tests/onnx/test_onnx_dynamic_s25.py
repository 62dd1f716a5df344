"""Models exported with a dynamic sequence length next to the dynamic batch (`dynamic_axes` of the
TorchScript exporter, `dynamic_shapes` of the dynamo one): attention reshapes [batch, seq, embed] to
[batch, seq, heads, head_dim] from two sizes known only when a request comes, and a causal mask is
`ones(seq, seq).tril()`. Each model is loaded once and run for several (batch, seq) shapes: its outputs
equal onnxruntime's and PyTorch's, its input gradients PyTorch's autograd on the exported module, and
float64 central differences of the served forward.

Every attention model here was refused at load before this file ("more than one dimension known only
when running").
"""

from __future__ import annotations

import base64
import io
import warnings

import numpy as np
import pytest

from tests.onnx.onnx_testkit import randomized
from tests.onnx.test_onnx_exported_s24 import CausalAttention, _tensor  # the causal model, a tensor as JSON
from tests.service.service_testkit import asgi_client

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

TOL = {"rtol": 1e-4, "atol": 2e-5}
SHAPES = [(3, 4), (1, 7), (2, 1)]  # (batch, seq) of the requests: none is the example's (2, 5)


class FlashStyle(nn.Module):
    """One [batch, seq, 3, heads, dim] view split by `permute`, `F.scaled_dot_product_attention` (causal)."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 4).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)


class MultiheadAttention(nn.Module):
    def __init__(self, batch_first=True):
        super().__init__()
        self.attention = nn.MultiheadAttention(8, 2, batch_first=batch_first)

    def forward(self, x):
        out, weights = self.attention(x, x, x)  # the weights averaged over the heads: [batch, seq, seq]
        return (
            out + weights.sum(-1, keepdim=True).transpose(0, 1) if not self.attention.batch_first else out + weights @ x
        )


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            8, 2, 16, dropout=0.0, batch_first=True, norm_first=True, activation="gelu"
        )

    def forward(self, x):
        return self.layer(x)


class TokenMLP(nn.Module):
    """LayerNorm and GELU (tanh) over every token of a [batch, seq, features] input, then a mean over tokens."""

    def __init__(self):
        super().__init__()
        self.l1, self.norm, self.l2 = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 8)

    def forward(self, x):
        return self.l2(F.gelu(self.norm(self.l1(x)), approximate="tanh")) + x.mean(1, keepdim=True)


class TokensAndFeatures(nn.Module):
    """Token ids (INT64, no gradient) of a dynamic length embedded, added to float features, an encoder layer."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(10, 8)
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(self, tokens, x):
        return self.layer(self.embedding(tokens) + x)


class ConvNet(nn.Module):
    """Dynamic batch, height and width: convolutions, batch norm, global pooling."""

    def __init__(self):
        super().__init__()
        self.c1, self.bn, self.c2 = (
            nn.Conv2d(3, 4, 3, padding=1),
            nn.BatchNorm2d(4),
            nn.Conv2d(4, 6, 3, stride=2, padding=1),
        )
        self.fc = nn.Linear(6, 8)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(F.relu(self.c2(F.relu(self.bn(self.c1(x))))), 1).flatten(1))


class Conv1dOverTime(nn.Module):
    """A [batch, seq, features] input transposed to channels, a Conv1d over the dynamic length, back."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(8, 8, 3, padding=1)

    def forward(self, x):
        return torch.tanh(self.conv(x.transpose(1, 2))).transpose(1, 2) * x


class TinyGPT(nn.Module):
    """Token and position embeddings (`pos(torch.arange(seq))`, a Range of the request's length, or rows of
    a table `table[:, :seq]`, a Slice to it), float features added, causal attention, LayerNorm."""

    def __init__(self, positions="arange"):
        super().__init__()
        self.positions, self.tokens, self.pos = positions, nn.Embedding(10, 8), nn.Embedding(16, 8)
        self.table, self.qkv, self.norm = nn.Parameter(torch.randn(1, 16, 8)), nn.Linear(8, 24), nn.LayerNorm(8)

    def forward(self, tokens, x):
        b, t = tokens.shape
        h = self.tokens(tokens) + x + (self.pos(torch.arange(t)) if self.positions == "arange" else self.table[:, :t])
        q, k, v = self.qkv(h).view(b, t, 3, 2, 4).permute(2, 0, 3, 1, 4)
        return self.norm(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, 8))


class PaddingMask(nn.Module):
    """An encoder layer given `src_key_padding_mask` (token id 0 is padding: a BOOL mask of the request's shape)."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(self, tokens, x):
        return self.layer(x, src_key_padding_mask=tokens == 0)


class MaskedAttention(nn.Module):
    """BERT's additive mask: a float attention mask [batch, seq] broadcast to the scores, the last token's output."""

    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(8, 24), nn.Linear(8, 8)

    def forward(self, mask, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 4).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / 2.0 + (1.0 - mask[:, None, None, :]) * -10000.0
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c))[:, -1]


class Rotary(nn.Module):
    """Rotary position embeddings: angles from `torch.arange(seq, dtype=torch.float32)`, cos and sin, halves
    rotated and concatenated, then causal attention."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.register_buffer("freqs", 1.0 / (100 ** (torch.arange(0, 4, 2).float() / 4)))

    def forward(self, x):
        b, t, c = x.shape
        angles = torch.arange(t, dtype=torch.float32)[:, None] * self.freqs[None, :]
        cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
        q, k, v = self.qkv(x).view(b, t, 3, 2, 4).permute(2, 0, 3, 1, 4)
        q, k = (z * cos + torch.cat([-z[..., 2:], z[..., :2]], -1) * sin for z in (q, k))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)


class UpsampledOverTime(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        return F.interpolate(self.conv(x.transpose(1, 2)[..., None].expand(-1, -1, -1, 3)), scale_factor=2)


class ClassToken(nn.Module):
    """A class token expanded to the batch and position ids `arange(seq)` expanded to [batch, seq] (the
    TorchScript exporter writes Expand(x, Where(Equal(shape, -1), 1, shape))), concatenated along seq."""

    def __init__(self):
        super().__init__()
        self.cls, self.linear = nn.Parameter(torch.randn(1, 1, 8)), nn.Linear(8, 8)

    def forward(self, x):
        b, t, _ = x.shape
        positions = torch.arange(t).unsqueeze(0).expand(b, -1)[..., None]
        return self.linear(torch.cat([self.cls.expand(b, -1, -1), x + positions], 1))


class Decoder(nn.Module):
    """A decoder layer: causal self-attention over seq, cross-attention to a memory of another dynamic length."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(self, memory, x):
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.layer(x, memory, tgt_mask=mask, tgt_is_causal=True)


class Regrouped(nn.Module):
    """Reshapes that merge and split the dynamic dims: [b, t, c] -> [b, t * c] -> [b, t, c], flatten(0, 1)."""

    def forward(self, x):
        b, t, c = x.shape
        return x.reshape(b, t * c).softmax(-1).reshape(b, t, c) * x.flatten(0, 1).view(b, -1, c)


# name: (module, (batch, seq) -> inputs, dynamic axes of each input {axis: name}, exporters)
def _tokens(b, t, rng):
    tokens = rng.integers(0, 10, (b, t)).astype(np.int64)
    tokens[:, 0] = 1  # no row all padding
    return tokens


def _x(b, t, rng):
    return rng.standard_normal((b, t, 8)).astype(np.float32)


def _models():
    torch.manual_seed(0)
    bs, sb = {0: "batch", 1: "seq"}, {0: "seq", 1: "batch"}
    made = {
        "causal": (CausalAttention(), lambda b, t, r: [_x(b, t, r)], [bs], ("ts17", "dynamo")),
        "sdpa": (FlashStyle(), lambda b, t, r: [_x(b, t, r)], [bs], ("ts14", "dynamo")),
        "mha": (MultiheadAttention(), lambda b, t, r: [_x(b, t, r)], [bs], ("dynamo",)),
        "mha_seq_first": (
            MultiheadAttention(batch_first=False),
            lambda b, t, r: [_x(t, b, r)],
            [sb],
            ("dynamo",),
        ),
        "encoder": (Encoder(), lambda b, t, r: [_x(b, t, r)], [bs], ("dynamo",)),
        "token_mlp": (TokenMLP(), lambda b, t, r: [_x(b, t, r)], [bs], ("ts17", "ts13")),
        "tokens": (TokensAndFeatures(), lambda b, t, r: [_tokens(b, t, r), _x(b, t, r)], [bs, bs], ("dynamo",)),
        "convnet": (
            ConvNet(),
            lambda b, t, r: [r.standard_normal((b, 3, t + 2, 2 * t + 1)).astype(np.float32)],
            [{0: "batch", 2: "height", 3: "width"}],
            ("ts17",),
        ),
        "conv1d": (Conv1dOverTime(), lambda b, t, r: [_x(b, t, r)], [bs], ("ts17",)),
        "gpt": (TinyGPT(), lambda b, t, r: [_tokens(b, t, r), _x(b, t, r)], [bs, bs], ("ts17", "dynamo")),
        "gpt_table": (TinyGPT("table"), lambda b, t, r: [_tokens(b, t, r), _x(b, t, r)], [bs, bs], ("ts17", "dynamo")),
        "padding_mask": (PaddingMask(), lambda b, t, r: [_tokens(b, t, r), _x(b, t, r)], [bs, bs], ("dynamo",)),
        "bert_mask": (
            MaskedAttention(),
            lambda b, t, r: [(r.random((b, t)) > 0.3).astype(np.float32), _x(b, t, r)],
            [bs, bs],
            ("ts17", "dynamo"),
        ),
        "rotary": (Rotary(), lambda b, t, r: [_x(b, t, r)], [bs], ("ts17", "dynamo")),
        "class_token": (ClassToken(), lambda b, t, r: [_x(b, t, r)], [bs], ("ts17", "dynamo")),
        "decoder": (
            Decoder(),
            lambda b, t, r: [_x(b, t + 2, r), _x(b, t, r)],
            [{0: "batch", 1: "memory"}, bs],
            ("dynamo",),
        ),
        "regrouped": (Regrouped(), lambda b, t, r: [_x(b, t, r)], [bs], ("ts17", "dynamo")),
    }
    randomized([module for module, *_ in made.values()])
    return made


MODELS = _models()
CASES = [f"{name}-{kind}" for name, spec in MODELS.items() for kind in spec[3]]
_EXPORTED: dict = {}


def _names(count):
    return [f"in{i}" for i in range(count)]


def _export(case: str, module=None) -> bytes:
    name, kind = case.split("-")
    spec = MODELS[name]
    if module is None and case in _EXPORTED:
        return _EXPORTED[case]
    module = module or spec[0]
    double = module is not spec[0]
    args = tuple(
        torch.tensor(a if a.dtype == np.int64 or not double else a.astype(np.float64))
        for a in spec[1](2, 5, np.random.default_rng(0))
    )
    names = _names(len(args))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "dynamo":
            pytest.importorskip("onnxscript")
            dims = {}
            shapes = tuple({a: dims.setdefault(n, torch.export.Dim(n)) for a, n in axes.items()} for axes in spec[2])
            program = torch.onnx.export(
                module, args, None, dynamo=True, opset_version=18, input_names=names, output_names=["y"],
                dynamic_shapes=shapes, verbose=False,
            )  # fmt: skip
            data = program.model_proto.SerializeToString()
        else:
            buffer = io.BytesIO()
            dynamic = dict(zip(names, spec[2])) | {"y": spec[2][-1]}
            torch.onnx.export(
                module, args, buffer, dynamo=False, opset_version=int(kind[2:]), input_names=names,
                output_names=["y"], dynamic_axes=dynamic,
            )  # fmt: skip
            data = buffer.getvalue()
    if not double:
        _EXPORTED[case] = data
    return data


def _torch_run(module, feeds, seed):
    leaves = {n: torch.tensor(v, requires_grad=v.dtype != np.int64) for n, v in feeds.items()}
    out = module(*leaves.values())
    out.backward(torch.tensor(seed))
    return out.detach().numpy(), {n: t.grad.numpy() for n, t in leaves.items() if t.requires_grad}


@pytest.fixture(scope="module")
def client():
    with asgi_client(max_nodes=5000) as c:
        yield c


@pytest.mark.parametrize("case", CASES)
def test_one_loaded_model_serves_every_sequence_length(client, case):
    """Loaded once over Triton's load API, then asked for outputs and input gradients at three
    (batch, seq) shapes: onnxruntime's outputs, PyTorch's outputs and input gradients."""
    name = case.split("-")[0]
    module, make, axes, _ = MODELS[name]
    data = _export(case)
    body = {"parameters": {"file:1/model.onnx": base64.b64encode(data).decode()}}
    loaded = client.post(f"/v2/repository/models/{case}/load", json=body)
    assert loaded.status_code == 200, loaded.text
    metadata = client.get(f"/v2/models/{case}").json()
    assert [i["shape"] for i in metadata["inputs"]] == [
        [-1 if a in ax else d for a, d in enumerate(x.shape)]
        for x, ax in zip(make(2, 5, np.random.default_rng(0)), axes)
    ]
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for b, t in SHAPES:
        feeds = dict(zip(_names(len(axes)), make(b, t, np.random.default_rng(10 * b + t))))
        expected = session.run(None, feeds)[0]
        seed = np.random.default_rng(t).standard_normal(expected.shape).astype(np.float32)
        torch_out, torch_grads = _torch_run(module, feeds, seed)
        np.testing.assert_allclose(expected, torch_out, **TOL)  # the two oracles agree
        answer = client.post(
            f"/v2/models/{case}/infer",
            json={
                "inputs": [_tensor(n, v) for n, v in feeds.items()] + [_tensor("grad_output:y", seed)],
                "outputs": [{"name": "y"}] + [{"name": f"grad:{n}"} for n in torch_grads],
            },
        )
        assert answer.status_code == 200, (b, t, answer.text)
        got = {o["name"]: np.array(o["data"]).reshape(o["shape"]) for o in answer.json()["outputs"]}
        np.testing.assert_allclose(got["y"], expected, err_msg=f"{(b, t)}", **TOL)
        for n, grad in torch_grads.items():
            np.testing.assert_allclose(got[f"grad:{n}"], grad, err_msg=f"{n} {(b, t)}", **TOL)
    assert client.post(f"/v2/repository/models/{case}/unload").status_code == 200


def _forward(imported, feeds):
    from wire.executor import Executor
    from wire.limits import Limits
    from wire.messages import Request

    request = Request(graph=imported.graph, inputs={**feeds, **imported.parameters})
    return Executor(Limits(max_nodes=5000)).forward(request).outputs["y"]


@pytest.mark.parametrize(
    "case",
    [
        "causal-ts17",
        "sdpa-dynamo",
        "mha_seq_first-dynamo",
        "token_mlp-ts13",
        "convnet-ts17",
        "gpt_table-ts17",
        "rotary-dynamo",
        "bert_mask-ts17",
        "class_token-ts17",
        "decoder-dynamo",
    ],
)
def test_gradients_equal_float64_central_differences(case):
    """Exported in float64: for two sequence lengths through one import, the served gradient's projection on
    random directions equals the central difference of the served forward (independently of PyTorch)."""
    from wire.executor import Executor
    from wire.limits import Limits
    from wire.messages import Request
    from wire.onnx import import_model

    name = case.split("-")[0]
    module, make, axes, _ = MODELS[name]
    double = type(module)(*({"mha_seq_first": [False], "gpt_table": ["table"]}.get(name, [])))
    double.load_state_dict(module.state_dict())
    imported = import_model(_export(case, double.double().eval()))
    for b, t in [(2, 3), (1, 6)]:
        rng = np.random.default_rng(b + t)
        feeds = {
            n: v if v.dtype == np.int64 else v.astype(np.float64) for n, v in zip(_names(len(axes)), make(b, t, rng))
        }
        out = _forward(imported, feeds)
        seed = rng.standard_normal(out.shape)
        request = Request(graph=imported.graph, inputs={**feeds, **imported.parameters}, grad_outputs={"y": seed})
        grads = Executor(Limits(max_nodes=5000)).backward(request).grads
        # the features (a BERT mask's scores are scaled by 1e4: its third derivative is beyond a central
        # difference's reach, and its gradient is checked against PyTorch's above)
        for n, x in ((n, x) for n, x in feeds.items() if x.dtype == np.float64 and x.ndim > 2):
            for _ in range(2):
                v, eps = rng.standard_normal(x.shape), 1e-6
                plus, minus = (
                    _forward(imported, {**feeds, n: x + eps * v}),
                    _forward(imported, {**feeds, n: x - eps * v}),
                )
                numeric = float(np.sum((plus - minus) * seed) / (2 * eps))
                assert float(np.sum(grads[n] * v)) == pytest.approx(numeric, rel=1e-5, abs=1e-7), (n, b, t)


@pytest.mark.parametrize(
    ("module", "axes", "message"),
    [
        (nn.GRU(8, 4, batch_first=True), {0: "batch", 1: "seq"}, "the sequence length must be known at import"),
        (MultiheadAttention(), {0: "batch", 1: "seq"}, "has more than one dimension known only when running"),
        (UpsampledOverTime(), {0: "batch", 1: "seq"}, "Resize needs known scales or sizes"),
    ],
    ids=["gru", "mha-ts17", "resize-of-seq"],
)
def test_what_cannot_be_served_at_any_length_is_refused_at_load(module, axes, message):
    """An RNN is unrolled at import, so its length must be known then; the TorchScript exporter writes
    nn.MultiheadAttention's key length as the example's (onnxruntime also fails at another length); a Resize
    is an interpolation matrix per dim, made at import. All are refused at load, naming the node (the Resize
    of a dynamic dim was served before, that dim left unresized: [3, 4, 4, 6] where PyTorch gives [3, 4, 8, 6])."""
    from wire.errors import GraphError
    from wire.onnx import import_model

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(), (torch.randn(2, 5, 8),), buffer, dynamo=False, opset_version=17, input_names=["in0"],
            dynamic_axes={"in0": axes},
        )  # fmt: skip
    if isinstance(module, MultiheadAttention):  # the exporter's graph, not gradserve, fixes the length
        session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
        with pytest.raises(Exception, match="Reshape"):
            session.run(None, {"in0": np.zeros((2, 7, 8), np.float32)})
    with pytest.raises(GraphError, match=message) as refused:
        import_model(buffer.getvalue())
    assert refused.value.node is not None


def test_a_size_multiplied_by_itself_again_and_again_stays_small():
    """A 42-node model squaring the request's length 40 times (Shape -> Mul(d, d) -> ...) and reshaping to it
    would make the importer write a product of 2^40 sizes; past a few factors it forgets which sizes a product
    is made of (the dim is only unknown), so the model loads at once, and serves where the product is right."""
    from onnx import TensorProto, helper

    from wire.onnx import import_model

    nodes = [helper.make_node("Shape", ["x"], ["d0"])]
    nodes += [helper.make_node("Mul", [f"d{i}", f"d{i}"], [f"d{i + 1}"]) for i in range(40)]
    nodes += [helper.make_node("Reshape", ["x", "d40"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(
        helper.make_graph(nodes, "squares", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]
    )
    imported = import_model(model.SerializeToString())
    assert _forward(imported, {"x": np.array([2.5], np.float32)}).tolist() == [2.5]  # 1 ** (2 ** 40) == 1
