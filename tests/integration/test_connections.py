"""What the server does with connections that cost it without asking anything, on both data-plane
drivers (io_uring and --force-epoll), against the real tlserve over loopback:
- back-pressure instead of refusal: a client pipelining far past --max-inflight before reading
  gets every answer, none OVERLOADED (the limit is the connection's own, not the worker's);
- a connection that sends nothing is closed after --idle-timeout-ms, one that keeps talking is
  not; one whose unsent answers do not move is closed after --send-timeout-ms; past
  --max-output-bytes the largest backlog is closed, and the output buffers stay under the cap;
- at --max-connections the longest idle connection makes room for a new one, and with none idle
  the new one is told why (an ERROR frame, OVERLOADED) before the close;
- out of file descriptors, new clients are refused at once with an ERROR frame (not left in the
  accept queue), the failure is counted and logged, and the server serves again once
  descriptors are free; a start with too low a limit says so;
- a client that pipelines a thousand requests and closes without reading is not scored for
  once its close has reached the server (a check every 16 unsent answers).
Each counts in /metrics (tlserve_connections_reaped_total{reason}, ..._refused_total,
tlserve_accept_errors_total).  Time bounds are generous: only a hang crosses them.
"""

import os
import shutil
import signal
import socket
import stat
import tempfile
import threading
import time
import unittest

import harness
from harness import (TLSERVE, TLSYNTH, Server, cpu_seconds, model_key, require, temp_model,
                     tlserve, widest_predict)

MsgType = tlserve.MsgType
ErrorCode = tlserve.ErrorCode
MODEL = "ctr"
MODEL_DIR = None
_TMP = None


def setUpModule():
    global MODEL_DIR, _TMP
    require(TLSERVE, TLSYNTH)
    _TMP, MODEL_DIR = temp_model("tlconns", 1000, MODEL)


def tearDownModule():
    if _TMP:
        shutil.rmtree(_TMP, ignore_errors=True)


def read_frame(sock, buf):
    """One frame from sock (buf: bytes already read); returns (header, payload, rest) or
    (None, None, buf) at EOF."""
    while len(buf) < tlserve.HEADER_SIZE:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return None, None, buf
        buf += chunk
    h = tlserve.parse_header(buf[:tlserve.HEADER_SIZE])
    end = tlserve.HEADER_SIZE + h.payload_len
    while len(buf) < end:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return None, None, buf
        buf += chunk
    return h, buf[tlserve.HEADER_SIZE:end], buf[end:]


def expect_refusal(test, sock, code=ErrorCode.OVERLOADED):
    """sock was refused: one ERROR frame (id 0, `code`), then EOF.  Returns the message."""
    sock.settimeout(5)
    h, payload, rest = read_frame(sock, b"")
    test.assertIsNotNone(h, "closed without an ERROR frame")
    test.assertEqual(h.type, MsgType.ERROR)
    test.assertEqual(h.request_id, 0)
    err = tlserve.decode_error(payload)
    test.assertEqual(err.code, code, err.message)
    test.assertEqual(rest, b"")
    test.assertEqual(sock.recv(1), b"")
    return err.message


def eof_within(sock, seconds):
    """True when the server closes sock within `seconds` (reset counts as closed)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


def stuck_peer(port, requests):
    """Sends `requests` large PREDICTs and reads nothing; stops sending when the server stops
    reading (back-pressure)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.settimeout(1)
    frame = widest_predict(MODEL)
    try:
        for rid in range(1, requests + 1):
            sock.sendall(tlserve.encode_frame(MsgType.PREDICT, rid, frame))
    except socket.timeout:
        pass
    except (ConnectionResetError, BrokenPipeError):
        pass  # closed already (past --max-output-bytes)
    return sock


def stopped(pid):
    """True once every thread of pid is stopped (SIGSTOP is delivered asynchronously)."""
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
            if f.read().rsplit(")", 1)[1].split()[0] != "T":
                return False
    return True


def wait_for(pred, seconds, step=0.05):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


class Connections:
    """The tests, run once per driver (the subclasses set `extra`)."""

    extra = ()

    def server(self, *flags):
        return Server(MODEL_DIR, "--workers", "1", *(list(self.extra) + list(flags)))

    def reaped(self, srv, reason):
        return srv.metric('tlserve_connections_reaped_total{reason="%s"}' % reason)

    def test_pipelining_past_max_inflight_is_slowed_not_refused(self):
        srv = self.server("--max-inflight", "2")
        try:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", srv.port))
            sock.settimeout(20)
            big = widest_predict(MODEL)
            stream = b"".join(tlserve.encode_frame(MsgType.PREDICT, rid, big)
                              for rid in range(1, 201))
            # All 200 go out from a thread while this one reads, as a pipelining client must:
            # one that sends everything before reading waits on the server, which waits on it.
            sender = threading.Thread(target=sock.sendall, args=(stream,))
            sender.start()
            buf, ids = b"", []
            while len(ids) < 200:
                h, payload, buf = read_frame(sock, buf)
                self.assertIsNotNone(h, "closed after %d answers" % len(ids))
                self.assertEqual(h.type, MsgType.PREDICT_RESULT,
                                 h.type == MsgType.ERROR and tlserve.decode_error(payload))
                ids.append(h.request_id)
            sender.join()
            sock.close()
            self.assertEqual(ids, list(range(1, 201)))
            self.assertEqual(srv.metric("tlserve_overloaded_total"), 0)
            self.assertGreater(srv.metric("tlserve_backpressure_total"), 0)
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_idle_connection_is_reaped_and_a_talking_one_is_not(self):
        srv = self.server("--idle-timeout-ms", "1000")
        try:
            with srv.client() as talker:
                talker.ping(b"hello")
                idle = socket.create_connection(("127.0.0.1", srv.port))
                idle.settimeout(0.3)
                t0 = time.monotonic()
                closed = False
                while not closed and time.monotonic() - t0 < 10:
                    talker.ping(b"x")  # a ping every 300 ms: never idle a second
                    try:
                        closed = idle.recv(1) == b""
                    except socket.timeout:
                        pass
                self.assertTrue(closed, "an idle connection was not closed")
                self.assertGreater(time.monotonic() - t0, 0.8)
                talker.ping(b"still here")
            idle.close()
            self.assertEqual(self.reaped(srv, "idle"), 1)
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_output_that_does_not_move_is_closed_after_send_timeout(self):
        srv = self.server("--send-timeout-ms", "1000", "--max-inflight", "100000")
        try:
            sock = stuck_peer(srv.port, 400)
            self.assertTrue(wait_for(lambda: self.reaped(srv, "send_timeout") == 1, 10))
            self.assertTrue(wait_for(lambda: srv.metric("tlserve_connections") == 0, 5))
            self.assertTrue(wait_for(lambda: srv.metric("tlserve_output_buffer_bytes") == 0, 5))
            sock.close()
            with srv.client() as c:
                c.ping(b"after")
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_the_largest_backlog_is_closed_past_max_output_bytes(self):
        cap = 1 << 20
        srv = self.server("--max-output-bytes", str(cap), "--max-inflight", "100000",
                          "--send-timeout-ms", "60000")
        try:
            peers = [stuck_peer(srv.port, 300) for _ in range(3)]
            self.assertTrue(wait_for(lambda: self.reaped(srv, "output_cap") >= 1, 10))
            # a connection may pass the cap by one buffer's growth before it is closed
            self.assertLessEqual(srv.metric("tlserve_output_buffer_bytes"), 2 * cap)
            with srv.client() as c:
                c.ping(b"still serving")
            for p in peers:
                p.close()
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_at_the_limit_a_new_client_is_told_why(self):
        srv = self.server("--max-connections", "2")
        try:
            with srv.client() as a, srv.client() as b:
                a.ping(b"a")
                b.ping(b"b")  # both just active: neither may be evicted
                c = socket.create_connection(("127.0.0.1", srv.port))
                msg = expect_refusal(self, c)
                self.assertIn("limit 2", msg)
                c.close()
                a.ping(b"a")
                b.ping(b"b")
            self.assertGreaterEqual(srv.metric("tlserve_connections_refused_total"), 1)
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_at_the_limit_the_longest_idle_connection_makes_room(self):
        srv = self.server("--max-connections", "2")
        try:
            first = socket.create_connection(("127.0.0.1", srv.port))
            time.sleep(0.2)
            second = socket.create_connection(("127.0.0.1", srv.port))
            time.sleep(1.3)  # both idle past a second, `first` the longest
            with srv.client() as c:
                c.ping(b"let in")
                self.assertTrue(eof_within(first, 5), "the longest idle was not evicted")
                second.settimeout(0.3)
                with self.assertRaises(socket.timeout):
                    second.recv(1)  # still open
                c.ping(b"again")
            self.assertEqual(self.reaped(srv, "evicted"), 1)
            self.assertEqual(srv.metric("tlserve_connections_refused_total"), 0)
            first.close()
            second.close()
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_out_of_file_descriptors_clients_are_refused_at_once(self):
        # tlserve under `ulimit -n 24` with room for 100 connections: it says so at start,
        # then clients past the descriptors it has get an ERROR frame at once.
        tmp = tempfile.mkdtemp(prefix="tlfds")
        wrapper = os.path.join(tmp, "tlserve")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nulimit -n 24 || exit 3\nexec "%s" "$@"\n' % TLSERVE)
        os.chmod(wrapper, stat.S_IRWXU)
        saved, harness.TLSERVE = harness.TLSERVE, wrapper
        socks = []
        try:
            srv = self.server("--max-connections", "100")
        finally:
            harness.TLSERVE = saved
        try:
            refused = 0
            for _ in range(24):
                s = socket.create_connection(("127.0.0.1", srv.port))
                socks.append(s)
                s.settimeout(5)
                s.sendall(tlserve.encode_frame(MsgType.PING, 1, tlserve.encode_ping(b"p")))
                h, payload, _ = read_frame(s, b"")
                self.assertIsNotNone(h, "closed without an answer")
                if h.type == MsgType.ERROR:
                    err = tlserve.decode_error(payload)
                    self.assertEqual(err.code, ErrorCode.OVERLOADED)
                    self.assertIn("file descriptors", err.message)
                    self.assertEqual(s.recv(1), b"")
                    refused += 1
                else:
                    self.assertEqual(h.type, MsgType.PONG)
            self.assertGreater(refused, 0)
            # The admin plane is out of descriptors too: its accept pauses instead of spinning
            # the process, and the request is answered once descriptors are free.
            result = {}
            def get_health():
                try:
                    result["status"] = harness.http(srv.admin_port, "/healthz", timeout=10)[0]
                except OSError as e:
                    result["status"] = e
            getter = threading.Thread(target=get_health)
            cpu0 = cpu_seconds(srv.proc.pid)
            getter.start()
            time.sleep(1.0)
            self.assertLess(cpu_seconds(srv.proc.pid) - cpu0, 0.5, "spinning while out of fds")
            for s in socks:
                s.close()
            socks = []
            getter.join()
            self.assertEqual(result.get("status"), 200)
            self.assertTrue(wait_for(lambda: srv.metric("tlserve_connections") == 0, 5))
            self.assertGreater(srv.metric("tlserve_accept_errors_total"), 0)
            self.assertGreaterEqual(srv.metric("tlserve_connections_refused_total"), refused)
            with srv.client() as c:  # descriptors are free again
                c.ping(b"back")
            out = srv.output()
            self.assertIn("file descriptor limit 24", out)
            self.assertIn("out of file descriptors", out)
        finally:
            for s in socks:
                s.close()
            self.assertEqual(srv.stop(), 0)
            shutil.rmtree(tmp, ignore_errors=True)

    def send_while_stopped(self, srv, end):
        """Connects, stops the server (SIGSTOP), sends 1000 small requests (~50 KB, which the
        server's socket buffer takes whole), ends the sending (end(sock): a close or a
        shutdown) and lets the server run again, so that all of them and the end wait in the
        kernel.  Returns (the socket, PREDICTs scored before)."""
        req = tlserve.encode_predict(MODEL, [model_key(0)], [[model_key(1)]])
        stream = b"".join(tlserve.encode_frame(MsgType.PREDICT, rid, req)
                          for rid in range(1, 1001))
        self.assertLess(len(stream), 64 << 10)
        with srv.client() as c:  # warm: the worker has scored with this model
            c.predict(MODEL, [model_key(0)], [[model_key(1)]])
        before = srv.metric("tlserve_predict_total")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        sock.connect(("127.0.0.1", srv.port))
        srv.proc.send_signal(signal.SIGSTOP)
        try:
            self.assertTrue(wait_for(lambda: stopped(srv.proc.pid), 5, step=0.001))
            sock.settimeout(10)
            sock.sendall(stream)
            end(sock)
            time.sleep(0.3)
        finally:
            srv.proc.send_signal(signal.SIGCONT)
        return sock, before

    def test_a_closed_peer_is_not_scored_for(self):
        # Once it runs again the server must not score the requests for nobody.  It learns
        # of the close at its first check, after 16 unsent answers.  (Frames that arrive
        # before the close cannot be known to be abandoned; with the default --max-inflight
        # at most 128 of them are answered before the worker stops reading.)
        srv = self.server()
        try:
            sock, before = self.send_while_stopped(srv, lambda s: s.close())
            self.assertTrue(wait_for(lambda: srv.metric("tlserve_connections") == 0, 10))
            scored = srv.metric("tlserve_predict_total") - before
            self.assertLessEqual(scored, 16, "%d of 1000 scored for nobody" % scored)
            with srv.client() as c:  # a client that reads gets all it asks for
                res = c.predict_many(MODEL, [([model_key(0)], [[model_key(1)]])] * 300, window=200)
                self.assertEqual(len(list(res)), 300)
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_a_half_closed_peer_gets_what_was_scored(self):
        # As above, but the client only shuts its sending side (nc -N, a batch then SHUT_WR):
        # the frames after the server learns of it are not scored, and the answers it had
        # queued by then still reach the client, in order, in both drivers
        srv = self.server()
        sock = None
        try:
            sock, before = self.send_while_stopped(srv, lambda s: s.shutdown(socket.SHUT_WR))
            buf, ids = b"", []
            while True:
                h, payload, buf = read_frame(sock, buf)
                if h is None:
                    break
                self.assertEqual(h.type, MsgType.PREDICT_RESULT)
                ids.append(h.request_id)
            scored = srv.metric("tlserve_predict_total") - before
            self.assertGreaterEqual(len(ids), 16)
            self.assertEqual(ids, list(range(1, len(ids) + 1)))
            self.assertEqual(len(ids), scored, "scored answers not delivered")
        finally:
            if sock:
                sock.close()
            self.assertEqual(srv.stop(), 0)

    def test_a_clean_stop_logs_no_accept_failure(self):
        # The drain shuts the listening sockets down; the accept that ends with it is not an
        # accept failure (no warning, no count).
        srv = self.server("--workers", "2")
        try:
            with srv.client() as c:
                c.ping(b"x")
            srv.proc.send_signal(signal.SIGTERM)
            self.assertEqual(srv.proc.wait(timeout=10), 0)
            out = srv.output()
        finally:
            srv.stop()
        self.assertIn("stopped", out)
        self.assertNotIn("accept failed", out)

    def test_a_start_below_the_descriptors_needed_warns(self):
        srv = self.server("--max-connections", str(1 << 20), "--workers", "2")
        try:
            with srv.client() as c:
                c.ping(b"up")
            out = srv.output()
        finally:
            self.assertEqual(srv.stop(), 0)
        self.assertIn("file descriptor limit", out)
        self.assertIn("--max-connections 1048576 need", out)


class ConnectionsUring(Connections, unittest.TestCase):
    extra = ()


class ConnectionsEpoll(Connections, unittest.TestCase):
    extra = ("--force-epoll",)


if __name__ == "__main__":
    unittest.main()
