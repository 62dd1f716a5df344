"""torch.nn.utils.rnn's packed sequences (PackedSequence, pack_padded_sequence, pad_packed_sequence, pack_sequence,
unpack_sequence, unpad_sequence) and nn.RNN/LSTM/GRU run on a PackedSequence, through the engine, the embedded
client and a live server (`torch_like`), against torch in float64: values and gradients of the inputs, initial
states and parameters (unsorted lengths with ties, two layers, bidirectional, batch_first), torch's errors,
gradcheck (finite differences) through a packed GRU, and the chatbot tutorial's model (a packed encoder, an
attention decoder) trained with torch's losses."""

from __future__ import annotations

import numpy as np
import pytest

from tests.client.test_client_nn_sequence import _raises_like, printed

torch = pytest.importorskip("torch")

CLOSE = dict(rtol=1e-9, atol=1e-12)
LENGTHS = [2, 5, 1, 5]


def _values(v):
    return np.asarray(v.detach().numpy())


def _round_trip(m, batch_first, enforce_sorted, lengths, **padding):
    rng = np.random.default_rng(0)
    x = m.tensor(rng.standard_normal((4, 6, 2) if batch_first else (6, 4, 2)), requires_grad=True)
    rnn = m.nn.utils.rnn
    packed = rnn.pack_padded_sequence(x, lengths, batch_first=batch_first, enforce_sorted=enforce_sorted)
    padded, got_lengths = rnn.pad_packed_sequence(packed, batch_first=not batch_first, **padding)
    (padded * m.tensor(rng.standard_normal(tuple(padded.shape)))).sum().backward()
    indices = [None if t is None else t.tolist() for t in packed[1:]]
    return [_values(packed.data), _values(padded), _values(x.grad)], indices, got_lengths.tolist(), got_lengths.dtype


@pytest.mark.parametrize(
    "batch_first, enforce_sorted, lengths, padding",
    [
        (False, False, LENGTHS, {}),
        (True, False, [3, 1, 6, 3], {"padding_value": -2.5, "total_length": 8}),
        (False, True, [6, 4, 4, 1], {"total_length": 6}),
        (True, True, [5, 3, 2, 2], {}),
    ],
)
def test_pack_and_pad_are_torchs_with_gradients(torch_like, batch_first, enforce_sorted, lengths, padding):
    got = _round_trip(torch_like, batch_first, enforce_sorted, torch_like.tensor(lengths), **padding)
    want = _round_trip(torch, batch_first, enforce_sorted, torch.tensor(lengths), **padding)
    for g, w in zip(got[0], want[0], strict=True):
        np.testing.assert_allclose(g, w, **CLOSE)
    assert got[1:3] == want[1:3]
    assert got[3] == torch_like.int64


def test_pack_sequence_unpack_and_unpad_are_torchs(torch_like):
    results = []
    for m in (torch_like, torch):
        rnn = m.nn.utils.rnn
        sequences = [m.tensor(np.arange(n * 2.0).reshape(n, 2) + n, requires_grad=True) for n in (2, 4, 1)]
        packed = rnn.pack_sequence(sequences, enforce_sorted=False)
        assert isinstance(packed, rnn.PackedSequence) and isinstance(packed, tuple)
        unpacked = rnn.unpack_sequence(packed)
        padded = rnn.pad_sequence(sequences, batch_first=False)
        unpadded = rnn.unpad_sequence(padded.clone(), m.tensor([2, 4, 1]))
        sum((s * (k + 1)).sum() for k, s in enumerate(unpacked + unpadded)).backward()
        results.append(
            [_values(packed.data), packed.batch_sizes.tolist(), *map(_values, unpacked + unpadded)]
            + [_values(s.grad) for s in sequences]
        )
        single = rnn.pack_sequence(sequences[1:2]).to(m.float32)
        assert isinstance(single.data, m.Tensor) and single[2:] == (None, None) and single.data.dtype == m.float32
        assert packed.double() is packed and packed.float().data.dtype == m.float32
    for got, want in zip(*results, strict=True):
        np.testing.assert_allclose(got, want, **CLOSE)


def test_packing_errors_are_torchs(torch_like):
    def bad_calls(m):
        rnn, x = m.nn.utils.rnn, m.zeros(4, 3, 2)
        gru = m.nn.GRU(2, 3)
        return [
            lambda: rnn.pack_padded_sequence(x, [2, 3, 1]),
            lambda: rnn.pack_padded_sequence(x, [3, 2, 0]),
            lambda: rnn.pack_padded_sequence(x, [3, 2, 0], enforce_sorted=False),
            lambda: rnn.pack_padded_sequence(x, [3, 2]),
            lambda: rnn.pad_packed_sequence(rnn.pack_padded_sequence(x, [3, 2, 1]), total_length=2),
            lambda: rnn.pack_sequence([]),
            lambda: gru(rnn.pack_padded_sequence(x, [3, 2, 1]), m.zeros(1, 2, 3)),
            lambda: gru(rnn.pack_padded_sequence(x, [3, 2, 1]), m.zeros(2, 3)),
            lambda: gru(rnn.PackedSequence(m.zeros(6, 1, 2), m.tensor([3, 2, 1]))),
            lambda: m.nn.GRU(3, 3)(rnn.pack_padded_sequence(x, [3, 2, 1])),
        ]

    for ours, theirs in zip(bad_calls(torch_like), bad_calls(torch), strict=True):
        _raises_like(ours, theirs)


# name: (module maker, initial state shape or None, batch_first of the padded input)
MODULES = {
    "lstm_2_layers_bidirectional": (lambda nn: nn.LSTM(3, 4, num_layers=2, bidirectional=True), (4, 4, 4), False),
    "gru_2_layers_bidirectional_batch_first": (
        lambda nn: nn.GRU(3, 4, num_layers=2, bidirectional=True, batch_first=True),
        None,
        True,
    ),
    "rnn_relu_bidirectional": (lambda nn: nn.RNN(3, 4, nonlinearity="relu", bidirectional=True), (2, 4, 4), True),
    "gru": (lambda nn: nn.GRU(3, 5), (1, 4, 5), False),
}


def _packed_run(m, name, module):
    """(outputs, gradients) of MODULES[name] run on LENGTHS packed unsorted, padded back."""
    make, state_shape, batch_first = MODULES[name]
    rng = np.random.default_rng(3)
    steps, batch = max(LENGTHS) + 1, len(LENGTHS)
    x = m.tensor(rng.standard_normal((batch, steps, 3) if batch_first else (steps, batch, 3)), requires_grad=True)
    packed = m.nn.utils.rnn.pack_padded_sequence(x, LENGTHS, batch_first=batch_first, enforce_sorted=False)
    lstm = isinstance(module, m.nn.LSTM)
    hx = (
        [m.tensor(rng.standard_normal(state_shape), requires_grad=True) for _ in range(1 + lstm)] if state_shape else []
    )
    out, final = module(packed) if not hx else module(packed, tuple(hx) if lstm else hx[0])
    assert isinstance(out, m.nn.utils.rnn.PackedSequence) and out.batch_sizes.tolist() == [4, 3, 2, 2, 2]
    padded, _ = m.nn.utils.rnn.pad_packed_sequence(out, batch_first=batch_first)
    outs = [padded, *(final if lstm else [final])]
    sum((t * m.tensor(rng.standard_normal(tuple(t.shape)))).sum() for t in outs).backward()
    grads = {k: _values(p.grad) for k, p in module.named_parameters()}
    grads.update({f"input{k}": _values(v.grad) for k, v in enumerate([x, *hx])})
    return [_values(t) for t in outs], grads


@pytest.mark.parametrize("name", sorted(MODULES))
def test_recurrent_modules_run_packed_sequences_as_torch(torch_like, name):
    theirs = MODULES[name][0](torch.nn).double()
    ours = MODULES[name][0](torch_like.nn).double()
    ours.load_state_dict({k: torch_like.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    (outs, grads), (want_outs, want_grads) = _packed_run(torch_like, name, ours), _packed_run(torch, name, theirs)
    for got, want in zip(outs, want_outs, strict=True):
        np.testing.assert_allclose(got, want, **CLOSE)
    assert list(grads) == list(want_grads)
    for key in grads:
        np.testing.assert_allclose(grads[key], want_grads[key], **CLOSE, err_msg=key)


def test_packed_gru_passes_gradcheck(torch_like):
    torch_like.manual_seed(0)
    gru = torch_like.nn.GRU(2, 3, num_layers=2, bidirectional=True).double()
    x = torch_like.randn(4, 3, 2, dtype=torch_like.float64, requires_grad=True)
    h0 = torch_like.randn(4, 3, 3, dtype=torch_like.float64, requires_grad=True)
    rnn = torch_like.nn.utils.rnn

    def fn(x, h0):
        out, h = gru(rnn.pack_padded_sequence(x, [2, 4, 1], enforce_sorted=False), h0)
        padded, _ = rnn.pad_packed_sequence(out, padding_value=0.5)
        return (padded * padded).sum() + (h * h.sin()).sum()

    assert torch_like.autograd.gradcheck(fn, (x, h0))


def chatbot_program(torch):
    """The chatbot tutorial's model: EncoderRNN (embedding, pack_padded_sequence, bidirectional GRU,
    pad_packed_sequence, the directions summed) and the Luong-attention decoder fed its hidden state, trained
    with maskNLLLoss, clip_grad_norm_ and two Adams for 3 steps, printing the loss."""
    rng = np.random.default_rng(0)
    nn, F = torch.nn, torch.nn.functional

    class EncoderRNN(nn.Module):
        def __init__(self, hidden_size, embedding, n_layers=2):
            super().__init__()
            self.hidden_size, self.embedding = hidden_size, embedding
            self.gru = nn.GRU(hidden_size, hidden_size, n_layers, bidirectional=True)

        def forward(self, input_seq, input_lengths, hidden=None):
            embedded = self.embedding(input_seq)
            packed = nn.utils.rnn.pack_padded_sequence(embedded, input_lengths.cpu())
            outputs, hidden = self.gru(packed, hidden)
            outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs)
            return outputs[:, :, : self.hidden_size] + outputs[:, :, self.hidden_size :], hidden

    class LuongAttnDecoderRNN(nn.Module):
        def __init__(self, embedding, hidden_size, output_size, n_layers=2):
            super().__init__()
            self.embedding, self.gru = embedding, nn.GRU(hidden_size, hidden_size, n_layers)
            self.concat, self.out = nn.Linear(hidden_size * 2, hidden_size), nn.Linear(hidden_size, output_size)
            self.attn = nn.Linear(hidden_size, hidden_size)  # the "general" score

        def forward(self, input_step, last_hidden, encoder_outputs):
            rnn_output, hidden = self.gru(self.embedding(input_step), last_hidden)
            energies = torch.sum(rnn_output * self.attn(encoder_outputs), dim=2).t()
            context = F.softmax(energies, dim=1).unsqueeze(1).bmm(encoder_outputs.transpose(0, 1))
            concat_output = torch.tanh(self.concat(torch.cat((rnn_output.squeeze(0), context.squeeze(1)), 1)))
            return F.softmax(self.out(concat_output), dim=1), hidden

    def mask_nll_loss(inp, target, mask):
        return -torch.log(torch.gather(inp, 1, target.view(-1, 1)).squeeze(1)).masked_select(mask).mean()

    embedding = nn.Embedding(10, 6)
    encoder, decoder = EncoderRNN(6, embedding), LuongAttnDecoderRNN(embedding, 6, 10)
    for module in (encoder, decoder):
        module.double().load_state_dict(
            {k: torch.tensor(rng.uniform(-0.5, 0.5, tuple(v.shape))) for k, v in module.state_dict().items()}
        )
    lengths = torch.tensor([5, 3, 2])
    inputs = torch.LongTensor(rng.integers(1, 10, (5, 3)).tolist()) * (torch.arange(5)[:, None] < lengths)
    target = torch.LongTensor(rng.integers(1, 10, (4, 3)).tolist())
    mask = torch.BoolTensor((rng.random((4, 3)) < 0.8).tolist())
    optimizers = [torch.optim.Adam(encoder.parameters(), lr=0.01), torch.optim.Adam(decoder.parameters(), lr=0.05)]
    for step in range(3):
        for optimizer in optimizers:
            optimizer.zero_grad()
        encoder_outputs, encoder_hidden = encoder(inputs, lengths)
        decoder_input, decoder_hidden, loss = torch.LongTensor([[1] * 3]), encoder_hidden[:2], 0
        for t in range(4):
            output, decoder_hidden = decoder(decoder_input, decoder_hidden, encoder_outputs)
            decoder_input = target[t].view(1, -1)
            loss = loss + mask_nll_loss(output, target[t], mask[t])
        loss.backward()
        for module in (encoder, decoder):
            nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        for optimizer in optimizers:
            optimizer.step()
        print(f"step {step}  loss {loss.item():.10f}  embedding grad {embedding.weight.grad.norm():.10f}")


def test_chatbot_model_trains_with_torchs_losses(torch_like):
    got = printed(chatbot_program, torch_like)
    assert got == printed(chatbot_program, torch) and got.count("loss") == 3


def test_torchs_module_path_imports_the_packing_functions(torch_like):
    import importlib

    module = importlib.import_module(f"{torch_like.__name__}.nn.utils.rnn")
    assert module.pack_padded_sequence is torch_like.nn.utils.rnn.pack_padded_sequence
    assert module.PackedSequence._fields == torch.nn.utils.rnn.PackedSequence._fields
