"""`torch.nn.utils.rnn`, written once for every side: `pad_sequence`, `PackedSequence` and the functions that pack,
pad and split packed sequences, each one gather (`getitem` with an integer array; after a `cat` of one padding row
for `pad_packed_sequence`) so that gradients flow through them as through any op. Batch sizes, lengths and the
permutations are plain integers read once (a remote client fetches computed lengths); the recurrent modules run
a PackedSequence in `engine.nn.sequence`."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy

from engine.nn.sides import _ns

__all__ = [
    "pad_sequence",
    "PackedSequence",
    "pack_padded_sequence",
    "pad_packed_sequence",
    "pack_sequence",
    "unpad_sequence",
    "unpack_sequence",
]


class _Fields(NamedTuple):
    data: Any
    batch_sizes: Any
    sorted_indices: Any
    unsorted_indices: Any


class PackedSequence(_Fields):
    """The rows of variable-length sequences, time step by time step (`batch_sizes[t]` rows at step t, the
    longest sequence first), with the permutation that sorted the batch and its inverse (None when sorted)."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = _tensor(sorted_indices, numpy.argsort(sorted_indices.tolist()))
        if batch_sizes is None:
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        data = self.data.to(*args, **kwargs)
        return self if data is self.data else type(self)(data, *self[1:])

    def double(self):
        return self.to(dtype=_ns(self.data).float64)

    def float(self):
        return self.to(dtype=_ns(self.data).float32)

    def half(self):
        return self.to(dtype=_ns(self.data).float16)

    def long(self):
        return self.to(dtype=_ns(self.data).int64)

    def int(self):
        return self.to(dtype=_ns(self.data).int32)

    def cpu(self, *args, **kwargs):
        return self.to("cpu", *args, **kwargs)

    def pin_memory(self):
        return self

    def is_pinned(self) -> bool:
        return False

    @property
    def is_cuda(self) -> bool:
        return self.data.is_cuda


def _tensor(like, values):
    ns = _ns(like)
    return ns.tensor([int(v) for v in values], dtype=ns.int64)


def _ints(values) -> list[int]:
    values = values.tolist() if hasattr(values, "tolist") else values
    return [int(v) for v in numpy.ravel(numpy.asarray(values))]


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0, padding_side: str = "right"):
    """torch.nn.utils.rnn.pad_sequence: tensors of shapes (L_i, *) padded with `padding_value` to the
    longest L and stacked, (L, B, *) or with `batch_first` (B, L, *); `padding_side` 'right' or 'left'."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    ns = _ns(sequences[0])
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        pad = (0, longest - s.shape[0]) if padding_side == "right" else (longest - s.shape[0], 0)
        padded.append(ns.nn.functional.pad(s, (0, 0) * (s.dim() - 1) + pad, value=padding_value))
    return ns.stack(padded, dim=0 if batch_first else 1)


def pack_padded_sequence(input, lengths, batch_first: bool = False, enforce_sorted: bool = True):
    """The PackedSequence of padded `input` ([T, B, *], or [B, T, *] with batch_first) whose sequence b has
    `lengths[b]` steps; unless `enforce_sorted`, the batch is sorted longest first (stably) and the
    permutation kept."""
    lengths = _ints(lengths)
    batch, steps = (input.shape[0], input.shape[1]) if batch_first else (input.shape[1], input.shape[0])
    order = list(range(len(lengths))) if enforce_sorted else sorted(range(len(lengths)), key=lambda b: -lengths[b])
    lengths = [lengths[b] for b in order]
    if input.numel() == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    if len(lengths) != batch:
        raise RuntimeError(
            f"Expected `len(lengths)` to be equal to batch_size, but got {len(lengths)} (batch_size={batch})"
        )
    if lengths[-1] <= 0:
        raise RuntimeError(
            "Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0"
        )
    if any(a < b for a, b in zip(lengths, lengths[1:])):
        raise RuntimeError(
            "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can pass "
            "`enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this requirement if "
            "you do not need ONNX exportability."
        )
    if lengths[0] > steps:
        raise RuntimeError(f"a length of {lengths[0]} is longer than the input's {steps} steps")
    sizes = [sum(1 for n in lengths if n > t) for t in range(lengths[0])]
    rows = [
        order[j] * steps + t if batch_first else t * batch + order[j]
        for t, size in enumerate(sizes)
        for j in range(size)
    ]
    data = input.reshape((batch * steps, *input.shape[2:]))[numpy.array(rows)]
    sorted_indices = None if enforce_sorted else _tensor(input, order)
    return PackedSequence(data, _tensor(input, sizes), sorted_indices, None)


def pad_packed_sequence(sequence, batch_first: bool = False, padding_value: float = 0.0, total_length=None):
    """(padded [T, B, *] or [B, T, *], lengths as int64): the inverse of pack_padded_sequence, the batch in its
    original order and padded with `padding_value` to the longest sequence (or `total_length`)."""
    data, sizes = sequence.data, _ints(sequence.batch_sizes)
    steps = len(sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError(
                "Expected total_length to be at least the length of the longest sequence in input, but got "
                f"total_length={total_length} and max sequence length being {steps}"
            )
        steps = total_length
    batch, ns = sizes[0], _ns(data)
    lengths = [sum(1 for size in sizes if size > j) for j in range(batch)]  # of the sorted batch
    order = list(range(batch)) if sequence.unsorted_indices is None else _ints(sequence.unsorted_indices)
    offsets = numpy.cumsum([0, *sizes])
    rows = numpy.full((batch, steps) if batch_first else (steps, batch), data.shape[0])
    for b, j in enumerate(order):
        at = offsets[: lengths[j]] + j
        if batch_first:
            rows[b, : lengths[j]] = at
        else:
            rows[: lengths[j], b] = at
    pad = ns.full((1, *data.shape[1:]), padding_value, dtype=data.dtype)
    padded = ns.cat([data, pad])[numpy.ravel(rows)].reshape((*rows.shape, *data.shape[1:]))
    return padded, _tensor(data, [lengths[j] for j in order])


def pack_sequence(sequences, enforce_sorted: bool = True):
    """The PackedSequence of a list of [L_i, *] tensors (longest first unless not `enforce_sorted`)."""
    return pack_padded_sequence(pad_sequence(sequences), [s.shape[0] for s in sequences], enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first: bool = False) -> list:
    """The [lengths[b], *] sequences of a padded batch (PyTorch transposes a time-major input in place first;
    here the input is left as it is)."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [padded_sequences[b, :n] for b, n in enumerate(_ints(lengths))]


def unpack_sequence(packed_sequences) -> list:
    """The sequences of a PackedSequence, in their original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
