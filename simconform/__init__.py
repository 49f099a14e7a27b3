"""simconform: verify simulated sensor models against their declared error models."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("simconform")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
