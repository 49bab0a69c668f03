"""Peers with a backlog: pipelined bursts, peers that never read, half-closed peers, a drain.

What a worker owes its peers when output queues up, on both data-plane drivers (io_uring and
--force-epoll), against the real tlserve over loopback:
- a client that keeps fewer than --max-inflight requests in flight is never held back: a response
  stops counting against --max-inflight once it is sent, even while later ones queue behind it;
- a peer that half-closes (shutdown(SHUT_WR)) and never reads its large backlog does not spin
  the worker: the process uses far less than a core while it stays connected;
- SIGTERM with a peer that never reads exits 0 within the drain deadline (5 s) plus a margin;
- such a peer holds only --max-inflight unsent answers (back-pressure: the worker stops reading
  it), so the worker's other clients are still answered.
Bounds on time are generous: only a hang or a spin crosses them.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
import unittest

from harness import (TLSERVE, TLSYNTH, Server, cpu_seconds, model_key, require, temp_model,
                     tlserve, widest_predict)

MsgType = tlserve.MsgType
MODEL = "ctr"
MODEL_DIR = None
_TMP = None


def setUpModule():
    global MODEL_DIR, _TMP
    require(TLSERVE, TLSYNTH)
    _TMP, MODEL_DIR = temp_model("tlbacklog", 1000, MODEL)


def tearDownModule():
    if _TMP:
        shutil.rmtree(_TMP, ignore_errors=True)


def stuck_peer(port, requests=400):
    """A connected socket that has sent `requests` large PREDICTs and reads nothing: the server
    holds megabytes of output for it that cannot go out."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.settimeout(2)
    frame = widest_predict(MODEL)
    try:
        for rid in range(1, requests + 1):
            sock.sendall(tlserve.encode_frame(MsgType.PREDICT, rid, frame))
    except socket.timeout:
        pass  # the server stopped reading it (back-pressure): it is stuck all the same
    return sock


class Backlog:
    """The tests, run once per driver (the subclasses set `extra`)."""

    extra = ()

    def server(self, *flags):
        return Server(MODEL_DIR, "--workers", "1", *(list(self.extra) + list(flags)))

    def test_pipelined_requests_under_the_limit_are_answered(self):
        # 200 requests in flight (under --max-inflight 256), each answered by ~16 KB, and a
        # small receive buffer: the worker's output never empties, its sends are partial and
        # new answers queue behind them while the client reads one answer and sends one
        # request.  A response that has been sent must stop counting, or the count passes 256
        # while 200 are unanswered and the worker stops reading a client that is reading.
        srv = self.server("--max-inflight", "256", "--max-unsent-bytes", str(1 << 30))
        try:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", srv.port))
            sock.settimeout(20)
            req = widest_predict(MODEL)
            window, total = 200, 3000
            sock.sendall(b"".join(tlserve.encode_frame(MsgType.PREDICT, rid, req)
                                  for rid in range(1, window + 1)))
            sent, received = window, 0
            time.sleep(0.3)  # the socket buffers fill; the rest waits in the worker
            errors = {}
            buf = bytearray()
            while received < total:
                chunk = sock.recv(1 << 16)
                self.assertTrue(chunk, "server closed after %d answers" % received)
                buf += chunk
                answered = 0
                while len(buf) >= tlserve.HEADER_SIZE:
                    h = tlserve.parse_header(bytes(buf[:tlserve.HEADER_SIZE]))
                    end = tlserve.HEADER_SIZE + h.payload_len
                    if len(buf) < end:
                        break
                    if h.type == MsgType.ERROR:
                        e = tlserve.decode_error(bytes(buf[tlserve.HEADER_SIZE:end]))
                        errors.setdefault(e.message, 0)
                        errors[e.message] += 1
                    del buf[:end]
                    answered += 1
                received += answered
                more = min(answered, total - sent)
                if more:
                    sock.sendall(b"".join(tlserve.encode_frame(MsgType.PREDICT, sent + 1 + i, req)
                                          for i in range(more)))
                    sent += more
            sock.close()
            self.assertEqual(errors, {}, "with at most %d requests in flight" % window)
            self.assertEqual(srv.metric("tlserve_backpressure_total"), 0,
                             "held back with at most %d of 256 in flight" % window)
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_half_closed_peer_that_does_not_read_does_not_spin(self):
        srv = self.server("--max-inflight", "100000")
        try:
            sock = stuck_peer(srv.port)
            time.sleep(1.0)  # let the worker answer what it has read
            sock.shutdown(socket.SHUT_WR)
            time.sleep(0.5)
            before = cpu_seconds(srv.proc.pid)
            time.sleep(2.0)
            used = cpu_seconds(srv.proc.pid) - before
            self.assertLess(used, 0.5, "tlserve used %.2f s of CPU in 2 s with a half-closed "
                                       "peer that does not read" % used)
            self.assertIsNone(srv.proc.poll())
            sock.close()
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_sigterm_with_a_peer_that_does_not_read_exits_within_the_drain_deadline(self):
        srv = self.server("--max-inflight", "100000")
        sock = None
        try:
            sock = stuck_peer(srv.port)
            time.sleep(1.0)
            t0 = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            try:
                rc = srv.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                rc = None
            self.assertIsNotNone(rc, "tlserve still running 15 s after SIGTERM: %s"
                                 % srv.output()[-2000:])
            self.assertEqual(rc, 0, srv.output()[-2000:])
            self.assertLess(time.monotonic() - t0, 15)
        finally:
            if sock:
                sock.close()
            srv.stop()


    def test_a_peer_that_does_not_read_does_not_make_the_worker_refuse_others(self):
        # One worker, the default --max-inflight (128): the stuck peer's 1000 answers do not
        # fit in the socket buffers, but it may hold only 128 unsent before it is not read,
        # and no limit of the worker's is shared: 10 new clients on it are all answered.
        srv = self.server()
        try:
            sock = stuck_peer(srv.port, requests=1000)
            time.sleep(0.5)
            for i in range(10):
                with srv.client() as c:
                    res = c.predict(MODEL, [model_key(0)], [[model_key(1 + i)]])
                    self.assertEqual(len(res.scores), 1)
            sock.close()
        finally:
            self.assertEqual(srv.stop(), 0)


class BacklogUring(Backlog, unittest.TestCase):
    extra = ()


class BacklogEpoll(Backlog, unittest.TestCase):
    extra = ("--force-epoll",)


if __name__ == "__main__":
    unittest.main()
