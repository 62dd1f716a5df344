"""Op declarations. Importing this package fills the registry."""

from engine.ops import elementwise, indexing, linalg, reduction, rounding, shape, special  # noqa: F401
