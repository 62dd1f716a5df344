"""Op declarations. Importing this package fills the registry."""

from engine.ops import conv, elementwise, indexing, linalg, pooling, reduction, rounding, shape, special  # noqa: F401
