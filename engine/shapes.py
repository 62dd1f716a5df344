"""Shape and dtype rules for ops, so a graph can be checked before anything is computed.

Each rule maps (input shapes, input dtypes, attrs) to (output shape, output dtype) or raises
ShapeError with a message that names the shapes involved.
"""

from __future__ import annotations

import math

import numpy

from engine import promotion
from engine.dtypes import default as default_dtype
from engine.dtypes import scalar_name

MAX_DIMS = 64  # NumPy's limit on the number of dimensions


class ShapeError(ValueError):
    pass


def _shapes(shapes):
    return " and ".join(str(list(s)) for s in shapes)


def broadcast(shapes, dtypes, attrs):
    try:
        shape = numpy.broadcast_shapes(*shapes)
    except ValueError:
        raise ShapeError(_mismatch(*shapes) or f"shapes {_shapes(shapes)} cannot be broadcast together") from None
    return tuple(shape), promotion.result_type(shapes, dtypes)


def _mismatch(a, *more) -> str:
    """PyTorch's words for shapes that do not broadcast (folded left to right): the first sizes that differ."""
    for b in more:
        for d in range(1, min(len(a), len(b)) + 1):
            if a[-d] != b[-d] and 1 not in (a[-d], b[-d]):
                return f"The size of tensor a ({a[-d]}) must match the size of tensor b ({b[-d]}) at non-singleton dimension {max(len(a), len(b)) - d}"
        a = numpy.broadcast_shapes(a, b)
    return ""


def subtract(shapes, dtypes, attrs):
    """`broadcast`, refusing a bool operand (PyTorch's subtraction)."""
    promotion.check_subtraction(dtypes)
    return broadcast(shapes, dtypes, attrs)


def where_rule(shapes, dtypes, attrs):
    if numpy.dtype(dtypes[0]).kind != "b" and numpy.dtype(dtypes[0]) != numpy.uint8:  # PyTorch's refusal
        raise DtypeError(
            f"where expected condition to be a boolean tensor, but got a tensor with dtype {scalar_name(dtypes[0])}"
        )
    shape, _ = broadcast(shapes, dtypes, attrs)
    return shape, promotion.result_type(shapes[1:], dtypes[1:])


def compare(shapes, dtypes, attrs):
    return broadcast(shapes, dtypes, attrs)[0], numpy.dtype(bool)


def bitwise(shapes, dtypes, attrs):
    """Bool or integer inputs only (PyTorch's bitwise ops are not implemented for floats)."""
    for dtype in map(numpy.result_type, dtypes):  # (a Python number stands for its own dtype)
        if dtype.kind not in "biu":
            raise ShapeError(f"bitwise ops take bool or integer inputs, not {dtype.name}")
    if len(shapes) == 1:
        return tuple(shapes[0]), numpy.result_type(dtypes[0])
    return broadcast(shapes, dtypes, attrs)


def same(shapes, dtypes, attrs):
    return tuple(shapes[0]), numpy.result_type(dtypes[0])


def floating(shapes, dtypes, attrs):
    """The input's shape; its dtype when floating, else the default dtype (`sqrt` of integers), as PyTorch's."""
    dtype = numpy.result_type(dtypes[0])
    return tuple(shapes[0]), dtype if dtype.kind in "fc" else default_dtype()


def floating_broadcast(shapes, dtypes, attrs):
    """Broadcast shapes; the inputs' result type when floating, else the default dtype (true division and
    atan2 of integers)."""
    shape, dtype = broadcast(shapes, dtypes, attrs)
    return shape, dtype if dtype.kind in "fc" else default_dtype()


def square(name: str):
    """The rule of a batch of square matrices, kept (inv, cholesky); floating; refusals worded as torch's `name`."""

    def rule(shapes, dtypes, attrs):
        shape, dtype = tuple(shapes[0]), numpy.result_type(dtypes[0])
        if len(shape) < 2:
            raise ShapeError(f"{name}: The input tensor A must have at least 2 dimensions.")
        if shape[-1] != shape[-2]:
            raise ShapeError(
                f"{name}: A must be batches of square matrices, but they are {shape[-2]} by {shape[-1]} matrices"
            )
        if dtype.kind not in "fc":
            raise DtypeError(f"{name}: Expected a floating point or complex tensor as input. Got {scalar_name(dtype)}")
        if dtype not in (numpy.float32, numpy.float64):
            raise ShapeError(f"linalg ops take float32 or float64 matrices, not {dtype.name}")
        return shape, dtype

    return rule


def square_to_batch(name: str):
    """A batch of square matrices to one number each (det, logabsdet)."""

    def rule(shapes, dtypes, attrs):
        shape, dtype = square(name)(shapes, dtypes, attrs)
        return shape[:-2], dtype

    return rule


def _matrices(op, shapes, dtypes) -> tuple:
    """A batch of float32 or float64 matrices (any shape): (batch shape, rows, columns, dtype)."""
    shape, dtype = tuple(shapes[0]), numpy.result_type(dtypes[0])
    if len(shape) < 2:
        raise ShapeError(f"linalg.{op}: The input tensor A must have at least 2 dimensions.")
    if dtype not in (numpy.float32, numpy.float64):
        raise ShapeError(f"linalg ops take float32 or float64 matrices, not {dtype.name}")
    return (*shape[:-2],), shape[-2], shape[-1], dtype


def eigh_packed(shapes, dtypes, attrs):
    """Square matrices to their eigenvalues (a first row) over their eigenvectors (columns): [..., n + 1, n]."""
    batch, n, columns, dtype = _matrices("eigh", shapes, dtypes)
    if n != columns:
        raise ShapeError(f"linalg.eigh: A must be batches of square matrices, but they are {n} by {columns} matrices")
    return (*batch, n + 1, n), dtype


def svd_packed(shapes, dtypes, attrs):
    """[..., m, n] to U's rows, S, then V's rows (V = Vh^T), in min(m, n) columns (full_matrices: max(m, n),
    U and V zero-padded): [..., m + 1 + n, c]."""
    batch, m, n, dtype = _matrices("svd", shapes, dtypes)
    return (*batch, m + 1 + n, max(m, n) if attrs["full_matrices"] else min(m, n)), dtype


def qr_packed(shapes, dtypes, attrs):
    """[..., m, n] to Q's columns, then R's (zero-padded to m rows): [..., m, c + n], c = m if complete else
    min(m, n)."""
    batch, m, n, dtype = _matrices("qr", shapes, dtypes)
    return (*batch, m, (m if attrs["complete"] else min(m, n)) + n), dtype


def pinv(shapes, dtypes, attrs):
    """[..., m, n] to [..., n, m]."""
    batch, m, n, dtype = _matrices("pinv", shapes, dtypes)
    return (*batch, n, m), dtype


def _signal(op, shape, dtype, attrs) -> tuple:
    """A real transform's signal sizes: `shape` with each of dim's sizes replaced by s's (checked)."""
    dims, sizes = normalize_dims(attrs["dim"], len(shape)), attrs["s"]
    if not dims or len(sizes) != len(dims) or not shape:
        raise ShapeError(f"{op}: s {list(sizes)} and dim {list(attrs['dim'])} must name the same 1 or more dimensions")
    if any(n < 1 for n in sizes):
        raise ShapeError(f"{op}: Invalid number of data points ({min(sizes)}) specified")
    if numpy.dtype(dtype) not in (numpy.float32, numpy.float64):
        raise ShapeError(f"{op}: takes float32 or float64, not {numpy.dtype(dtype).name}")
    out = list(shape)
    for d, n in zip(dims, sizes):
        out[d] = n
    return out, dims[-1]


def spectral_r2c(shapes, dtypes, attrs):
    """A real signal to its half spectrum's [..., 2] real and imaginary parts (fft_r2c)."""
    out, last = _signal("fft_r2c", tuple(shapes[0]), dtypes[0], attrs)
    out[last] = out[last] // 2 + 1
    return (*out, 2), numpy.dtype(dtypes[0])


def spectral_c2r(shapes, dtypes, attrs):
    """A half spectrum's [..., 2] real and imaginary parts to its real signal (fft_c2r)."""
    if not shapes[0] or shapes[0][-1] != 2:
        raise ShapeError(f"fft_c2r: expected real and imaginary parts on a last dimension of 2, got {list(shapes[0])}")
    return tuple(_signal("fft_c2r", tuple(shapes[0][:-1]), dtypes[0], attrs)[0]), numpy.dtype(dtypes[0])


def normalize_dims(dim, ndim):
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    out = []
    for d in dims:
        if not -max(ndim, 1) <= d < max(ndim, 1):
            raise DimensionError(
                f"Dimension out of range (expected to be in range of [{-max(ndim, 1)}, {max(ndim, 1) - 1}], but got {d})"
            )
        out.append(d % max(ndim, 1))
    for d in [d for i, d in enumerate(out) if d in out[:i]][:1]:
        raise ShapeError(f"dim {d} appears multiple times in the list of dims")
    return tuple(out)


def reduced_shape(shape, dim, keepdim):
    if dim is None or dim == ():  # an empty dim list reduces everything, as in PyTorch
        axes = tuple(range(len(shape)))
    else:
        axes = normalize_dims(dim, len(shape))
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def reduce(shapes, dtypes, attrs):
    dtype = numpy.result_type(dtypes[0])
    if dtype.kind in "biu":
        dtype = numpy.dtype(numpy.int64)
    return reduced_shape(shapes[0], attrs.get("dim"), attrs.get("keepdim", False)), dtype


def reduce_float(shapes, dtypes, attrs):
    shape, _ = reduce(shapes, dtypes, attrs)
    return shape, floating(shapes, dtypes, attrs)[1]


MEAN_OF_INTEGERS = (
    "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: {}"
)


class DtypeError(ShapeError, RuntimeError):
    """An input dtype an op refuses: PyTorch's RuntimeError, and a ShapeError, so that a graph holding it is
    refused as one with a bad shape is (a 4xx naming the node)."""


class DimensionError(ShapeError, IndexError):
    """A dimension or an index out of range: PyTorch's IndexError (and its words)."""


class KernelError(ShapeError, NotImplementedError):
    """A dtype PyTorch has no kernel of an op for: its NotImplementedError (and words)."""


def floating_kernel(kernel: str, ndim: int, dim: int, dtype) -> None:
    """Refuses a bool or integer input of softmax and log_softmax, as PyTorch's kernels name themselves."""
    if numpy.dtype(dtype).kind not in "fc":
        last = "_lastdim" if ndim < 2 or dim % ndim == ndim - 1 else ""
        raise KernelError(f'"{kernel}{last}_kernel_impl" not implemented for {scalar_name(dtype)!r}')


def _along_floating_dim(kernel: str):
    """`along_dim`, refusing a bool or integer input as PyTorch's `kernel` does."""

    def rule(shapes, dtypes, attrs):
        floating_kernel(kernel, len(shapes[0]), attrs["dim"], dtypes[0])
        return along_dim(shapes, dtypes, attrs)

    return rule


SOFTMAX, LOG_SOFTMAX = _along_floating_dim("softmax"), _along_floating_dim("log_softmax")


class ShapeMismatch(ShapeError, RuntimeError):
    """A shape rule's refusal of an op that the engine was running: PyTorch's RuntimeError (engine.node)."""


class LinAlgError(ShapeMismatch):
    """torch.linalg.LinAlgError: a matrix is singular or not positive-definite (NumPy's words)."""


def as_raised(refusal: ShapeError) -> Exception:
    """A shape rule's refusal as a running op raises it: PyTorch's type (a RuntimeError or IndexError kept)."""
    return refusal if isinstance(refusal, (RuntimeError, IndexError)) else ShapeMismatch(str(refusal))


def reduce_mean(shapes, dtypes, attrs):
    """`reduce_float`, refusing an integer or bool input as PyTorch's mean does (a RuntimeError, its message)."""
    if numpy.dtype(dtypes[0]).kind not in "fc":
        raise DtypeError(MEAN_OF_INTEGERS.format(scalar_name(dtypes[0])))
    return reduce_float(shapes, dtypes, attrs)


def reduce_norm(shapes, dtypes, attrs):
    """`reduce_float`, refusing an integer or bool input as PyTorch's norm (linalg.vector_norm) does."""
    if numpy.dtype(dtypes[0]).kind not in "fc":
        what = "Expected a floating point or complex tensor as input"
        raise DtypeError(f"linalg.vector_norm: {what}. Got {scalar_name(dtypes[0])}")
    return reduce_float(shapes, dtypes, attrs)


def reduce_same_dtype(shapes, dtypes, attrs):
    return reduce(shapes, dtypes, attrs)[0], numpy.result_type(dtypes[0])


def arg_reduce(shapes, dtypes, attrs):
    dim = attrs.get("dim")
    shape = shapes[0]
    if dim is None:
        out = tuple(1 for _ in shape) if attrs.get("keepdim") else ()
    else:
        out = reduced_shape(shape, dim, attrs.get("keepdim", False))
    return out, numpy.dtype(numpy.int64)


def along_dim(shapes, dtypes, attrs):
    normalize_dims(attrs["dim"], len(shapes[0]))
    return floating(shapes, dtypes, attrs)


def reshape(shapes, dtypes, attrs):
    shape, target = shapes[0], list(attrs["shape"])
    size = math.prod(shape)
    if math.prod(d for d in target if d > 0) > 2**63 - 1:
        raise ShapeError(f"cannot reshape {list(shape)} to {target}: the dimensions are too large")
    if target.count(-1) > 1:
        raise ShapeError("only one dimension can be inferred")  # (PyTorch's words, as below)
    known = math.prod(d for d in target if d != -1)
    if -1 in target:
        if known == 0 or size % known:
            raise ShapeError(f"shape '{target}' is invalid for input of size {size}")
        target[target.index(-1)] = size // known
    elif known != size:
        raise ShapeError(f"shape '{target}' is invalid for input of size {size}")
    return tuple(target), dtypes[0]


def permute(shapes, dtypes, attrs):
    shape, dims = shapes[0], attrs["dims"]
    if len(dims) != len(shape):
        raise ShapeError(
            "permute(sparse_coo): number of dimensions in the tensor input does not match the length of the desired "
            f"ordering of dimensions i.e. input.dim() = {len(shape)} is not equal to len(dims) = {len(dims)}"
        )
    if len({normalize_dims(d, len(shape))[0] for d in dims}) != len(dims):
        raise ShapeError("permute(): duplicate dims are not allowed.")
    return tuple(shape[d] for d in dims), dtypes[0]


def expand(shapes, dtypes, attrs):
    shape, target = shapes[0], list(attrs["shape"])
    lead = len(target) - len(shape)
    if lead < 0:
        got = f"the number of sizes provided ({len(target)}) must be greater or equal to the number of dimensions"
        raise ShapeError(
            f"expand(torch.{scalar_name(dtypes[0])}Tensor{{{list(shape)}}}, size={target}): {got} in the tensor ({len(shape)})"
        )
    out, wrong = [], None
    for i, t in enumerate(target):
        s = shape[i - lead] if i >= lead else None
        if t == -1:
            if s is None:
                raise ShapeError(f"-1 is not allowed in a new leading dimension of expand {target}")
            t = s
        if s is not None and s != 1 and s != t:
            wrong = (t, s, i)  # (PyTorch names the last)
        out.append(t)
    if wrong:
        t, s, i = wrong
        raise ShapeError(  # PyTorch's words
            f"The expanded size of the tensor ({t}) must match the existing size ({s}) at non-singleton dimension "
            f"{i}.  Target sizes: {target}.  Tensor sizes: {list(shape)}"
        )
    return tuple(out), dtypes[0]


def sum_to(shapes, dtypes, attrs):
    shape, target = shapes[0], tuple(attrs["shape"])
    try:
        ok = tuple(numpy.broadcast_shapes(shape, target)) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise ShapeError(f"cannot sum {list(shape)} down to {list(target)}")
    return target, dtypes[0]


def _matrix(shape, name):
    if len(shape) != 2:
        raise ShapeError(f"{name} must be a matrix")


def mm(shapes, dtypes, attrs):
    a, b = shapes
    _matrix(a, "self")
    _matrix(b, "mat2")
    if a[1] != b[0]:
        raise ShapeError(f"mat1 and mat2 shapes cannot be multiplied ({a[0]}x{a[1]} and {b[0]}x{b[1]})")  # PyTorch's
    promotion.check_product((2, 2), dtypes)
    return (a[0], b[1]), numpy.result_type(*dtypes)


def matmul(shapes, dtypes, attrs):
    a, b = shapes
    if not a or not b:
        raise ShapeError(f"matmul needs inputs of at least 1 dimension, got {_shapes(shapes)}")
    a2, b2 = ((1,) + tuple(a) if len(a) == 1 else tuple(a)), (tuple(b) + (1,) if len(b) == 1 else tuple(b))
    try:
        batch = numpy.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        raise ShapeError(_mismatch(a2[:-2], b2[:-2]) or f"batch shapes {_shapes(shapes)} cannot be broadcast") from None
    if a2[-1] != b2[-2]:
        raise ShapeError(_matmul_mismatch(a, b, math.prod(batch), a[-1], math.prod(a[:-1])))
    out = tuple(batch) + ((a2[-2],) if len(a) > 1 else ()) + ((b2[-1],) if len(b) > 1 else ())
    promotion.check_product((len(a), len(b)), dtypes)
    return out, numpy.result_type(*dtypes)


# PyTorch's words for matmul inputs whose inner sizes (k) differ: those of the kernel that it folds them into.
def _matmul_mismatch(a, b, batch, k, rows) -> str:
    if len(b) > 2:
        return f"Expected size for first two dimensions of batch2 tensor to be: [{batch}, {k}] but got: [{batch}, {b[-2]}]."
    if len(b) == 2:
        return f"mat1 and mat2 shapes cannot be multiplied ({rows}x{k} and {b[0]}x{b[1]})"
    if len(a) > 1:
        return f"size mismatch, got input ({rows}), mat ({rows}x{k}), vec ({b[0]})"
    return f"inconsistent tensor size, expected tensor [{k}] and src [{b[0]}] to have the same number of elements, but got {k} and {b[0]} elements respectively"


def cat(shapes, dtypes, attrs):
    first = shapes[0]
    if not first:
        raise ShapeError("zero-dimensional tensor (at position 0) cannot be concatenated")  # (PyTorch's words)
    d = normalize_dims(attrs["dim"], len(first))[0]
    for k, s in enumerate(shapes[1:], 1):
        if len(s) != len(first):
            raise ShapeError(f"Tensors must have same number of dimensions: got {len(first)} and {len(s)}")
        for i, (x, y) in enumerate(zip(s, first)):
            if i != d and x != y:
                raise ShapeError(
                    f"Sizes of tensors must match except in dimension {d}. Expected size {y} but got size {x} for "
                    f"tensor number {k} in the list."
                )
    out = list(first)
    out[d] = sum(s[d] for s in shapes)
    return tuple(out), promotion.result_type(shapes, dtypes)


def stack(shapes, dtypes, attrs):
    first = shapes[0]
    for k, s in enumerate(shapes):
        if tuple(s) != tuple(first):
            raise ShapeError(
                f"stack expects each tensor to be equal size, but got {list(first)} at entry 0 and {list(s)} at entry {k}"
            )
    d = normalize_dims(attrs["dim"], len(first) + 1)[0]
    out = list(first)
    out.insert(d, len(shapes))
    return tuple(out), promotion.result_type(shapes, dtypes)


def cast(shapes, dtypes, attrs):
    return tuple(shapes[0]), numpy.dtype(attrs["dtype"])


class Bounded(tuple):
    """A shape whose sizes are upper bounds (a boolean mask's result: its length is known only by
    running). Rules treat it as a shape; `wire.infer` uses it for costs and limits, never as exact."""


def _slice_length(bounds, size):
    return len(range(*slice(*bounds).indices(size)))


ZERO_DIM_INDEX = (
    "invalid index of a 0-dim tensor. Use `tensor.item()` in Python or `tensor.item<T>()` in C++ to convert a 0-dim "
    "tensor to a number"
)


def index_result(shape, spec, index_shapes, index_dtypes):
    """The shape of `x[spec]` by NumPy's indexing rules, from shapes alone (nothing is allocated).

    Boolean masks contribute their element count as the length (an upper bound), and the result
    is then `Bounded`. Raises ShapeError when the spec cannot index `shape`."""
    shape = tuple(shape)

    def fail(why):
        raise DimensionError(why)

    consumed = 0
    for item in spec:
        if isinstance(item, dict) and "tensor" in item:
            consumed += max(len(index_shapes[item["tensor"]]), 0) if index_dtypes[item["tensor"]].kind == "b" else 1
        elif item is not None and item != "...":
            consumed += 1
    if consumed > len(shape):
        fail(f"too many indices for tensor of dimension {len(shape)}" if shape else ZERO_DIM_INDEX)
    if sum(1 for item in spec if item == "...") > 1:
        fail("an index can only have a single ellipsis")
    pieces, advanced, positions, bounded, dim = [], [], [], False, 0
    has_array = any(isinstance(item, dict) and "tensor" in item for item in spec)
    for item in spec:
        if item == "...":
            rest = len(shape) - consumed
            pieces.extend(shape[dim : dim + rest])
            dim += rest
        elif item is None:
            pieces.append(1)
        elif isinstance(item, int):
            size = shape[dim]
            if not -size <= item < size:
                fail(f"index {item} is out of bounds for dimension {dim} with size {size}")
            dim += 1
            if has_array:
                advanced.append(())
                positions.append(len(pieces))
        elif "slice" in item:
            pieces.append(_slice_length(item["slice"], shape[dim]))
            dim += 1
        else:
            k = item["tensor"]
            ishape, idtype = tuple(index_shapes[k]), index_dtypes[k]
            if idtype.kind == "b":
                covered = shape[dim : dim + len(ishape)]
                for j in [j for j, (a, b) in enumerate(zip(ishape, covered)) if a != b][:1]:
                    where = f"{j} does not match the shape of the indexed tensor {list(shape)} at index {dim + j}"
                    fail(f"The shape of the mask {list(ishape)} at index {where}")
                dim += len(ishape)
                advanced.append((math.prod(ishape),))
                bounded = True
            elif idtype.kind in "iu":
                dim += 1
                advanced.append(ishape)
            else:
                fail(f"index arrays must be integer or boolean, got {idtype.name}")
            positions.append(len(pieces))
    pieces.extend(shape[dim:])
    if advanced:
        try:
            broadcast_shape = tuple(numpy.broadcast_shapes(*advanced))
        except ValueError:
            if not bounded:
                fail(f"index arrays of shapes {_shapes(advanced)} cannot be broadcast together")
            broadcast_shape = (max(math.prod(a) for a in advanced),)
        adjacent = _adjacent_advanced(spec, index_dtypes, has_array)
        at = positions[0] if adjacent else 0
        pieces[at:at] = broadcast_shape
    if len(pieces) > MAX_DIMS:
        fail(f"the result would have {len(pieces)} dimensions, over NumPy's {MAX_DIMS}")
    return (Bounded if bounded else tuple)(pieces)


def _adjacent_advanced(spec, index_dtypes, has_array):
    """Whether the advanced indices (arrays, and ints beside them) stand next to each other: then
    NumPy puts their broadcast dimensions in their place, otherwise first."""
    marks = [isinstance(item, dict) and "tensor" in item or (has_array and isinstance(item, int)) for item in spec]
    first = marks.index(True)
    last = len(marks) - 1 - marks[::-1].index(True)
    return all(marks[first : last + 1])


def proxy(shape, dtype, fill=0):
    """A zero-strided stand-in array: any shape, one element of memory."""
    return numpy.lib.stride_tricks.as_strided(numpy.full(1, fill, dtype=dtype), shape=shape, strides=(0,) * len(shape))
