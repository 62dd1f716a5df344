"""`torch.utils.data` written once for every Variable class: datasets, samplers, `random_split`, the
default collate and `DataLoader` (in process: `num_workers` is accepted and the batches are made in the
calling thread). `bind(namespace)` makes one side's names: its `DataLoader` and `default_collate` make that
side's Variables (`engine.utils.data`, `client.utils.data`); the rest computes indices only."""

from __future__ import annotations

import bisect
import collections.abc
import functools
import math
import numbers
from typing import Any

import numpy

from engine.user_warnings import warn


def _permutation(ns, n: int, generator) -> list[int]:
    """0..n-1 shuffled by `ns.randperm` (the side's default generator where `generator` is None)."""
    return ns.randperm(n, generator=generator).tolist()  # type: ignore[no-any-return]


class Dataset:
    """A map-style dataset: `__getitem__(index)`, and usually `__len__`."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is an iterable of samples (`__iter__`)."""

    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")


class TensorDataset(Dataset):
    """Samples are the tensors' rows: `dataset[i] == tuple(t[i] for t in tensors)`."""

    def __init__(self, *tensors):
        if any(tensors[0].shape[0] != t.shape[0] for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, index):
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        self.cumulative_sizes = list(numpy.cumsum([len(d) for d in self.datasets]).tolist())

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, index):
        if index < 0:
            if -index > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        return self.datasets[which][index - (self.cumulative_sizes[which - 1] if which else 0)]


def random_split(ns, dataset, lengths, generator=None):
    """`dataset` split into non-overlapping Subsets of `lengths` (counts, or fractions summing to 1: PyTorch's
    rounding, the remainder handed out one by one)."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = [int(math.floor(n * frac)) for frac in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        for i, count in enumerate(counts):
            if count == 0:
                warn(f"Length of split at index {i} is 0. This might result in an empty dataset.")
        lengths = counts
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order, offset, subsets = _permutation(ns, n, generator), 0, []
    for length in lengths:
        subsets.append(Subset(dataset, order[offset : offset + length]))
        offset += length
    return subsets


class Sampler:
    def __init__(self, data_source=None):
        pass


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    _ns: Any = None

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None, generator=None):
        self.data_source, self.replacement, self._num_samples, self.generator = (
            data_source,
            replacement,
            num_samples,
            generator,
        )
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={self.num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        if self.replacement:
            yield from self._ns.randint(0, n, (self.num_samples,), generator=self.generator).tolist()
            return
        for _ in range(self.num_samples // n):
            yield from _permutation(self._ns, n, self.generator)
        yield from _permutation(self._ns, n, self.generator)[: self.num_samples % n]

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    _ns: Any = None

    def __init__(self, indices, generator=None):
        self.indices, self.generator = indices, generator

    def __iter__(self):
        return (self.indices[i] for i in _permutation(self._ns, len(self.indices), self.generator))

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """`num_samples` indices drawn with probabilities proportional to `weights` (by the side's `multinomial`)."""

    _ns: Any = None

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None):
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        self.weights = self._ns.as_tensor(weights, dtype=self._ns.float64)
        if self.weights.ndim != 1:
            raise ValueError(
                f"weights should be a 1d sequence but given weights have shape {tuple(self.weights.shape)}"
            )
        self.num_samples, self.replacement, self.generator = num_samples, replacement, generator

    def __iter__(self):
        yield from self._ns.multinomial(
            self.weights, self.num_samples, self.replacement, generator=self.generator
        ).tolist()

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        whole, rest = divmod(len(self.sampler), self.batch_size)
        return whole + (1 if rest and not self.drop_last else 0)


def collate(ns, batch):
    """PyTorch's default_collate on `ns`'s Variables: tensors and arrays stacked, numbers made a tensor,
    mappings, named tuples and sequences collated field by field; strings kept as a list."""
    elem = batch[0]
    if ns.is_tensor(elem):
        return ns.stack(list(batch), 0)
    if isinstance(elem, numpy.ndarray) or isinstance(elem, numpy.generic):
        return ns.stack([ns.as_tensor(numpy.asarray(b)) for b in batch], 0)
    if isinstance(elem, bool) or not isinstance(elem, numbers.Number):
        if isinstance(elem, (str, bytes)):
            return list(batch)
        if isinstance(elem, collections.abc.Mapping):
            return {key: collate(ns, [d[key] for d in batch]) for key in elem}
        if isinstance(elem, tuple) and hasattr(elem, "_fields"):
            return type(elem)(*(collate(ns, list(s)) for s in zip(*batch)))
        if isinstance(elem, collections.abc.Sequence):
            if any(len(b) != len(elem) for b in batch):
                raise RuntimeError("each element in list of batch should be of equal size")
            return [collate(ns, list(s)) for s in zip(*batch)]
        if not isinstance(elem, bool):
            raise TypeError(
                "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                f"found {type(elem)}"
            )
    dtype = ns.float64 if isinstance(elem, float) else ns.bool if isinstance(elem, bool) else ns.int64
    return ns.tensor(list(batch), dtype=dtype)


class DataLoader:
    """Batches of a dataset: `batch_size` samples by a sampler (`shuffle`: a RandomSampler with `generator`),
    collated by `collate_fn` (the side's default_collate); `batch_size=None` yields samples one by one."""

    _ns: Any = None
    _sides: dict = {}

    def __init__(
        self,
        dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler=None,
        batch_sampler=None,
        num_workers: int = 0,
        collate_fn=None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn=None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor=None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
        iterable = isinstance(dataset, IterableDataset)
        if iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle, sampler or batch_sampler")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise ValueError(
                "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"
            )
        if sampler is None and not iterable:
            sampler = (
                self._sides["RandomSampler"](dataset, generator=generator) if shuffle else SequentialSampler(dataset)
            )
        if batch_sampler is None and batch_size is not None and not iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset, self.batch_size, self.drop_last, self.generator = dataset, batch_size, drop_last, generator
        self.sampler, self.batch_sampler, self.num_workers = sampler, batch_sampler, num_workers
        self.collate_fn = collate_fn or (
            functools.partial(collate, self._ns) if batch_size is not None or batch_sampler is not None else _convert
        )

    def __iter__(self):
        if isinstance(self.dataset, IterableDataset):
            samples = iter(self.dataset)
            if self.batch_size is None:
                yield from (self.collate_fn(s) for s in samples)
                return
            while batch := [s for _, s in zip(range(self.batch_size), samples)]:
                if len(batch) < self.batch_size and self.drop_last:
                    return
                yield self.collate_fn(batch)
            return
        if self.batch_sampler is None:
            yield from (self.collate_fn(self.dataset[i]) for i in self.sampler)
            return
        for indices in self.batch_sampler:
            yield self.collate_fn([self.dataset[i] for i in indices])

    def __len__(self):
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)


def get_worker_info():
    """None: a DataLoader's batches are made in the calling process (as PyTorch's with `num_workers=0`)."""
    return None


def _convert(sample):
    return sample


NAMES = ("Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "Sampler", "SequentialSampler")
SIDED = ("RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler", "DataLoader")


def bind(namespace, module_name: str) -> dict:
    """One side's `torch.utils.data`: its samplers draw from `namespace`'s generators, its DataLoader and
    default_collate make `namespace`'s Variables."""
    names = {name: globals()[name] for name in NAMES}
    for name in SIDED:
        names[name] = type(name, (globals()[name],), {"_ns": namespace, "_sides": names, "__module__": module_name})
    names["random_split"], names["get_worker_info"] = functools.partial(random_split, namespace), get_worker_info
    names["default_collate"] = functools.partial(collate, namespace)
    return names
