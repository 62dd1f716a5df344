"""ONNX models as graphs of the graph format (the optional `[onnx]` extra).

`reader.py` reads a model's bytes within bounds and refuses what gradserve will not open or run;
`ops.py` says how each ONNX op is computed with the registry's ops; `fold.py` computes at import
what is known then (shape arithmetic); `importer.py` drives them and returns the graph, the
parameters and the tensors a model publishes. `onnx` itself is imported only when a model is read.
"""

from __future__ import annotations

from wire.onnx.importer import Imported, TensorInfo, import_model
from wire.onnx.reader import OnnxLimits, onnx_module

__all__ = ["Imported", "OnnxLimits", "TensorInfo", "import_model", "onnx_module"]
