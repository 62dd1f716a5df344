"""Op declarations. Importing this package fills the registry."""

from engine.ops import conv, elementwise, indexing, linalg, pooling, reduction, shape, special  # noqa: F401
