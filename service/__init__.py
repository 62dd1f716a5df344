"""gradserve's HTTP service: a thin FastAPI face over `wire.executor.Executor`.

Imports flow one way, service -> engine. `create_app()` (service.app) builds the ASGI app;
`gradserve serve` (service.cli) runs it under uvicorn.
"""

from service.version import __version__  # noqa: F401
