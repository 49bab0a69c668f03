"""Client: a blocking tlserve client on one TCP connection, with pipelining and timeouts.

    with tlserve.Client("127.0.0.1", 7070, timeout=2.0) as c:
        res = c.predict("ctr", shared_ids, [item_ids, ...])      # PredictResult(version, scores)
        a = c.send_predict(...); b = c.send_predict(...)          # pipelined: both in flight
        rb = c.recv_predict_result(b); ra = c.recv_predict_result(a)   # in any order
        many = c.predict_many("ctr", [(shared, items), ...])      # a window of requests in flight
        c.predict("ctr", shared, items, impression_id=iid)        # logged for feedback:
        ack = c.feedback("ctr", [(iid, 2, 1.0)])                  # item 2 clicked; FeedbackAck

Pipelining.  A request goes out as one frame with a request id (allocated from 1 upwards
unless given); answers may come back in any order, matched by id.  A frame for another id that
arrives while waiting is kept and handed out by a later wait for that id, so any number of
requests may be in flight.  The server bounds what one connection may have unanswered
(--max-inflight): past it, it stops reading that connection until its answers are read, so a
client that only writes stalls; predict_many reads as it sends, with at most `window` (at
most 1024) requests in flight.

Timeouts.  `timeout` (seconds, None = wait for ever) is the connect timeout and the default
deadline of each call; a call's own `timeout=` overrides it.  A receive that runs out of time
raises Timeout and loses nothing: bytes read so far stay buffered and the request stays in
flight, so a later wait for the same id still gets the answer (a round trip, predict() and
the like, whose caller never sees the id, drops that answer when it comes).  A call's timeout
bounds its send and its wait together; a send that runs out of time closes the connection (a
half-written frame cannot be taken back).

Errors.  An ERROR frame answering a request raises ServerError (an instance of its code's
family too: MalformedError, ModelNotFoundError, UnavailableError, ...).  An ERROR with id 0 is
the server's word on the whole connection before it closes it (a framing error, OVERLOADED at
accept, SHUTTING_DOWN); it is raised at once from any wait, also when it was read before an
EOF.  EOF, a reset or a refused connect raise ConnectionClosed, and the client is closed.

THREAD SAFETY: none.  One Client belongs to one thread at a time; use one per thread (the
server is built for many connections), or guard one with a lock.
"""

from __future__ import annotations

import socket
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .errors import (ConnectionClosed, ServerError, Timeout, TlserveError,
                     WireError, ErrorCode)
from .wire import (HEADER_SIZE, U64_MASK, Frame, MsgType, PredictResult, decode_error,
                   decode_pong, decode_predict_result, decode_train_ack, encode_frame,
                   encode_ping, encode_predict, encode_train, parse_header, predict_flags,
                   train_flags)
from .feedback import FeedbackAck, decode_feedback_ack, encode_feedback

__all__ = ["Client", "DEFAULT_PORT"]

DEFAULT_PORT = 7070     # tlserve --port's default
_KEEP = object()        # "no timeout given": use the client's default


def _check_timeout(timeout) -> None:
    """A timeout argument: None (wait for ever) or a number of seconds > 0."""
    if timeout is not None and (type(timeout) is bool or not isinstance(timeout, (int, float))
                                or not timeout > 0):
        raise ValueError("timeout must be None or > 0 seconds, got %r" % (timeout,))


class Client:
    """A connection to one tlserve.  See the module docstring for pipelining and timeouts.

    `sock` is the connected socket, exposed for tests that send raw bytes; reading from it
    directly bypasses the client's buffer.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 timeout: Optional[float] = 10.0):
        """Connect to host:port (blocks up to `timeout` seconds, None or > 0; raises
        ConnectionClosed when it cannot connect)."""
        _check_timeout(timeout)
        try:
            self.sock: Optional[socket.socket] = socket.create_connection((host, port),
                                                                          timeout=timeout)
        except socket.timeout as e:
            raise Timeout("connect to %s:%d timed out" % (host, port)) from e
        except OSError as e:
            raise ConnectionClosed("cannot connect to %s:%d: %s" % (host, port, e)) from e
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self._next_id = 1
        self._pending: Dict[int, List[Frame]] = {}   # frames read while waiting for another id
        self._abandoned: set = set()                 # ids a round trip gave up on (Timeout)
        self._rbuf = bytearray()                     # the part of the next frame read so far

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection; requests in flight are abandoned.  Safe to call twice."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._pending.clear()
        self._abandoned.clear()
        self._rbuf.clear()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def settimeout(self, timeout: Optional[float]) -> None:
        """Set the default deadline of each call (seconds, None or > 0; None = wait for ever)."""
        _check_timeout(timeout)
        self.timeout = timeout
        self._socket().settimeout(timeout)

    def in_flight(self) -> int:
        """Frames read and kept for ids nobody has waited for yet."""
        return sum(map(len, self._pending.values()))

    def _socket(self) -> socket.socket:
        if self.sock is None:
            raise ConnectionClosed("the client is closed")
        return self.sock

    def _deadline(self, timeout) -> Optional[float]:
        t = self.timeout if timeout is _KEEP else timeout
        _check_timeout(t)
        return None if t is None else time.monotonic() + t

    @staticmethod
    def _left(deadline: Optional[float]) -> Optional[float]:
        """The seconds left to deadline (a timeout argument), None for no deadline; a deadline
        already past leaves a nanosecond (a timeout must be > 0), so the call times out."""
        return None if deadline is None else max(1e-9, deadline - time.monotonic())

    # -- sending ----------------------------------------------------------------------------
    def next_id(self) -> int:
        """Allocate a request id (1, 2, ... wrapping past 2^64 - 1 to 1; 0 is never given)."""
        rid = self._next_id
        self._next_id = (self._next_id + 1) & U64_MASK or 1
        return rid

    def send_raw(self, data: bytes, timeout=_KEEP) -> None:
        """Send bytes as they are (tests use it to send bad frames), within `timeout`."""
        self._send(data, self._deadline(timeout))

    def _send(self, data: bytes, deadline: Optional[float]) -> None:
        sock = self._socket()
        sock.settimeout(None if deadline is None else max(0.001, deadline - time.monotonic()))
        try:
            sock.sendall(data)
        except socket.timeout as e:
            self.close()
            raise Timeout("send timed out; the connection is closed") from e
        except OSError as e:  # reset, broken pipe: the server closed it
            self.close()
            raise ConnectionClosed("send failed, the connection is closed: %s" % e) from e

    def send_frame(self, msg_type: int, payload: bytes = b"", request_id: Optional[int] = None,
                   flags: int = 0, timeout=_KEEP) -> int:
        """Send one frame within `timeout`; returns its request id."""
        if request_id is None:
            request_id = self.next_id()
        self._send(encode_frame(msg_type, request_id, payload, flags), self._deadline(timeout))
        return request_id

    def send_predict(self, model: str, shared, items: Sequence, version: int = 0,
                     request_id: Optional[int] = None, *, impression_id: int = 0) -> int:
        """Send a PREDICT without waiting; returns its request id for recv_predict_result.

        shared: the block every item shares (user, context); items: one block per item.  A
        block is a Block, a list of feature ids, or an (ids, values) pair; lists are sorted
        here.  version 0 scores with the model's active version, another pins that version.
        impression_id != 0 asks the server to log the request's features under that id, so
        that a later feedback() can label its items; the caller chooses it, unique over the
        server's impression window (a request id is only unique on its connection).
        Raises MalformedError before sending if the request breaks the format's limits."""
        payload = encode_predict(model, shared, items, version, impression_id=impression_id)
        return self.send_frame(MsgType.PREDICT, payload, request_id,
                               predict_flags(impression_id))

    def send_train(self, model: str, shared, samples: Sequence,
                   request_id: Optional[int] = None, *,
                   weights: Optional[Sequence[float]] = None) -> int:
        """Send a TRAIN (samples: (label 0.0 or 1.0, block) pairs; weights: one per sample in
        [0, 1e6], or None for 1 each) without waiting."""
        return self.send_frame(MsgType.TRAIN, encode_train(model, shared, samples,
                                                           weights=weights),
                               request_id, train_flags(weights))

    def send_feedback(self, model: str, events: Sequence,
                      request_id: Optional[int] = None) -> int:
        """Send a FEEDBACK without waiting; returns its request id for recv_feedback_ack.
        events: FeedbackEvent(impression_id, item, label, weight=1.0) or such tuples, naming
        items of PREDICTs sent with an impression_id for this model."""
        return self.send_frame(MsgType.FEEDBACK, encode_feedback(model, events), request_id)

    def send_ping(self, payload: bytes = b"", request_id: Optional[int] = None) -> int:
        """Send a PING (payload up to 64 bytes, echoed in the PONG) without waiting."""
        return self.send_frame(MsgType.PING, encode_ping(payload), request_id)

    # -- receiving --------------------------------------------------------------------------
    def _fill(self, n: int, deadline: Optional[float]) -> None:
        """Read until the buffer holds n bytes; never reads past them, so bytes after this
        frame stay in the socket."""
        sock = self._socket()
        while len(self._rbuf) < n:
            sock.settimeout(None if deadline is None else max(0.0, deadline - time.monotonic()))
            try:
                chunk = sock.recv(min(n - len(self._rbuf), 1 << 20))
            except (socket.timeout, BlockingIOError):
                raise Timeout("no answer in time (%d of %d bytes of a frame read)"
                              % (len(self._rbuf), n)) from None
            except OSError as e:
                got = len(self._rbuf)
                self._closed_by_server()
                raise ConnectionClosed("connection reset after %d of %d bytes: %s"
                                       % (got, n, e)) from e
            if not chunk:
                got = len(self._rbuf)
                self._closed_by_server()
                raise ConnectionClosed("connection closed after %d of %d bytes" % (got, n))
            self._rbuf += chunk

    def _closed_by_server(self) -> None:
        """The server closed the connection: a word it left for the whole connection (an
        ERROR with id 0) is raised, else the client is closed and the caller says EOF."""
        word = self._pending.get(0)
        self.close()
        for f in word or ():
            if f.type == MsgType.ERROR:
                e = decode_error(f.payload)
                raise ServerError(e.code, e.message, 0)

    def recv_frame(self, timeout=_KEEP) -> Frame:
        """Read the next frame off the connection (frames kept by wait_for are not looked at).
        Raises Timeout, ConnectionClosed, or FramingError if the server's header is bad (the
        client is then closed: reconnect)."""
        deadline = self._deadline(timeout)
        self._fill(HEADER_SIZE, deadline)
        try:
            h = parse_header(self._rbuf)
        except WireError:
            self.close()  # the stream is out of step: nothing after it can be read as frames
            raise
        self._fill(HEADER_SIZE + h.payload_len, deadline)
        payload = bytes(self._rbuf[HEADER_SIZE:])
        self._rbuf.clear()
        return Frame(h.type, h.flags, h.request_id, payload)

    def wait_for(self, request_id: int, timeout=_KEEP) -> Frame:
        """Return the first frame with this request id, kept or read, whatever its type.

        Frames for other ids are kept for later; PINGs from the server are answered with a
        PONG.  An ERROR with id 0 and a framing code raises ServerError at once (the server is
        closing the connection).  Raises Timeout if nothing came in time (see the module
        docstring: the wait can be repeated)."""
        kept = self._pending.get(request_id)
        if kept:
            f = kept.pop(0)
            if not kept:
                del self._pending[request_id]
            return f
        deadline = self._deadline(timeout)
        while True:
            f = self.recv_frame(self._left(deadline))
            if f.request_id == request_id:
                return f
            if f.type == MsgType.PING:
                self.send_frame(MsgType.PONG, f.payload, f.request_id)
                continue
            if f.type == MsgType.ERROR and f.request_id == 0:
                e = decode_error(f.payload)  # the server closes the connection after it
                raise ServerError(e.code, e.message, 0)
            if f.request_id in self._abandoned:  # its caller is gone: nobody will wait for it
                self._abandoned.discard(f.request_id)
                continue
            self._pending.setdefault(f.request_id, []).append(f)

    @staticmethod
    def _raise_if_error(f: Frame) -> None:
        if f.type == MsgType.ERROR:
            e = decode_error(f.payload)
            raise ServerError(e.code, e.message, f.request_id)

    def _round_trip_wait(self, rid: int, deadline: Optional[float]) -> Frame:
        """wait_for of a round trip (predict, train, feedback, ping): its caller never sees
        the request id, so on Timeout the answer is dropped when it arrives, not kept."""
        try:
            return self.wait_for(rid, self._left(deadline))
        except Timeout:
            self._abandoned.add(rid)
            raise

    def _expect(self, f: Frame, msg_type: int) -> None:
        self._raise_if_error(f)
        if f.type != msg_type:
            raise WireError(ErrorCode.UNKNOWN_TYPE, "expected a %s frame for request %d, got "
                            "type %d" % (MsgType(msg_type).name, f.request_id, f.type))

    def recv_predict_result(self, request_id: int, timeout=_KEEP) -> PredictResult:
        """Wait for the answer to a send_predict: PredictResult(version, scores), one score in
        [0, 1] per item in request order.  Raises ServerError for an ERROR answer."""
        f = self.wait_for(request_id, timeout)
        self._expect(f, MsgType.PREDICT_RESULT)
        return decode_predict_result(f.payload)

    def recv_feedback_ack(self, request_id: int, timeout=_KEEP) -> FeedbackAck:
        """Wait for the answer to a send_feedback: FeedbackAck(accepted, refused), refused
        being Refused(event index, Refusal reason) in event order.  An accepted event is
        joined and in the server's sample log.  Raises ServerError for an ERROR answer
        (OVERLOADED: the events before the one the queue could not take were accepted; send
        the frame again later and count DUPLICATE as done)."""
        f = self.wait_for(request_id, timeout)
        self._expect(f, MsgType.FEEDBACK_ACK)
        return decode_feedback_ack(f.payload)

    # -- round trips ------------------------------------------------------------------------
    def predict(self, model: str, shared, items: Sequence, version: int = 0,
                request_id: Optional[int] = None, timeout=_KEEP, *,
                impression_id: int = 0) -> PredictResult:
        """Score items for one request and wait for the answer (send_predict, then
        recv_predict_result).  Returns PredictResult(version, scores).  impression_id != 0:
        the server logs the request under that id for feedback() (see send_predict)."""
        deadline = self._deadline(timeout)  # one deadline for the send and the wait
        payload = encode_predict(model, shared, items, version, impression_id=impression_id)
        rid = self.send_frame(MsgType.PREDICT, payload, request_id, predict_flags(impression_id),
                              timeout=self._left(deadline))
        f = self._round_trip_wait(rid, deadline)
        self._expect(f, MsgType.PREDICT_RESULT)
        res = decode_predict_result(f.payload)
        if len(res.scores) != len(items):
            raise WireError(ErrorCode.INTERNAL, "%d scores for %d items"
                            % (len(res.scores), len(items)))
        return res

    def predict_many(self, model: str, requests: Iterable[Tuple[object, Sequence]],
                     version: int = 0, *, window: int = 32, timeout=_KEEP,
                     return_exceptions: bool = False) -> List:
        """Score many requests, pipelined: up to `window` in flight on this one connection.

        requests: (shared, items) pairs.  Returns one PredictResult per request, in order.
        Keep `window` at most the server's --max-inflight (128 by default): past it the server
        stops reading the connection until answers are read, and the batch stalls until its
        timeout.
        `timeout` is the deadline of the whole batch.  If a request fails, the ones still in
        flight are drained and the first failure is raised, unless return_exceptions=True, in
        which case its TlserveError takes its place in the list."""
        if not 1 <= window <= 1024:
            raise ValueError("window must be 1..1024 (and at most the server's --max-inflight, "
                             "128 by default, or it stops reading the connection)")
        deadline = self._deadline(timeout)
        reqs = list(requests)
        out: List = [None] * len(reqs)
        sent: List[Tuple[int, int]] = []     # (index, request id), oldest first
        first_error: Optional[TlserveError] = None
        nxt = 0
        while nxt < len(reqs) or sent:
            while nxt < len(reqs) and len(sent) < window:
                shared, items = reqs[nxt]
                try:
                    sent.append((nxt, self.send_predict(model, shared, items, version)))
                except WireError as e:        # refused by the encoder: nothing was sent
                    out[nxt] = e
                    first_error = first_error or e
                nxt += 1
                if first_error is not None and not return_exceptions:
                    nxt = len(reqs)           # send nothing more; drain what is in flight
            if not sent:
                continue
            i, rid = sent.pop(0)
            left = self._left(deadline)
            try:
                out[i] = self.recv_predict_result(rid, left)
            except ServerError as e:
                out[i] = e
                first_error = first_error or e
                if not return_exceptions:
                    nxt = len(reqs)
        if first_error is not None and not return_exceptions:
            raise first_error
        return out

    def train(self, model: str, shared, samples: Sequence, request_id: Optional[int] = None,
              timeout=_KEEP, *, weights: Optional[Sequence[float]] = None) -> int:
        """Send labelled samples (optionally weighted) to the model's online trainer and wait
        for the TRAIN_ACK; returns how many samples the server accepted."""
        deadline = self._deadline(timeout)
        rid = self.send_frame(MsgType.TRAIN, encode_train(model, shared, samples, weights=weights),
                              request_id, train_flags(weights), timeout=self._left(deadline))
        f = self._round_trip_wait(rid, deadline)
        self._expect(f, MsgType.TRAIN_ACK)
        return decode_train_ack(f.payload)

    def feedback(self, model: str, events: Sequence, request_id: Optional[int] = None,
                 timeout=_KEEP) -> FeedbackAck:
        """Send labels for logged impressions and wait for the FEEDBACK_ACK (send_feedback,
        then recv_feedback_ack).  The ack's accepted + len(refused) equals len(events)."""
        deadline = self._deadline(timeout)
        rid = self.send_frame(MsgType.FEEDBACK, encode_feedback(model, events), request_id,
                              timeout=self._left(deadline))
        f = self._round_trip_wait(rid, deadline)
        self._expect(f, MsgType.FEEDBACK_ACK)
        ack = decode_feedback_ack(f.payload)
        if ack.accepted + len(ack.refused) != len(events):
            raise WireError(ErrorCode.INTERNAL, "ack covers %d events of %d"
                            % (ack.accepted + len(ack.refused), len(events)))
        return ack

    def ping(self, payload: bytes = b"", request_id: Optional[int] = None,
             timeout=_KEEP) -> bytes:
        """Round-trip a PING; returns the payload the server echoed."""
        deadline = self._deadline(timeout)
        rid = self.send_frame(MsgType.PING, encode_ping(payload), request_id,
                              timeout=self._left(deadline))
        f = self._round_trip_wait(rid, deadline)
        self._expect(f, MsgType.PONG)
        return decode_pong(f.payload)
