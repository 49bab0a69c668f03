"""Shared plumbing of the integration tests (test_server, test_admin, test_tlgen, test_redis_peer).

Where the built binaries are (TL_BUILD_DIR, default <repo>/build), free loopback ports, the key
function of `tlsynth model` (so tests can ask for keys the model holds), generating a model with
tlsynth, a child process whose output goes to a file (Proc), and Server: the real tlserve on free
loopback ports, up on /readyz, its admin plane and /metrics read over HTTP, stopped by SIGTERM.
The kill -9 tests' two steps (train_until_killed, replayed_positions) are here too, shared by
every model kind's.  Standard library only; nothing here asserts anything about tlserve beyond
"it came up" (and, for those two, "it was killed", "it replayed").
"""

import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "codec", "python"))
import tlserve  # noqa: E402  (the client package, codec/python, not installed)
from tlserve.wire import MsgType  # noqa: E402

BUILD = os.path.abspath(os.environ.get("TL_BUILD_DIR") or os.path.join(REPO, "build"))
TLSERVE = os.path.join(BUILD, "server", "tlserve")
TLSNAP = os.path.join(BUILD, "store", "tlsnap")
TLSYNTH = os.path.join(BUILD, "model", "tlsynth")

SEED = 42  # the tlsynth model seed the tests use
PHI = 0x9E3779B97F4A7C15
M64 = (1 << 64) - 1


# deploy/test.sh (and so CI) sets TL_TESTS_STRICT=1: it installs and builds everything, so a test
# that would skip for a missing program or package fails there instead of passing in silence; so
# does one missing a shared data set, unless the data sets are absent altogether (a clone without
# ../shared beside it). Skips for what a host legitimately lacks (a sanitizer build's RSS,
# CAP_SYS_NICE) stay skips: they call unittest's skipTest directly.
STRICT = os.environ.get("TL_TESTS_STRICT") == "1"
SHARED_DATA = os.environ.get("TL_SHARED_DATA") or os.path.join(REPO, "..", "shared", "data")


def missing(why, data=False):
    """A dependency of the calling test is absent (data: a shared data set): skip the test, or
    fail it under TL_TESTS_STRICT=1."""
    if STRICT and not (data and not os.path.isdir(SHARED_DATA)):
        raise AssertionError("%s (TL_TESTS_STRICT=1: deploy/test.sh installs and builds every "
                             "dependency, so a test does not skip for one)" % why)
    raise unittest.SkipTest(why)


def needs(ok, why, data=False):
    """A class or test decorator: the decorated runs when ok, else missing(why, data) at its
    start."""
    def deco(obj):
        if ok:
            return obj
        if isinstance(obj, type):
            def set_up_class(cls):
                missing(why, data)
            obj.setUpClass = classmethod(set_up_class)
            return obj

        def wrapper(*args, **kwargs):
            missing(why, data)
        wrapper.__name__ = obj.__name__
        return wrapper
    return deco


def require(*exes):
    """missing() unless every executable exists (for a module's or class's setUp)."""
    for exe in exes:
        if not os.path.exists(exe):
            missing("%s is not built" % exe)


def free_port():
    """A free loopback port below the ephemeral range (32768 up, where the kernel picks the
    local ports of outgoing connections, the NATS tests' many among them: a port from there
    could be taken between this call and the server's bind), and below the NATS clusters'
    (natscluster.py, 21000 up)."""
    while True:
        p = random.randrange(10000, 21000)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", p))
                return p
            except OSError:
                continue


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def model_key(i, seed=SEED):
    """tlsynth model's key i (store_synthetic_key, store/synthetic.h)."""
    return mix64((i + seed * PHI) & M64)


def replica_sample(j, seed):
    """Sample j of the replica tests (test_online_bus, test_online_sync): 20 shared ids and
    8 item ids of the model made with seed, as sorted blocks."""
    shared = sorted(model_key(i, seed) for i in range(20))
    item = sorted(model_key(500 + 7 * j + i, seed) for i in range(8))
    return shared, item


def replica_frame(k, seed):
    """TRAIN frame k of the replica tests: a shared block and two labelled items."""
    shared, item = replica_sample(k % 23, seed)
    return shared, [(float(k % 3 == 0), item),
                    (float(k % 4 == 0), replica_sample(k % 13, seed)[1])]


def cpu_seconds(pid):
    """utime + stime of a whole process (every thread), from /proc/PID/stat."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def widest_predict(model):
    """A PREDICT payload of 4096 one-key items: small to send, a ~16 KB answer, so a few
    hundred unread answers are more than the loopback socket buffers hold."""
    return tlserve.encode_predict(model, [model_key(0)],
                                  [[model_key(1 + i % 1000)] for i in range(4096)])


SHARD_HEADER = 64  # shard file header bytes (store/snapshot.c)


def snapshot_records(snap):
    """Every full shard file's records (key + value bytes) of the snapshot in snap, sorted: the
    model as a comparable set, whatever the shard files' bucket order."""
    recs = []
    for name in sorted(os.listdir(snap)):
        if not name.startswith("shard-"):
            continue
        with open(os.path.join(snap, name), "rb") as f:
            data = f.read()
        entries, = struct.unpack_from("<Q", data, 32)
        size = (len(data) - SHARD_HEADER) // entries if entries else 0
        recs += [data[SHARD_HEADER + i * size:SHARD_HEADER + (i + 1) * size]
                 for i in range(entries)]
    return sorted(recs)


def sigterm_all(servers, timeout=20):
    """SIGTERM to every server of `servers` still running, each then stopped; returns one line
    per server that did not exit 0 or printed a sanitizer report, with its output's tail."""
    problems = []
    for s in servers:
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGTERM)
            try:
                rc = s.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = None
            out = s.output()
            if rc != 0 or "Sanitizer" in out or "runtime error" in out:
                problems.append("exit %s: %s" % (rc, out[-3000:]))
        s.stop()
    return problems


def gen_model(out, keys, name, version=1, seed=SEED, shards=4):
    """Writes a `tlsynth model` snapshot of `keys` keys to the directory `out`."""
    r = subprocess.run([TLSYNTH, "model", "--keys", str(keys), "--out", out, "--name", name,
                        "--version", str(version), "--seed", str(seed), "--shards", str(shards)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("tlsynth model exited with %d: %s" % (r.returncode, r.stderr))


def temp_model(prefix, keys, name, seed=SEED):
    """A new temporary directory holding a `tlsynth model` model at <dir>/<name>/1.
    Returns (directory, model directory); the caller removes the directory."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    model_dir = os.path.join(tmp, name, "1")
    try:
        gen_model(model_dir, keys, name, seed=seed)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp, model_dir


def http(port, path, method="GET", body=None, headers=None, timeout=10.0):
    """Returns (status, headers, body bytes); HTTP errors are returned, not raised."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body,
                                 method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def digest(server, model):
    """GET /v1/models/MODEL/digest: the fingerprint of every weight the model serves (a dict)."""
    status, _, body = http(server.admin_port, "/v1/models/%s/digest" % model)
    if status != 200:
        raise AssertionError("digest of %s: %d %s" % (model, status, body))
    return json.loads(body)


class Proc:
    """A child process.  Its output goes to a file: a pipe nobody reads could fill and stall it."""

    def __init__(self, argv, name=None):
        self.name = name or os.path.basename(argv[0])
        self.log = tempfile.TemporaryFile(mode="w+", errors="replace")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def output(self):
        if self.log.closed:
            return "(log closed)"
        self.log.seek(0)
        return self.log.read()

    def stop(self, timeout=10.0, check=False):
        """SIGTERM (after a SIGCONT, in case a test left it stopped), then waits `timeout` s.
        Returns the exit status, or None when it had to be killed; with check, that raises."""
        rc = self.proc.poll()
        if rc is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                rc = None
        out = self.output()
        if not self.log.closed:
            self.log.close()
        if rc is None and check:
            raise AssertionError("%s did not exit %gs after SIGTERM" % (self.name, timeout))
        # an ASan/UBSan/LeakSanitizer report fails the test whoever stops the process (a
        # tearDown that drops the exit status included)
        if "Sanitizer" in out or "runtime error:" in out:
            raise AssertionError("%s printed a sanitizer report:\n%s" % (self.name, out[-4000:]))
        return rc


class Server(Proc):
    """A running tlserve on free loopback ports (self.port, self.admin_port).

    Server(model_dir, *extra_flags, token=None, wait="/readyz", timeout=30.0): model_dir may be
    None (no --model); token sets --admin-token; unless wait is None the constructor returns
    once `wait` answers 200 on the admin port (else it stops the server and raises)."""

    def __init__(self, model_dir, *extra, token=None, wait="/readyz", timeout=30.0):
        # free_port's answer can be taken before tlserve binds it (a test running beside this
        # one): a start that failed for a port in use is tried again on new ports
        for attempt in range(4):
            self.port = free_port()
            self.admin_port = free_port()
            while self.admin_port == self.port:
                self.admin_port = free_port()
            argv = [TLSERVE]
            if model_dir:
                argv += ["--model", model_dir]
            argv += ["--port", str(self.port), "--admin-port", str(self.admin_port)]
            if token:
                argv += ["--admin-token", token]
            super().__init__(argv + list(extra), "tlserve")
            if not wait:
                return
            try:
                self.wait_up(wait, timeout)
                return
            except BaseException:
                out = self.output()
                self.stop()
                if attempt == 3 or self.proc.returncode is None or not re.search(
                        r"cannot listen on [^\n]*(address in use|Address already in use)", out):
                    raise

    def wait_up(self, path="/readyz", timeout=30.0):
        """Waits until `path` on the admin port answers 200; raises if tlserve exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("tlserve exited with %d: %s"
                                     % (self.proc.returncode, self.output()))
            try:
                if http(self.admin_port, path, timeout=1.0)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("tlserve not up on %s after %gs: %s" % (path, timeout, self.output()))

    def get(self, path):
        """GET on the admin port: (status, headers, body bytes)."""
        return http(self.admin_port, path)

    def metrics(self):
        """The /metrics text."""
        return self.get("/metrics")[2].decode()

    def metric(self, name):
        """Sum of the samples of `name` (a family, or one labelled sample)."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(name + " ") or ("{" not in name and line.startswith(name + "{")):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def client(self):
        return tlserve.Client("127.0.0.1", self.port, timeout=10)


def sync_settled(a, b, interval_ms, timeout=30):
    """Partitioned replicas a and b (Servers): waits until each has applied every message the
    other sent (rows' and the DNN MLP's DENSE messages), nothing is left in the residuals, and
    that holds over two intervals of
    interval_ms.  Returns the counters; raises AssertionError with both /metrics otherwise."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        now = (a.metric("tlserve_sync_sent_total"), b.metric("tlserve_sync_applied_total"),
               b.metric("tlserve_sync_sent_total"), a.metric("tlserve_sync_applied_total"),
               a.metric("tlserve_sync_residual_keys"), b.metric("tlserve_sync_residual_keys"),
               a.metric("tlserve_sync_dnn_sent_total"), b.metric("tlserve_sync_dnn_applied_total"),
               b.metric("tlserve_sync_dnn_sent_total"), a.metric("tlserve_sync_dnn_applied_total"))
        if now[0] == now[1] and now[2] == now[3] and now[4] == 0 and now[5] == 0 and \
                now[6] == now[7] and now[8] == now[9] and now == last:
            return now
        last = now
        time.sleep(2.5 * interval_ms / 1000)
    raise AssertionError("not settled: %s\n%s\n%s" % (last, a.metrics()[-2500:],
                                                       b.metrics()[-2500:]))


def sync_agree(a, b, scores, interval_ms, timeout=60, delta=1e-5):
    """Partitioned replicas a and b (Servers), after a restart of one: waits until neither has
    anything left in its residuals and scores(a), scores(b) (lists of floats) agree within
    delta each, and returns scores(a); raises AssertionError with both /metrics when they do
    not within timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if a.metric("tlserve_sync_residual_keys") == 0 and \
                b.metric("tlserve_sync_residual_keys") == 0:
            sa, sb = scores(a), scores(b)
            if all(abs(x - y) <= delta for x, y in zip(sa, sb)):
                return sa
        time.sleep(2.5 * interval_ms / 1000)
    raise AssertionError("never agreed: %s %s\n%s\n%s" % (scores(a)[:5], scores(b)[:5],
                                                        a.metrics()[-2500:], b.metrics()[-2500:]))


def train_until_killed(server, model, frame, first, last, kill_at, ack_every=8, pause_every=40):
    """kill -9 in the middle of training.  Sends the TRAIN frames frame(k), k in [first, last),
    to server (a Server) on one connection without waiting, reads the acknowledgements of those
    sent every ack_every frames, and SIGKILLs the server right after sending frame kill_at, so
    frames are still arriving; a 0.1 s pause every pause_every frames lets timed exports happen
    meanwhile.  Returns how many frames were acknowledged (a TRAIN_ACK read): those a restart
    must not lose.  Blocks until the server is gone; raises what the client raised if the
    connection failed before the kill, and AssertionError if frame kill_at was never sent."""
    if not first <= kill_at < last:
        raise ValueError("kill_at %d is not in [%d, %d)" % (kill_at, first, last))
    acked, rids, killed = 0, [], False
    try:
        with server.client() as c:
            for k in range(first, last):
                shared, samples = frame(k)
                rids.append(c.send_train(model, shared, samples))
                if k == kill_at:
                    os.kill(server.proc.pid, signal.SIGKILL)
                    killed = True
                if (k + 1) % ack_every == 0:
                    for rid in rids:
                        c._expect(c.wait_for(rid), MsgType.TRAIN_ACK)
                        acked += 1
                    rids = []
                if k % pause_every == 0:
                    time.sleep(0.1)
    except (OSError, tlserve.TlserveError):
        if not killed:
            raise
    if not killed:
        raise AssertionError("frame %d never sent: %s" % (kill_at, server.output()[-2000:]))
    server.proc.wait(timeout=30)
    return acked


def replayed_positions(server, timeout=20):
    """A restarted --online server's replay of its sample log: waits for the line of
    online_trainer.c that reports it and returns (samples, start, end), the records of
    positions [start, end) learned again.  Raises AssertionError with the output when no
    such line came within timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        out = server.output()
        m = re.search(r"(\d+) samples of positions (\d+)\.\.(\d+) learned again", out)
        if m:
            return tuple(int(g) for g in m.groups())
        if time.monotonic() > deadline:
            raise AssertionError("no replay of the sample log after %gs: %s" % (timeout, out))
        time.sleep(0.05)


class ServerCase(unittest.TestCase):
    """A test case whose servers (self.serve) are stopped at tearDown, and whose temporary
    directory self.tmp (TMP_PREFIX) is removed then.  SERVE_FLAGS go before each server's own
    flags: the gate's sample and the guard off, which most tests are not about."""
    TMP_PREFIX = "tl_test_"
    SERVE_FLAGS = ("--gate-sample", "0", "--guard-window-ms", "0")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix=self.TMP_PREFIX)
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def serve(self, model, *args, **kw):
        s = Server(model, *self.SERVE_FLAGS, *args, **kw)
        self.servers.append(s)
        return s

    def wait_metric(self, s, name, want, timeout=20):
        """Waits until s's metric `name` is at least want and returns it; fails the test with
        the server's output when it is not within timeout seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = s.metric(name)
            if got >= want:
                return got
            time.sleep(0.02)
        self.fail("%s stayed at %s, wanted %s: %s" % (name, s.metric(name), want, s.output()))
