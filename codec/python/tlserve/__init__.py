"""tlserve: the Python client of the tlserve wire format (codec/python)."""

from .wire import *  # noqa: F401,F403
