"""Start-up and shutdown around the ports: the real tlserve on loopback.

- A data port that cannot be bound makes tlserve exit 1 at once, every time, naming the address
  (it must never hang in the admin plane's shutdown).
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


if __name__ == "__main__":
    unittest.main()
