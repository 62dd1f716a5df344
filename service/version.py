"""The installed distribution's version (kept out of __init__ so it works however `service` is imported)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gradserve")
except PackageNotFoundError:  # pragma: no cover - a source tree that is not installed
    __version__ = "0.0.0"
