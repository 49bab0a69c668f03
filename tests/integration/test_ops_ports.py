"""Start-up and shutdown around the ports: the real tlserve on loopback.

- A data port that cannot be bound makes tlserve exit 1 at once, every time, naming the address
  (it must never hang in the admin plane's shutdown).
- The data port belongs to one process: a second tlserve on it exits 1 with "address in use",
  and the first keeps serving.
- /healthz and /readyz answer 503 from the moment draining starts (SIGTERM), while a peer that
  does not read keeps the drain open.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts codec/python on sys.path)
import tlserve  # noqa: E402
from harness import TLSERVE, TLSYNTH, free_port, http, model_key, require  # noqa: E402

MODEL = "ops"
KEYS = 5000


def setUpModule():
    global TMP, MODEL_DIR
    require(TLSERVE, TLSYNTH)
    TMP, MODEL_DIR = harness.temp_model("tlserve-ops-", KEYS, MODEL)


def tearDownModule():
    import shutil
    shutil.rmtree(TMP, ignore_errors=True)


def send_quietly(sock, data):
    try:
        sock.sendall(data)
    except OSError:
        pass


def admin_port_besides(port):
    p = free_port()
    while p == port:
        p = free_port()
    return p


class DataPortTaken(unittest.TestCase):
    def test_exits_1_every_time(self):
        """A plain listening socket holds the data port: 10 starts, each exits 1 within 10 s and
        says which address it could not listen on."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as hold:
            hold.bind(("127.0.0.1", 0))
            hold.listen(8)
            port = hold.getsockname()[1]
            for i in range(10):
                admin = admin_port_besides(port)
                try:
                    r = subprocess.run([TLSERVE, "--port", str(port), "--admin-port", str(admin),
                                        "--workers", "2"],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, errors="replace", timeout=10)
                except subprocess.TimeoutExpired:
                    self.fail("run %d: tlserve still running 10 s after it could not bind "
                              "127.0.0.1:%d" % (i, port))
                self.assertEqual(r.returncode, 1, "run %d: %s" % (i, r.stdout))
                self.assertIn("127.0.0.1:%d" % port, r.stdout)


class SecondServer(unittest.TestCase):
    def test_second_on_same_port_refused(self):
        first = harness.Server(MODEL_DIR, "--workers", "2")
        try:
            admin = admin_port_besides(first.port)
            while admin == first.admin_port:
                admin = admin_port_besides(first.port)
            try:
                r = subprocess.run([TLSERVE, "--model", MODEL_DIR, "--port", str(first.port),
                                    "--admin-port", str(admin), "--workers", "2"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   errors="replace", timeout=20)
            except subprocess.TimeoutExpired:
                self.fail("a second tlserve on data port %d kept running" % first.port)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("address in use", r.stdout.lower())
            self.assertIn("127.0.0.1:%d" % first.port, r.stdout)
            # The first one still serves, on every new connection.
            for _ in range(20):
                with first.client() as c:
                    res = c.predict(MODEL, [model_key(0)], [[model_key(1)]])
                    self.assertEqual(len(res.scores), 1)
            self.assertEqual(http(first.admin_port, "/readyz")[0], 200)
        finally:
            self.assertEqual(first.stop(timeout=20), 0, first.output())


class DrainingNotHealthy(unittest.TestCase):
    def test_health_503_while_draining(self):
        srv = harness.Server(MODEL_DIR, "--workers", "1")
        peer = None
        try:
            self.assertEqual(srv.get("/healthz")[0], 200)
            # A peer that pipelines requests and never reads: its answers back up, so the drain
            # has output it cannot finish.
            peer = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
            peer.connect(("127.0.0.1", srv.port))
            # 4,096 items a request: 16 KiB of scores an answer, so the backlog outgrows the
            # kernel's socket buffers (tcp_wmem max, 4 MiB by default).
            items = [[model_key(i)] for i in range(4096)]
            payload = tlserve.encode_predict(MODEL, [model_key(KEYS - 1)], items)
            frame = b"".join(tlserve.encode_frame(tlserve.MsgType.PREDICT, rid, payload)
                             for rid in range(1, 65))
            # From a thread: the server may stop reading this peer (back-pressure), so the send
            # may block until the peer is closed below.
            sender = threading.Thread(target=send_quietly, args=(peer, frame * 16), daemon=True)
            sender.start()
            time.sleep(1.0)
            srv.proc.send_signal(signal.SIGTERM)
            seen = {}
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and len(seen) < 2 and srv.proc.poll() is None:
                for path in ("/healthz", "/readyz"):
                    try:
                        if http(srv.admin_port, path, timeout=2.0)[0] == 503:
                            seen[path] = True
                    except OSError:
                        pass
                time.sleep(0.02)
            self.assertEqual(sorted(seen), ["/healthz", "/readyz"],
                             "not both 503 before exit (exit %s): %s"
                             % (srv.proc.poll(), srv.output()))
        finally:
            if peer:
                peer.close()
            srv.stop(timeout=30)


if __name__ == "__main__":
    unittest.main()
