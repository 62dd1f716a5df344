"""`nn.AdaptiveLogSoftmaxWithLoss` (Grave et al.'s adaptive softmax), a mixin that `engine.nn.module_classes.bind`
joins to a side's `Module`: PyTorch's head and tail clusters, parameters and errors. Where PyTorch runs each cluster
on the rows whose targets fall in it, each cluster that some target falls in runs on every row here and `where`
keeps the rows it owns, so a client records the targets as data; their values are read (free when they are data)
for PyTorch's check that they are class indices and to leave out the clusters no target falls in (whose parameters
get no gradient). `predict` is the argmax of `log_prob`, which is what PyTorch's shortcuts compute."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy

from engine.nn.sequence import _Sided

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(_Sided):
    head: Any
    tail: Any

    def __init__(self, in_features, n_classes, cutoffs, div_value=4.0, head_bias=False, device=None, dtype=None):
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if (
            cutoffs != sorted(cutoffs)
            or min(cutoffs) <= 0
            or max(cutoffs) > n_classes - 1
            or len(set(cutoffs)) != len(cutoffs)
            or any(int(c) != c for c in cutoffs)
        ):
            raise ValueError(
                "cutoffs should be a sequence of unique, positive integers sorted in an increasing order, where "
                "each value is between 1 and n_classes-1"
            )
        nn, factory = self._ns.nn, {"device": device, "dtype": dtype}
        self.in_features, self.n_classes, self.cutoffs = in_features, n_classes, cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size, self.n_clusters = self.cutoffs[0], len(cutoffs)
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = nn.Linear(in_features, self.head_size, bias=head_bias, **factory)
        self.tail = nn.ModuleList()
        for i in range(self.n_clusters):
            hidden = int(in_features // (div_value ** (i + 1)))
            self.tail.append(
                nn.Sequential(
                    nn.Linear(in_features, hidden, bias=False, **factory),
                    nn.Linear(hidden, self.cutoffs[i + 1] - self.cutoffs[i], bias=False, **factory),
                )
            )

    def reset_parameters(self) -> None:
        self.head.reset_parameters()
        for projection in self.tail:
            for linear in projection:
                linear.reset_parameters()

    def forward(self, input_, target_):
        if target_.ndim == 1:
            if input_.shape[0] != target_.shape[0]:
                raise RuntimeError("Input and target should have the same size in the batch dimension.")
            if input_.ndim != 2:
                raise RuntimeError(
                    f"1D target tensor expects 2D input tensors, but found inputs with size torch.Size({list(input_.shape)})"
                )
        elif target_.ndim == 0:
            if input_.ndim != 1:
                raise RuntimeError(
                    f"0D target tensor expects 1D input tensors, but found inputs with size torch.Size({list(input_.shape)})"
                )
        else:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        batched = target_.ndim > 0
        input, target = (input_, target_) if batched else (input_.unsqueeze(0), target_.unsqueeze(0))
        values = numpy.asarray(target.tolist())
        if values.size and (values.min() < 0 or values.max() >= self.n_classes):
            raise RuntimeError(
                f"Target values should be in [0, {self.n_classes - 1}], but values in range [{values.min()}, "
                f"{values.max()}] were found. "
            )
        where = self._ns.where
        output, column = 0.0, target
        for i, (low, high) in enumerate(zip(self.cutoffs, self.cutoffs[1:])):
            if not ((values >= low) & (values < high)).any():
                continue  # (no gradient for its parameters, as in PyTorch)
            inside = (target >= low) & (target < high)
            cluster = self.tail[i](input).log_softmax(1)
            local = cluster.gather(1, where(inside, target - low, 0).unsqueeze(1)).squeeze(1)
            output = output + where(inside, local, 0.0)
            column = where(inside, self.shortlist_size + i, column)
        output = self.head(input).log_softmax(1).gather(1, column.unsqueeze(1)).squeeze(1) + output
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    def log_prob(self, input):
        """The log-probabilities of all n_classes for each row of `input`."""
        head = self.head(input).log_softmax(1)
        parts = [head[:, : self.shortlist_size]]
        for i, projection in enumerate(self.tail):
            parts.append(projection(input).log_softmax(1) + head[:, self.shortlist_size + i].unsqueeze(1))
        return self._ns.cat(parts, 1)

    def predict(self, input):
        """The most probable class of each row of `input`."""
        return self.log_prob(input).argmax(1)
