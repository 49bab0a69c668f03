"""tlserve: the Python client of tlserve, the online CTR prediction server.

Standard library only.  Score a request against a running server:

    import tlserve

    shared = [tlserve.feature_id(0, "user:42"), tlserve.feature_id(1, "page:home")]
    items = [[tlserve.feature_id(2, "ad:%d" % ad)] for ad in (7, 8, 9)]
    with tlserve.Client("127.0.0.1", 7070, timeout=1.0) as c:
        res = c.predict("ctr", shared, items)     # PredictResult(version, scores)
        print(res.version, res.scores)            # one click probability per item

What is here
  Client                   one connection: predict, predict_many (pipelined), send_predict +
                           recv_predict_result (any number in flight, matched by request id),
                           train (optionally weighted), predict with an impression id
                           (logged for feedback), feedback; ping; per-call timeouts (client.py)
  feature_id, libffm_id, libsvm_id, criteo_ids, criteo_int, xxh3_64
                           64-bit feature ids exactly as the server's readers make them
                           (hashing.py)
  TlserveError, WireError and its families FramingError, MalformedError, ModelNotFoundError,
  UnavailableError, InternalError; ServerError (an ERROR frame from the server),
  ConnectionClosed, Timeout                                            (errors.py)
  Block, make_block, encode_*/decode_* for every message, MsgType, ErrorCode and the
  format's limits (MAX_ITEMS, ...)                                     (wire.py)
  FeedbackEvent, FeedbackAck, Refusal, encode_/decode_feedback(_ack)   (feedback.py)

The wire format is docs/wire.md in the tlserve repository.
"""

from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .hashing import *  # noqa: F401,F403
from .hashing import __all__ as _hashing_all
from .wire import *  # noqa: F401,F403
from .wire import __all__ as _wire_all
from .feedback import *  # noqa: F401,F403
from .feedback import __all__ as _feedback_all
from .client import *  # noqa: F401,F403
from .client import __all__ as _client_all

__version__ = "0.1.0"

__all__ = (["__version__"] + _client_all + _errors_all + _hashing_all + _wire_all
           + _feedback_all)
