"""Unit tests of the Python client package tlserve (codec/python), whose codec is an
independent implementation of docs/wire.md: Client against a loopback fake server (FakeServer).

Run from the repo root (nothing needs installing; tlwire_testutil.py puts codec/python on
sys.path):
    python3 -m unittest discover -s tests/integration -p test_tlwire_client.py

These tests need no server.
"""

import socket
import struct
import threading
import time
import unittest

from tlwire_testutil import w, E, WireErrorMixin


class FakeServer:
    """A loopback stand-in for tlserve, just enough to exercise Client: answers PING with PONG,
    PREDICT with one score per item (0.5) after collecting `batch` requests (then answers them
    in reverse order), FEEDBACK by joining its events to the LOG PREDICTs it saw (the refusal
    reasons UNKNOWN_IMPRESSION, ITEM_OUT_OF_RANGE, WRONG_MODEL, DUPLICATE), and any bad header
    with ERROR(id 0) + close."""

    def __init__(self, batch=1):
        self.batch = batch
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.received = []
        self.logged = {}        # impression id -> (model, items)
        self.labelled = set()   # (impression id, item)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def recv_exact(self, c, n):
        buf = b""
        while len(buf) < n:
            chunk = c.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def run(self):
        c, _ = self.lsock.accept()
        queue = []
        with c:
            while True:
                hdr = self.recv_exact(c, w.HEADER_SIZE)
                if hdr is None:
                    return
                try:
                    h = w.parse_header(hdr)
                except w.WireError as e:
                    c.sendall(w.encode_frame(w.MsgType.ERROR, 0, w.encode_error(e.code, e.message)))
                    # lingering close: a close() with unread input sends RST, which can
                    # destroy the ERROR frame before the client reads it
                    c.shutdown(socket.SHUT_WR)
                    c.settimeout(1.0)
                    try:
                        while c.recv(65536):
                            pass
                    except OSError:
                        pass
                    return
                payload = self.recv_exact(c, h.payload_len) if h.payload_len else b""
                self.received.append((h, payload))
                if h.type == w.MsgType.PING:
                    c.sendall(w.encode_frame(w.MsgType.PONG, h.request_id, payload))
                elif h.type == w.MsgType.PREDICT:
                    try:
                        req = w.decode_predict(payload, h.flags)
                        if req.model != "ctr":
                            raise w.WireError(E.UNKNOWN_MODEL, "no model %r" % req.model)
                        if req.impression_id:
                            self.logged[req.impression_id] = (req.model, len(req.items))
                        out = w.encode_frame(w.MsgType.PREDICT_RESULT, h.request_id,
                                             w.encode_predict_result(3, [0.5] * len(req.items)))
                    except w.WireError as e:
                        out = w.encode_frame(w.MsgType.ERROR, h.request_id,
                                             w.encode_error(e.code, e.message))
                    queue.append(out)
                    if len(queue) >= self.batch:
                        for out in reversed(queue):
                            c.sendall(out)
                        queue.clear()
                elif h.type == w.MsgType.FEEDBACK:
                    try:
                        out = w.encode_frame(w.MsgType.FEEDBACK_ACK, h.request_id,
                                             self.join(w.decode_feedback(payload)))
                    except w.WireError as e:
                        out = w.encode_frame(w.MsgType.ERROR, h.request_id,
                                             w.encode_error(e.code, e.message))
                    c.sendall(out)
                else:
                    c.sendall(w.encode_frame(w.MsgType.ERROR, h.request_id,
                                             w.encode_error(E.UNKNOWN_TYPE, "type %d" % h.type)))

    def join(self, fb):
        refused = []
        for i, ev in enumerate(fb.events):
            model, items = self.logged.get(ev.impression_id, (None, 0))
            if model is None:
                refused.append((i, w.Refusal.UNKNOWN_IMPRESSION))
            elif ev.item >= items:
                refused.append((i, w.Refusal.ITEM_OUT_OF_RANGE))
            elif model != fb.model:
                refused.append((i, w.Refusal.WRONG_MODEL))
            elif (ev.impression_id, ev.item) in self.labelled:
                refused.append((i, w.Refusal.DUPLICATE))
            else:
                self.labelled.add((ev.impression_id, ev.item))
        return w.encode_feedback_ack(len(fb.events) - len(refused), refused)

    def close(self):
        self.lsock.close()
        self.thread.join(5)


class TestClient(WireErrorMixin, unittest.TestCase):
    def test_logged_predict_and_feedback(self):
        srv = FakeServer()
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                iid = 0xfeedface12345678
                res = c.predict("ctr", [1], [[2], [3], [4]], impression_id=iid)
                self.assertEqual(len(res.scores), 3)
                c.predict("ctr", [1], [[2]])                      # not logged
                ack = c.feedback("ctr", [w.FeedbackEvent(iid, 2, 1.0),
                                         (iid, 0, 0.0, 0.25),
                                         (iid, 3, 1.0),           # out of range
                                         (77, 0, 1.0),            # never logged
                                         (iid, 2, 1.0)])          # again
                self.assertEqual(ack.accepted, 2)
                self.assertEqual(ack.refused, [
                    w.Refused(2, w.Refusal.ITEM_OUT_OF_RANGE),
                    w.Refused(3, w.Refusal.UNKNOWN_IMPRESSION),
                    w.Refused(4, w.Refusal.DUPLICATE)])
                ack = c.feedback("ctr2", [(iid, 1, 1.0)])
                self.assertEqual(ack, w.FeedbackAck(0, [w.Refused(0, w.Refusal.WRONG_MODEL)]))
                # the encoder refuses before sending: nothing goes out
                with self.assertRaises(w.MalformedError):
                    c.feedback("ctr", [(0, 0, 1.0)])
                with self.assertRaises(w.MalformedError):
                    c.feedback("ctr", [(iid, 0, 1.0, 2e6)])
                with self.assertRaises(w.MalformedError):
                    c.send_train("ctr", [], [(1.0, [1])], weights=[-1.0])
        finally:
            srv.close()
        h0, p0 = srv.received[0]
        self.assertEqual((h0.type, h0.flags), (w.MsgType.PREDICT, w.PREDICT_FLAG_LOG))
        self.assertEqual(struct.unpack_from("<Q", p0)[0], 0xfeedface12345678)
        # after the impression id, the payload is the plain PREDICT's
        self.assertEqual(p0[8:], w.encode_predict("ctr", [1], [[2], [3], [4]]))
        self.assertEqual(srv.received[1][0].flags, 0)
        self.assertEqual([h.type for h, _ in srv.received], [1, 1, 10, 10])


    def test_predict_and_ping(self):
        srv = FakeServer()
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                res = c.predict("ctr", [1, 2], [[3], [4], [5]])
                self.assertEqual(res, w.PredictResult(3, [0.5, 0.5, 0.5]))
                self.assertEqual(c.ping(b"hello"), b"hello")
                self.assertEqual(c.predict("ctr", [], [[]], request_id=0).version, 3)
                with self.assertRaises(w.ServerError) as cm:
                    c.predict("nope", [], [[1]], request_id=77)
                self.assertEqual((cm.exception.code, cm.exception.request_id),
                                 (E.UNKNOWN_MODEL, 77))
                f = c.wait_for(c.send_frame(42, b"??"))
                self.assertEqual(w.decode_error(f.payload).code, E.UNKNOWN_TYPE)
        finally:
            srv.close()
        self.assertEqual([h.type for h, _ in srv.received], [1, 8, 1, 1, 42])
        self.assertEqual(srv.received[2][0].request_id, 0)

    def test_pipelining(self):
        srv = FakeServer(batch=3)
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                ids = [c.send_predict("ctr", [], [[1]] * k) for k in (1, 2, 3)]
                self.assertEqual(len(set(ids)), 3)
                # answers come back in reverse order; ask in send order
                for k, rid in zip((1, 2, 3), ids):
                    self.assertEqual(len(c.recv_predict_result(rid).scores), k)
                a = c.send_predict("ctr", [], [[1]])
                b = c.send_predict("ctr", [], [[1], [2]])
                d = c.send_predict("ctr", [], [[1], [2], [3], [4]])
                first = c.recv_frame()
                self.assertEqual(first.request_id, d)
                self.assertEqual(len(c.recv_predict_result(a).scores), 1)
                self.assertEqual(len(c.recv_predict_result(b).scores), 2)
        finally:
            srv.close()

    def test_send_raw_garbage(self):
        srv = FakeServer()
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                c.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                f = c.recv_frame()
                self.assertEqual((f.type, f.request_id), (w.MsgType.ERROR, 0))
                self.assertEqual(w.decode_error(f.payload).code, E.BAD_MAGIC)
                self.assertRaises(w.ConnectionClosed, c.recv_frame)
        finally:
            srv.close()

    def test_framing_error_while_waiting(self):
        srv = FakeServer()
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                c.send_raw(w.pack_header(w.MsgType.PING, 5, 0, reserved=1))
                with self.assertRaises(w.ServerError) as cm:
                    c.wait_for(5)
                self.assertEqual((cm.exception.code, cm.exception.request_id), (E.BAD_HEADER, 0))
        finally:
            srv.close()

    def test_error_families(self):
        srv = FakeServer()
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                with self.assertRaises(w.ModelNotFoundError) as cm:
                    c.predict("nope", [], [[1]], request_id=9)
                e = cm.exception
                self.assertIsInstance(e, w.ServerError)
                self.assertEqual((e.code, e.name, e.request_id), (E.UNKNOWN_MODEL,
                                                                  "UNKNOWN_MODEL", 9))
                # the encoder's refusals are the same family classes, raised before sending
                self.assertRaises(w.MalformedError, c.predict, "ctr", [], [])
                self.assertEqual(c.ping(b"ok"), b"ok")
        finally:
            srv.close()
        for code in E:
            fam = type(w.WireError(code, "m"))
            self.assertIn(fam, (w.FramingError, w.MalformedError, w.ModelNotFoundError,
                                w.UnavailableError, w.InternalError), code)
            srv_err = w.ServerError(code, "m", 3)
            self.assertIsInstance(srv_err, fam)
            self.assertEqual((srv_err.code, srv_err.message, srv_err.request_id), (code, "m", 3))
        self.assertIs(type(w.WireError(E.OVERLOADED, "")), w.UnavailableError)
        self.assertIs(type(w.WireError(E.BAD_MAGIC, "")), w.FramingError)
        self.assertIs(type(w.WireError(999, "")), w.WireError)
        self.assertIs(type(w.ServerError(999, "", 1)), w.ServerError)
        self.assertTrue(issubclass(w.Timeout, TimeoutError))
        self.assertTrue(issubclass(w.ConnectionClosed, ConnectionError))

    def test_timeout_keeps_the_request(self):
        srv = FakeServer(batch=2)       # answers only once two requests are in
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                a = c.send_predict("ctr", [], [[1]])
                self.assertRaises(w.Timeout, c.recv_predict_result, a, timeout=0.2)
                b = c.send_predict("ctr", [], [[1], [2]])
                self.assertEqual(len(c.recv_predict_result(a).scores), 1)
                self.assertEqual(len(c.recv_predict_result(b).scores), 2)
        finally:
            srv.close()

    def test_a_round_trip_gives_up_its_late_answer(self):
        srv = FakeServer(batch=2)       # answers only once two requests are in
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                self.assertRaises(w.Timeout, c.predict, "ctr", [], [[1]], timeout=0.2)
                b = c.send_predict("ctr", [], [[1], [2]])  # both answers come now, b first
                self.assertEqual(len(c.recv_predict_result(b).scores), 2)
                c.ping(timeout=2)  # reads the abandoned answer on its way to the PONG
                self.assertEqual(c.in_flight(), 0, "the abandoned answer is not kept")
        finally:
            srv.close()

    def test_send_timeout_closes(self):
        lsock = socket.create_server(("127.0.0.1", 0))   # accepts nothing, reads nothing
        try:
            c = w.Client("127.0.0.1", lsock.getsockname()[1], timeout=0.3)
            with self.assertRaises(w.Timeout):
                c.send_raw(bytes(64 << 20))               # more than the socket buffers hold
            self.assertIsNone(c.sock, "a half-written frame closes the connection")
            self.assertRaises(w.ConnectionClosed, c.ping)
        finally:
            lsock.close()

    def test_a_call_timeout_bounds_its_send(self):
        # the client's default is to wait for ever; the call's own 0.5 s bounds its send too
        lsock = socket.create_server(("127.0.0.1", 0))   # accepts nothing, reads nothing
        try:
            c = w.Client("127.0.0.1", lsock.getsockname()[1], timeout=None)
            step = (1 << 63) // 250  # ids far apart: ~9 bytes each, ~9 MB, more than buffers
            big = [[1 + step * j + i for j in range(250)] for i in range(4096)]
            t0 = time.monotonic()
            with self.assertRaises(w.Timeout):
                c.predict("ctr", [], big, timeout=2.0)
            self.assertLess(time.monotonic() - t0, 5.0)
            self.assertIsNone(c.sock, "a half-written frame closes the connection")
            self.assertRaises(w.ConnectionClosed, c.ping, timeout=1)  # not a BrokenPipeError
        finally:
            lsock.close()

    def test_server_word_before_close_and_dead_connections(self):
        # an ERROR with id 0 (OVERLOADED at accept) then a close: raised as the server's
        # error, not "connection closed"; then every call is ConnectionClosed
        lsock = socket.create_server(("127.0.0.1", 0))
        def refuse():
            conn, _ = lsock.accept()
            conn.sendall(w.encode_frame(w.MsgType.ERROR, 0,
                                        w.encode_error(E.OVERLOADED, "no room; retry later")))
            conn.close()
        t = threading.Thread(target=refuse, daemon=True)
        t.start()
        try:
            c = w.Client("127.0.0.1", lsock.getsockname()[1], timeout=5)
            t.join(5)
            time.sleep(0.1)
            with self.assertRaises(w.UnavailableError) as e:
                c.predict("ctr", [], [[1]])
            self.assertIn("no room", str(e.exception))
            self.assertRaises(w.ConnectionClosed, c.predict, "ctr", [], [[1]])
            self.assertRaises(w.ConnectionClosed, c.ping)
        finally:
            lsock.close()
        free = socket.socket()
        free.bind(("127.0.0.1", 0))
        dead = free.getsockname()[1]
        free.close()
        with self.assertRaises(w.ConnectionClosed):  # a refused connect is a TlserveError
            w.Client("127.0.0.1", dead, timeout=2)
        self.assertRaises(ValueError, w.Client, "127.0.0.1", dead, timeout=0)

    def test_arguments_that_cannot_be_encoded_are_named(self):
        # refused before anything is sent, naming the argument: no bare struct.error,
        # OverflowError or a comparison TypeError from sorting
        lsock = socket.create_server(("127.0.0.1", 0))   # accepts, never answers
        try:
            c = w.Client("127.0.0.1", lsock.getsockname()[1], timeout=1)
            with self.assertRaisesRegex(TypeError, "feature id 'abc'"):
                c.send_predict("ctr", ["abc", 1], [[1]])
            with self.assertRaisesRegex(TypeError, "feature id 1.5"):
                c.send_predict("ctr", [], [[1.5]])
            with self.assertRaisesRegex(TypeError, "feature id True"):
                c.send_predict("ctr", [True], [[1]])
            with self.assertRaisesRegex(ValueError, "version -1"):
                c.send_predict("ctr", [], [[1]], version=-1)
            with self.assertRaisesRegex(ValueError, "impression_id"):
                c.send_predict("ctr", [], [[1]], impression_id=1 << 64)
            with self.assertRaises(w.MalformedError) as e:  # finite, but no float32 holds it
                c.send_predict("ctr", ([1], [1e300]), [[1]])
            self.assertIn("float32", str(e.exception))
            with self.assertRaisesRegex(TypeError, "impression_id 1.5"):
                c.send_feedback("ctr", [(1.5, 0, 1.0)])
            self.assertRaises(ValueError, c.settimeout, 0)
            self.assertRaises(ValueError, c.predict, "ctr", [], [[1]], timeout=-5)
            self.assertIsNotNone(c.sock, "nothing was sent: the connection is still good")
            # a deadline that passes while sending is a Timeout, not a ValueError of the
            # timeout check (the silent peer answers nothing)
            self.assertRaises(w.Timeout, c.predict_many, "ctr", [([], [[1]])] * 3,
                              timeout=1e-6)
            c.close()
        finally:
            lsock.close()

    def test_a_framing_error_closes_the_client(self):
        # a peer that is not tlserve: after the FramingError the stream is out of step, so
        # the client closes itself instead of reading the rest as a frame
        lsock = socket.create_server(("127.0.0.1", 0))
        def http():
            conn, _ = lsock.accept()
            conn.recv(100)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            time.sleep(2)
            conn.close()
        t = threading.Thread(target=http, daemon=True)
        t.start()
        try:
            c = w.Client("127.0.0.1", lsock.getsockname()[1], timeout=1)
            self.assertRaises(w.FramingError, c.ping)
            self.assertIsNone(c.sock)
            self.assertRaises(w.ConnectionClosed, c.ping)
        finally:
            t.join(5)
            lsock.close()

    def test_feature_id_of_a_number_is_refused(self):
        self.assertRaises(TypeError, w.feature_id, 0, 42)  # not 42 zero bytes
        self.assertEqual(w.feature_id(0, "42"), w.feature_id(0, b"42"))

    def test_predict_many(self):
        srv = FakeServer(batch=2)
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                # (the fake answers in pairs, in reverse: every batch here sends an even count)
                reqs = [([k], [[1]] * k) for k in range(1, 9)]
                res = c.predict_many("ctr", reqs, window=3)
                self.assertEqual([len(r.scores) for r in res], list(range(1, 9)))
                # a request the encoder refuses takes its place in the list, or is raised
                reqs = [([], [[1]]), ([], []), ([], [[1], [2]]), ([], [[3]]), ([], [[4]] * 3)]
                res = c.predict_many("ctr", reqs, window=2, return_exceptions=True)
                self.assertEqual(len(res[0].scores), 1)
                self.assertIsInstance(res[1], w.MalformedError)
                self.assertEqual(res[1].code, E.NO_ITEMS)
                self.assertEqual([len(r.scores) for r in res[2:]], [2, 1, 3])
                self.assertEqual(c.in_flight(), 0)
                # without return_exceptions a refusal stops the sending, as a server error
                # does: the two requests in flight are drained, the one after is not sent
                before = len(srv.received)
                with self.assertRaises(w.MalformedError):
                    c.predict_many("ctr", [reqs[0], reqs[2], reqs[1], reqs[3]], window=2)
                self.assertEqual(c.in_flight(), 0)
                self.assertEqual(c.ping(b"still in step"), b"still in step")
        finally:
            srv.close()
        self.assertEqual([h.type for h, _ in srv.received[before:]], [1, 1, 8])

    def test_predict_many_server_error_drains(self):
        srv = FakeServer(batch=1)
        try:
            with w.Client("127.0.0.1", srv.port, timeout=5) as c:
                with self.assertRaises(w.ModelNotFoundError) as cm:
                    c.predict_many("nope", [([], [[1]])] * 10, window=4)
                self.assertEqual(cm.exception.request_id, 1)
                self.assertEqual(c.in_flight(), 0)
                self.assertEqual(c.ping(b"p"), b"p")
        finally:
            srv.close()
        self.assertEqual([h.type for h, _ in srv.received], [1] * 4 + [8])


if __name__ == "__main__":
    unittest.main()
