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


def thread_sigblk(pid):
    """{tid: blocked signal mask} of every thread of pid."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if line.startswith("SigBlk:"):
                        out[int(tid)] = int(line.split()[1], 16)
        except FileNotFoundError:
            pass  # the thread ended meanwhile
    return out


class SecondSigterm(unittest.TestCase):
    """A second SIGTERM during the drain is ignored: exit 0, not death by the signal."""

    def test_every_thread_blocks_the_stop_signals(self):
        srv = harness.Server(MODEL_DIR, "--workers", "1")
        try:
            want = (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGINT - 1))
            masks = thread_sigblk(srv.proc.pid)
            self.assertGreater(len(masks), 1, masks)
            for tid, mask in masks.items():
                if tid == srv.proc.pid:
                    continue  # main: in sigwait(), which unblocks them while it waits
                self.assertEqual(mask & want, want,
                                 "thread %d does not block SIGTERM/SIGINT (SigBlk %x)"
                                 % (tid, mask))
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_second_sigterm_during_the_drain(self):
        # The epoll driver holds the drain open for its deadline while a peer does not read.
        srv = harness.Server(MODEL_DIR, "--workers", "1", "--force-epoll",
                             "--max-inflight", "4096", "--max-unsent-bytes", str(1 << 30))
        sock = socket.socket()
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", srv.port))
            # 16 KB answers: 800 are far more than the socket buffers hold.  Sending stops
            # early if the server stops reading (back-pressure): its queue is full then.
            sock.settimeout(2)
            big = tlserve.encode_frame(MsgType.PREDICT, 1, tlserve.encode_predict(
                MODEL, [model_key(0)], [[model_key(1 + i)] for i in range(4096)]))
            try:
                for _ in range(800):
                    sock.sendall(big)
            except socket.timeout:
                pass
            deadline = time.monotonic() + 20
            while srv.metric("tlserve_bytes_out_total") < 8 << 20:
                self.assertLess(time.monotonic(), deadline, "answers were not queued")
                time.sleep(0.05)
            srv.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            self.assertIsNone(srv.proc.poll(), "drain ended before the second SIGTERM")
            srv.proc.send_signal(signal.SIGTERM)
            try:
                rc = srv.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                rc = None
            self.assertEqual(rc, 0, srv.output())
        finally:
            sock.close()
            srv.stop()


class AdminToken(unittest.TestCase):
    """The admin token from --admin-token-file or TLSERVE_ADMIN_TOKEN; --admin-token warned."""

    def load_status(self, srv, token):
        """Status of a load call with `token` (a body the API refuses, so nothing loads):
        401/403 when the token is refused, 400 when it was taken."""
        headers = {"Content-Type": "application/json", "Authorization": "Bearer " + token}
        return harness.http(srv.admin_port, "/v1/models/%s:load" % MODEL, "POST", b"{}",
                            headers)[0]

    def test_token_file(self):
        d = tempfile.mkdtemp(prefix="tlserve-token-")
        try:
            path = os.path.join(d, "token")
            with open(path, "w") as f:
                f.write("from-a-file\n")
            os.chmod(path, 0o600)
            srv = harness.Server(None, "--admin-token-file", path, wait="/healthz")
            try:
                self.assertEqual(self.load_status(srv, "wrong"), 401)
                self.assertEqual(self.load_status(srv, "from-a-file"), 400)
                self.assertNotIn("readable by", srv.output())
            finally:
                self.assertEqual(srv.stop(), 0)
            os.chmod(path, 0o644)
            srv = harness.Server(None, "--admin-token-file", path, wait="/healthz")
            try:
                self.assertIn("readable by every local user", srv.output())
            finally:
                self.assertEqual(srv.stop(), 0)
            rc, err = run_tlserve("--admin-token-file", path, "--admin-token", "x")
            self.assertEqual(rc, 2, err)
            for text in ("", "\n"):
                with open(path, "w") as f:
                    f.write(text)
                rc, err = run_tlserve("--admin-token-file", path)
                self.assertEqual(rc, 2, err)
                self.assertIn("empty", err)
            rc, err = run_tlserve("--admin-token-file", os.path.join(d, "none"))
            self.assertEqual(rc, 2, err)
            self.assertIn("cannot open", err)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_token_from_environment(self):
        os.environ["TLSERVE_ADMIN_TOKEN"] = "from-the-env"
        try:
            srv = harness.Server(None, wait="/healthz")
        finally:
            del os.environ["TLSERVE_ADMIN_TOKEN"]
        try:
            self.assertEqual(self.load_status(srv, "wrong"), 401)
            self.assertEqual(self.load_status(srv, "from-the-env"), 400)
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_token_on_the_command_line_is_warned(self):
        srv = harness.Server(None, token="on-argv", wait="/healthz")
        try:
            self.assertEqual(self.load_status(srv, "on-argv"), 400)
            self.assertIn("/proc/PID/cmdline", srv.output())
        finally:
            self.assertEqual(srv.stop(), 0)


class LoadThreads(unittest.TestCase):
    """By default loads get the cores the workers and lookup helpers leave, at least 1."""

    def threads_logged(self, *flags):
        srv = harness.Server(MODEL_DIR, *flags)
        try:
            for line in srv.output().splitlines():
                if "model loads use" in line:
                    return int(line.split("model loads use ")[1].split()[0])
            self.fail("no 'model loads use N threads' line: " + srv.output())
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_default_leaves_the_workers_their_cores(self):
        cores = len(os.sched_getaffinity(0))
        self.assertEqual(self.threads_logged(), 1)  # one worker per core by default
        self.assertEqual(self.threads_logged("--workers", "1"), max(1, cores - 1))
        self.assertEqual(self.threads_logged("--workers", "1", "--lookup-threads", "1"),
                         max(1, cores - 2))

    def test_flag_overrides(self):
        self.assertEqual(self.threads_logged("--workers", "1", "--load-threads", "3"), 3)


if __name__ == "__main__":
    unittest.main()
