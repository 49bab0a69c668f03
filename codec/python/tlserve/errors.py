"""Every exception the tlserve client raises, and the wire format's error codes.

A wire error carries the spec's code (ErrorCode, docs/wire.md "ERROR (7)") and a one-sentence
message.  The codes fall into families that call for different handling, and each family is
a class, so a caller catches what it can act on:

    TlserveError                     anything this package raises
      WireError(code, message)       anything with a wire error code
        FramingError                 BAD_MAGIC, BAD_VERSION, FRAME_TOO_LARGE, BAD_HEADER:
                                     the byte stream is broken; the server closes the connection
        MalformedError               UNKNOWN_TYPE, TRUNCATED, TRAILING_BYTES, BAD_VARINT, BAD_NAME,
                                     NO_ITEMS, TOO_MANY_ITEMS, TOO_MANY_FEATURES,
                                     UNSORTED_FEATURES, BAD_VALUE: this request is wrong as
                                     sent; resending it will not help
        ModelNotFoundError           UNKNOWN_MODEL, UNKNOWN_VERSION: no such model or version
                                     is loaded on this server (yet)
        UnavailableError             OVERLOADED, SHUTTING_DOWN: retry later or elsewhere
        InternalError                INTERNAL: a server bug; the message says what
        ServerError                  the server answered with an ERROR frame; also carries
                                     request_id, and is an instance of the code's family too
      ConnectionClosed               the server closed the connection (also a ConnectionError)
      Timeout                        a call's deadline passed (also a TimeoutError)

The same family classes are raised when the client itself refuses to encode a bad request
(for example BAD_NAME for a model name with a space), so `except tlserve.MalformedError`
catches a bad request whichever side noticed it.  Constructing `WireError(code, message)` or
`ServerError(code, message, request_id)` gives an instance of the code's family class; codes
this package does not know stay plain WireError/ServerError with the int code kept.
"""

from __future__ import annotations

import enum
__all__ = [
    "ErrorCode", "error_name", "FRAMING_ERRORS",
    "TlserveError", "WireError", "FramingError", "MalformedError", "ModelNotFoundError",
    "UnavailableError", "InternalError", "ServerError", "ConnectionClosed", "Timeout",
]


class ErrorCode(enum.IntEnum):
    """The ERROR frame's codes (docs/wire.md "ERROR (7)")."""

    BAD_MAGIC = 1
    BAD_VERSION = 2
    FRAME_TOO_LARGE = 3
    BAD_HEADER = 4
    UNKNOWN_TYPE = 5
    TRUNCATED = 6
    TRAILING_BYTES = 7
    BAD_VARINT = 8
    BAD_NAME = 9
    UNKNOWN_MODEL = 10
    UNKNOWN_VERSION = 11
    NO_ITEMS = 12
    TOO_MANY_ITEMS = 13
    TOO_MANY_FEATURES = 14
    UNSORTED_FEATURES = 15
    BAD_VALUE = 16
    OVERLOADED = 17
    SHUTTING_DOWN = 18
    INTERNAL = 19


# Errors after which the server closes the connection (spec: "Framing errors").
FRAMING_ERRORS = frozenset({ErrorCode.BAD_MAGIC, ErrorCode.BAD_VERSION,
                            ErrorCode.FRAME_TOO_LARGE, ErrorCode.BAD_HEADER})


def error_name(code: int) -> str:
    """The code's name ("TRUNCATED"), or "UNKNOWN_ERROR_<n>" for a code not in the table."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return "UNKNOWN_ERROR_%d" % code


class TlserveError(Exception):
    """Base class of every exception this package raises."""


class WireError(TlserveError):
    """An error with a wire code: `code` (an int, ErrorCode when known), `message`, `name`.

    WireError(code, message) returns an instance of the code's family class (FramingError,
    MalformedError, ...), so it can be raised by code and caught by family.
    """

    def __new__(cls, code: int, message: str = "", *args, **kwargs):
        if cls is WireError:
            cls = _FAMILY.get(code, WireError)
        return super().__new__(cls, code, message, *args, **kwargs)

    def __init__(self, code: int, message: str):
        super().__init__("%s (%d): %s" % (error_name(code), code, message))
        self.code = code
        self.message = message

    def __reduce__(self):
        return (WireError, (self.code, self.message))

    @property
    def name(self) -> str:
        """The code's name, e.g. "UNKNOWN_MODEL"."""
        return error_name(self.code)


class FramingError(WireError):
    """The frame stream is broken (bad magic, version, header, or a frame over the size
    limit); the server closes the connection after sending it."""


class MalformedError(WireError):
    """The request (or a frame being decoded) breaks the format or its limits."""


class ModelNotFoundError(WireError):
    """UNKNOWN_MODEL or UNKNOWN_VERSION: the model or pinned version is not loaded."""


class UnavailableError(WireError):
    """OVERLOADED or SHUTTING_DOWN: the request was not served; retry later or elsewhere."""


class InternalError(WireError):
    """INTERNAL: a bug in the server; the message says what."""


class ServerError(WireError):
    """The server answered a request with an ERROR frame.

    `request_id` is the id of the request it answers (0 for a framing error, which answers no
    request in particular).  ServerError(code, message, request_id) returns an instance of a
    class that derives from both ServerError and the code's family, so either catches it.
    """

    def __new__(cls, code: int, message: str = "", request_id: int = 0):
        if cls is ServerError:
            cls = _SERVER_FAMILY.get(code, ServerError)
        return TlserveError.__new__(cls, code, message, request_id)

    def __init__(self, code: int, message: str, request_id: int):
        super().__init__(code, message)
        self.request_id = request_id

    def __reduce__(self):
        return (ServerError, (self.code, self.message, self.request_id))


class ConnectionClosed(TlserveError, ConnectionError):
    """The server closed (or reset) the connection, possibly in the middle of a frame."""


class Timeout(TlserveError, TimeoutError):
    """A call's deadline passed before its answer arrived.

    Nothing is lost on a receive timeout: bytes already read stay buffered and the request
    stays in flight, so a later wait_for() with the same id can still collect the answer.  A
    timeout while sending leaves a frame half written, so the client closes the connection.
    """


_FAMILIES = {
    FramingError: FRAMING_ERRORS,
    MalformedError: (ErrorCode.UNKNOWN_TYPE, ErrorCode.TRUNCATED, ErrorCode.TRAILING_BYTES,
                     ErrorCode.BAD_VARINT, ErrorCode.BAD_NAME, ErrorCode.NO_ITEMS,
                     ErrorCode.TOO_MANY_ITEMS, ErrorCode.TOO_MANY_FEATURES,
                     ErrorCode.UNSORTED_FEATURES, ErrorCode.BAD_VALUE),
    ModelNotFoundError: (ErrorCode.UNKNOWN_MODEL, ErrorCode.UNKNOWN_VERSION),
    UnavailableError: (ErrorCode.OVERLOADED, ErrorCode.SHUTTING_DOWN),
    InternalError: (ErrorCode.INTERNAL,),
}
_FAMILY = {int(code): fam for fam, codes in _FAMILIES.items() for code in codes}


def _server_class(family: type) -> type:
    name = "Server" + family.__name__
    doc = "An ERROR frame from the server, code in the %s family." % family.__name__
    return type(name, (ServerError, family), {"__doc__": doc, "__module__": __name__})


_SERVER_FAMILY = {}
for _fam, _codes in _FAMILIES.items():
    _cls = _server_class(_fam)
    _SERVER_FAMILY.update((int(code), _cls) for code in _codes)
del _fam, _codes, _cls
