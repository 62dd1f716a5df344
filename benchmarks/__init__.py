"""gradserve's benchmark suite (issue 6): `python -m benchmarks [--quick] [--parts 1,2] [--out BENCHMARKS.md]`.

Every side of a comparison runs in its own process (`python -m benchmarks.worker <case>`), so
NumPy's BLAS threads and PyTorch's OpenMP threads never share one; within a round the sides'
processes sample in alternating short batches (A B, B A, ...: `benchmarks.alternate`) and are
compared by the medians of their samples in the round. PyTorch, JAX, HIPS autograd (the
`bench` extra), CuPy, the service and the client are all optional: a side that is missing says
so in its table ("not installed", "skipped: ...") instead of failing.
"""
