"""PyTorch's type promotion (`torch.result_type`), the one rule of every op with several inputs.

The categories are bool < integer < floating. `promote_types(a, b)` of two dtypes is the higher
category's dtype when the categories differ (int64 with float16 is float16), NumPy's otherwise (uint8
with int8 is int16). An op's operands count by priority: dimensioned tensors, then 0-d tensors, then
Python numbers (bool, int64, or the default dtype for a float); a lower priority's dtype counts only
when its category is higher (`int_tensor * float64_0d` is float64, `float32_tensor * float64_0d` is
float32, `int_tensor * 2.5` is the default dtype, `uint8_tensor + 300` stays uint8).

The ops take their operands' arrays cast to the result type before NumPy computes (`engine.registry`'s
`operands`, called by `engine.node.apply_op` only when the arrays' dtypes differ), so values are
PyTorch's: int64 with float32 is added in float32. A Python number is made an array of the result type by `coerce`, so the
rule over the arrays then gives the same dtype, on the engine, the client and a server alike.
"""

from __future__ import annotations

import numpy

from engine import dtypes as _dtypes

CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}
NUMBERS = frozenset((bool, int, float, numpy.float64))  # Python numbers by type (a numpy.float64 counts)
INT64 = numpy.dtype(numpy.int64)
BOOL = numpy.dtype(bool)
_PROMOTED: dict = {}
# PyTorch's names of the dtypes in its errors ("result type Float can't be cast to the desired output type Long")
TYPE_NAMES = dict(
    zip(
        "bool uint8 int8 int16 int32 int64 float16 float32 float64".split(),
        "Bool Byte Char Short Int Long Half Float Double".split(),
    )
)
# and its C++ names in others ("expected m1 and m2 to have the same dtype, but got: float != double")
C_NAMES = dict(zip(TYPE_NAMES, ("bool", "unsigned char", "signed char", "short int", "int", "long int", "c10::Half")))
C_NAMES.update(float32="float", float64="double")
BOOL_NEGATION = (
    "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, use the `~` or "
    "`logical_not()` operator instead."
)
BOOL_SUBTRACTION = (
    "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a mask, use "
    "the `~` or `logical_not()` operator instead.",
    "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` operator "
    "instead.",
)


def promote_types(a, b) -> numpy.dtype:
    """PyTorch's `promote_types` of two NumPy dtypes (see the module docstring)."""
    key = (a, b)
    found = _PROMOTED.get(key)
    if found is None:
        a, b = numpy.dtype(a), numpy.dtype(b)
        ka, kb = CATEGORY[a.kind], CATEGORY[b.kind]
        found = (a if ka > kb else b) if ka != kb and ka < 3 and kb < 3 else numpy.promote_types(a, b)
        _PROMOTED[key] = found
    return found


def _combine(higher, lower):
    """PyTorch's `combine_categories`: a lower priority's dtype counts when its category is higher."""
    if higher is None:
        return lower
    if lower is None or higher.kind in "fc":
        return higher
    if higher.kind == "b" or lower.kind in "fc":
        return promote_types(higher, lower)
    return higher


def number_dtype(value) -> numpy.dtype:
    """A Python number's dtype as an operand: bool, int64, or the default dtype for a float."""
    return BOOL if type(value) is bool else INT64 if type(value) is int else _dtypes.default()


def _join(state, dtype):
    return dtype if state is None or state is dtype else promote_types(state, dtype)


def result_type(shapes, dtypes) -> numpy.dtype:
    """The result type of operands of `shapes` and `dtypes` (a Python number in place of a dtype: one)."""
    dim = zero = number = None
    for shape, d in zip(shapes, dtypes):
        if type(d) in NUMBERS:
            number = _join(number, number_dtype(d))
            continue
        d = d if isinstance(d, numpy.dtype) else numpy.dtype(d)  # (a DType, a scalar type)
        if len(shape):
            dim = _join(dim, d)
        else:
            zero = _join(zero, d)
    return _combine(dim, _combine(zero, number))


def of_operands(operands) -> numpy.dtype | None:
    """The result type of arrays (or the client's Values) and Python numbers (None when there are only numbers)."""
    dim = zero = None
    rank = -1  # the numbers' highest category (their promotion: its dtype)
    for v in operands:
        kind = type(v)
        if kind in NUMBERS:
            category = 0 if kind is bool else 1 if kind is int else 2
            if category > rank:
                rank = category
        elif v.shape:
            d = v.dtype
            dim = d if dim is None or dim is d else promote_types(dim, d)
        else:
            d = v.dtype
            zero = d if zero is None or zero is d else promote_types(zero, d)
    if rank < 0 or dim is not None and dim.kind == "f":  # (a floating dimensioned result: the others don't count)
        return _combine(dim, zero)
    if dim is None and zero is None:
        return None
    return _combine(dim, _combine(zero, (BOOL, INT64, _dtypes.default())[rank]))


def number_array(value, dtype):
    """A Python number as a 0-d array of `dtype` (an integer out of its range wraps, as PyTorch's does)."""
    try:
        return numpy.asarray(value, dtype)
    except OverflowError:
        return numpy.asarray(value).astype(dtype)


def promoted(arrays) -> tuple:
    """`arrays` cast to their result type, in an op's forward (where, cat): a recording's replay casts them too."""
    first = arrays[0].dtype
    for a in arrays:
        if a.dtype is not first:
            dtype = result_type([a.shape for a in arrays], [a.dtype for a in arrays])
            return tuple([a if a.dtype == dtype else a.astype(dtype) for a in arrays])
    return arrays


def can_cast(from_, to) -> bool:
    """PyTorch's `can_cast`: not to a lower category (floating to integer or bool, integer to bool)."""
    return CATEGORY[numpy.dtype(from_).kind] <= CATEGORY[numpy.dtype(to).kind]


def type_name(dtype) -> str:
    """PyTorch's name of `dtype` in its errors (`Float`, `Long`)."""
    return TYPE_NAMES.get(numpy.dtype(dtype).name, str(dtype))


def c_name(dtype) -> str:
    """PyTorch's C++ name of `dtype` in its errors (`float`, `long int`)."""
    return C_NAMES.get(numpy.dtype(dtype).name, str(dtype))


def check_subtraction(dtypes) -> None:
    """PyTorch's refusal of a subtraction with a bool tensor (a Python bool counts as one)."""
    bools = sum(numpy.result_type(d) == BOOL for d in dtypes)
    if bools:
        raise RuntimeError(BOOL_SUBTRACTION[bools == len(dtypes)])


def check_product(ndims, dtypes) -> None:
    """PyTorch's refusal of a matrix product (mm, matmul, bmm) of two dtypes: its message by the inputs' dimensions
    (the kernel matmul reaches: dot, addmv, mm, or a batched one)."""
    a, b = dtypes
    if a == b:
        return
    if ndims[1] == 1 and ndims[0] == 1:
        raise RuntimeError(
            f"dot : expected both vectors to have same dtype, but found {type_name(a)} and {type_name(b)}"
        )
    if ndims[1] == 1:
        a, b = type_name(a), type_name(b)
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {b}, {a}, and {b}")
    if ndims[1] == 2:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {c_name(a)} != {c_name(b)}")
    raise RuntimeError(f"expected scalar type {type_name(a)} but found {type_name(b)}")


def check_addmm(input, mat1, mat2) -> None:
    """PyTorch's refusal of `addmm(input, mat1, mat2)` (`linear` with a bias) of two dtypes."""
    for name, dtype in (("self", input), ("mat1", mat1)):
        if dtype != mat2:
            raise RuntimeError(
                f"{name} and mat2 must have the same dtype, but got {type_name(dtype)} and {type_name(mat2)}"
            )


def product_operands(arrays) -> tuple:
    """A matrix product's `promote` (`engine.registry.PROMOTES`): only called when the dtypes differ, it refuses."""
    check_product([a.ndim for a in arrays], [a.dtype for a in arrays])
    return arrays
