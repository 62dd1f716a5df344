"""Op declarations. Importing this package fills the registry."""

from engine.ops import (  # noqa: F401
    affine,
    checks,
    conv,
    decompositions,
    einsum,
    elementwise,
    indexing,
    linalg,
    pooling,
    reduction,
    rounding,
    scatter_reduce,
    selection,
    shape,
    special,
    spectral,
    trigonometry,
)
