"""What an op costs, from shapes alone: the elements it allocates and its work.

Work is counted in flop-equivalents: a matrix product's multiply-adds are BLAS flops, and one
element of an elementwise pass, a reduction or a copy counts `ELEMENT_OP` flops (NumPy touches
memory once per element per pass, which is much slower than a BLAS flop; measured on the CI
machine: ~4e7-8e7 elements/s against ~2e10 flop/s). Each op's declaration in the registry names
a work rule only when the default (one pass over its largest operand) does not fit.
"""

from __future__ import annotations

import math

ELEMENT_OP = 64


def numel(shape) -> int:
    return math.prod(shape)


def one_pass(in_shapes, out_shape, attrs) -> int:
    """The default: one pass over the largest of the inputs and the output."""
    return ELEMENT_OP * max([numel(out_shape), *map(numel, in_shapes)])


def matrix_product(in_shapes, out_shape, attrs) -> int:
    """2*m*k*n flops per product (batched: times the batch), plus a pass over the operands."""
    a = in_shapes[0]
    k = a[-1] if a else 1
    return 2 * numel(out_shape) * k + one_pass(in_shapes, out_shape, attrs)
