#!/usr/bin/env python3
"""hostile_peers.py — the hostile client mix of issue 15, and the benchmark that runs beside it.

HostilePeers drives, from one thread and one epoll selector, every peer a well-behaved client must
not pay for:
  pipeliner  64 sockets (SO_RCVBUF 4 KiB) that send pipelined PREDICTs of 4,096 items (8 KiB
             asked, 16 KiB answered) while the socket takes them and never read: unbounded,
             their queued answers (64 x --max-inflight 128 x 16 KiB = 128 MiB) would be many
             times the output caps;
  idle       3,000 sockets that connect and send nothing;
  loris      8 sockets that send a PREDICT header announcing 1,000 payload bytes, then one
             byte per second;
  garbage    8 sockets that send 4 KiB of random bytes and read what comes back.
A peer the server closes (or refuses) connects again after a pause, so the mix lasts as long as
it runs; the pauses are long enough that the refusals, evictions and reaps of the server stay
countable and the driver takes little CPU.  stats() says what each kind saw.

FLAGS are the server settings of both the integration test (tests/integration/test_hostile.py)
and this benchmark: two workers, per-worker caps small enough that "RSS under the caps" is a
real check, and timeouts short enough that reaping happens within the run.  supported_flags()
drops the ones a tlserve binary does not know (and names them) so the mix can be run against an
older binary.

Run as a program it is the benchmark behind server/bench/hostile.sh: tlgen at a steady rate
without hostile peers, then with them, on one server; one line per phase, the p99 ratio, and the
peak RSS (VmHWM) against the caps.  Standard library only.
"""

import errno
import heapq
import os
import random
import re
import resource
import selectors
import socket
import struct
import sys
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "codec", "python"))
import tlserve  # noqa: E402  (the client package, codec/python, not installed)

MsgType = tlserve.MsgType

WORKERS = 2
MAX_INPUT_BYTES = 4 << 20   # per worker
MAX_OUTPUT_BYTES = 8 << 20  # per worker
IDLE_TIMEOUT_MS = 4000
SEND_TIMEOUT_MS = 2000
FRAME_TIMEOUT_MS = 2000
DRAIN_S = 5.0               # tlserve's drain deadline after SIGTERM
# RSS may pass (RSS at start + WORKERS x (MAX_INPUT_BYTES + MAX_OUTPUT_BYTES)) by this much: the
# connections' own state (2 x 1,024 slots), the sockets' receive buffers in flight and allocator
# slack.  Well under what one uncapped pipeliner wave queues (128 MiB).
RSS_SLACK = 48 << 20
FLAGS = ["--workers", str(WORKERS),
         "--max-input-bytes", str(MAX_INPUT_BYTES),
         "--max-output-bytes", str(MAX_OUTPUT_BYTES),
         "--idle-timeout-ms", str(IDLE_TIMEOUT_MS),
         "--send-timeout-ms", str(SEND_TIMEOUT_MS),
         "--frame-timeout-ms", str(FRAME_TIMEOUT_MS)]

PIPELINERS = 64
IDLE = 3000
LORIS = 8
GARBAGE = 8
PIPELINE_ITEMS = 4096
FDS_NEEDED = IDLE + PIPELINERS + LORIS + GARBAGE + 512  # + tlgen, the checker, Python itself

# pauses before a closed peer connects again (seconds, +-50% at random)
AGAIN = {"pipeliner": 1.0, "idle": 3.0, "loris": 0.5, "garbage": 0.25}

# tlgen's well-behaved workload (small requests: the host has 2 cores shared with others)
TLGEN_RATE = 200
TLGEN_WORKLOAD = ["--items", "50", "--shared", "50", "--per-item", "10", "--connections", "4"]


def supported_flags(tlserve_exe, flags=FLAGS):
    """(the flags of `flags` that `tlserve --help` lists, with their values; the names it lacks)."""
    import subprocess
    text = subprocess.run([tlserve_exe, "--help"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=30).stdout
    known = set(re.findall(r"^\s+(--[a-z0-9-]+)", text, re.M))
    kept, missing = [], []
    for name, value in zip(flags[::2], flags[1::2]):
        if name in known:
            kept += [name, value]
        else:
            missing.append(name)
    return kept, missing


def raise_nofile(need=FDS_NEEDED):
    """Raises this process's RLIMIT_NOFILE soft limit to `need`.  Returns None, or why it cannot."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return None
    if hard != resource.RLIM_INFINITY and hard < need:
        return "RLIMIT_NOFILE hard limit %d is below the %d descriptors the hostile mix needs" % (
            hard, need)
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return None


def warm(port, model, key, conns=8):
    """Answers the hostile mix's largest request (PIPELINE_ITEMS items) on `conns` connections, read
    back as a good client would, so that every worker has touched what its largest request needs
    (the decode arena, the scratch, a full output buffer, the provided receive buffers) before
    RSS "at start" is taken: the caps bound what the hostile peers add on top of that."""
    shared = [key(i) for i in range(8)]
    for _ in range(conns):
        with tlserve.Client("127.0.0.1", port, timeout=10) as c:
            c.predict(model, shared, [[] for _ in range(PIPELINE_ITEMS)])


def status_kib(pid, field):
    """A field of /proc/PID/status in KiB (VmRSS, VmHWM)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError("%s not in /proc/%d/status" % (field, pid))


def parse_metrics(text):
    """/metrics text -> {sample name with its labels as printed: value}."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


class _Peer:
    __slots__ = ("kind", "sock", "out", "off", "left", "gen")

    def __init__(self, kind):
        self.kind, self.sock, self.out, self.off, self.left = kind, None, b"", 0, 0
        self.gen = 0  # connections so far: a timer of an earlier connection is stale


class HostilePeers:
    """The mix, on a thread of its own: start(), then stop() (closes every socket).

    HostilePeers(port, model, key): `key(i)` gives model keys for the pipeliners' shared block."""

    def __init__(self, port, model, key, pipeliners=PIPELINERS, idle=IDLE, loris=LORIS,
                 garbage=GARBAGE):
        self.port = port
        self.counts = {"%s_%s" % (k, e): 0 for k in AGAIN for e in ("connects", "closed")}
        self.counts.update(pipeliner_bytes_sent=0, idle_error_frames=0, loris_bytes_sent=0,
                           garbage_error_frames=0, connect_failures=0)
        self._sel = selectors.DefaultSelector()
        self._timers = []  # heap of (when, seq, peer, the peer's gen when it was set)
        self._seq = 0
        self._rng = random.Random(42)
        self._stop = threading.Event()
        self._thread = None
        self._peers = ([_Peer("pipeliner") for _ in range(pipeliners)]
                       + [_Peer("idle") for _ in range(idle)]
                       + [_Peer("loris") for _ in range(loris)]
                       + [_Peer("garbage") for _ in range(garbage)])
        predict = tlserve.encode_predict(model, [key(i) for i in range(8)],
                                         [[] for _ in range(PIPELINE_ITEMS)])
        self._burst = b"".join(tlserve.encode_frame(MsgType.PREDICT, rid, predict)
                               for rid in range(1, 33))
        self._loris_header = tlserve.pack_header(MsgType.PREDICT, 1, 1000)
        self.error = None  # an exception that ended the driver thread

    # ---- the driver thread ---------------------------------------------------------------

    def start(self):
        now = time.monotonic()
        for p in self._peers:
            self._at(now, p)
        self._thread = threading.Thread(target=self._run, name="hostile-peers", daemon=True)
        self._thread.start()

    def stop(self):
        """Stops the driver and closes every socket.  Returns stats()."""
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=30)
        for p in self._peers:
            if p.sock:
                try:
                    self._sel.unregister(p.sock)
                except (KeyError, ValueError):
                    pass
                p.sock.close()
                p.sock = None
        self._sel.close()
        return self.stats()

    def stats(self):
        s = dict(self.counts)
        s["open"] = {k: sum(1 for p in self._peers if p.kind == k and p.sock) for k in AGAIN}
        return s

    def _at(self, when, peer):
        self._seq += 1
        heapq.heappush(self._timers, (when, self._seq, peer, peer.gen))

    def _run(self):
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                while self._timers and self._timers[0][0] <= now:
                    _, _, p, gen = heapq.heappop(self._timers)
                    if gen != p.gen:
                        continue
                    if p.sock is None:
                        self._connect(p)
                    elif p.kind == "loris":
                        self._loris_byte(p)
                wait = 0.1 if not self._timers else min(0.1, max(0.0, self._timers[0][0] - now))
                for key, mask in self._sel.select(wait):
                    p = key.data
                    if p.sock is None:
                        continue
                    if mask & selectors.EVENT_WRITE:
                        self._writable(p)
                    if p.sock is not None and mask & selectors.EVENT_READ:
                        self._readable(p)
        except BaseException as e:  # the test reports it; the thread must not die silently
            self.error = e

    def _connect(self, p):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if p.kind == "pipeliner":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setblocking(False)
        err = s.connect_ex(("127.0.0.1", self.port))
        if err not in (0, errno.EINPROGRESS):
            s.close()
            self.counts["connect_failures"] += 1
            self._at(time.monotonic() + self._again(p), p)
            return
        p.sock, p.off, p.left = s, 0, 0
        self.counts[p.kind + "_connects"] += 1
        if p.kind == "pipeliner":
            p.out = self._burst
            self._sel.register(s, selectors.EVENT_WRITE, p)
        elif p.kind == "idle":
            self._sel.register(s, selectors.EVENT_READ, p)
        elif p.kind == "loris":
            p.out = self._loris_header
            self._sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, p)
        else:
            p.out = b"\0" + os.urandom(4095)  # never "TLW1"
            self._sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, p)

    def _close(self, p):
        self._sel.unregister(p.sock)
        p.sock.close()
        p.sock = None
        p.gen += 1
        self.counts[p.kind + "_closed"] += 1
        self._at(time.monotonic() + self._again(p), p)

    def _again(self, p):
        """The pause before p connects again: AGAIN[kind] +-50%, so peers the server closed
        together do not come back together."""
        return AGAIN[p.kind] * self._rng.uniform(0.5, 1.5)

    def _send(self, p, data):
        try:
            n = p.sock.send(data)
        except BlockingIOError:
            return 0
        except OSError:
            self._close(p)
            return -1
        self.counts[p.kind + "_bytes_sent"] = self.counts.get(p.kind + "_bytes_sent", 0) + n
        return n

    def _writable(self, p):
        if p.kind == "pipeliner":  # as much as the socket takes, for ever
            while p.sock is not None:
                n = self._send(p, memoryview(p.out)[p.off:])
                if n <= 0:
                    return
                p.off = (p.off + n) % len(p.out)
            return
        n = self._send(p, memoryview(p.out)[p.off:])
        if n < 0:
            return
        p.off += n
        if p.off == len(p.out):  # header or garbage out: now only read
            self._sel.modify(p.sock, selectors.EVENT_READ, p)
            if p.kind == "loris":
                p.left = 1000
                self._at(time.monotonic() + 1.0, p)

    def _loris_byte(self, p):
        if p.left > 0 and self._send(p, b"\0") > 0:
            p.left -= 1
            self._at(time.monotonic() + 1.0, p)

    def _readable(self, p):
        try:
            data = p.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(p)
            return
        if data[:4] == tlserve.MAGIC and len(data) >= tlserve.HEADER_SIZE and \
                data[5] == MsgType.ERROR and p.kind in ("idle", "garbage"):
            self.counts[p.kind + "_error_frames"] += 1


# ---- the benchmark -------------------------------------------------------------------------


def tlgen_run(tlgen, port, model, key_space, duration, rate=TLGEN_RATE, warmup=1):
    """One steady tlgen run; returns (exit code, its output, the JSON of its last line)."""
    import json
    import subprocess
    r = subprocess.run([tlgen, "--port", str(port), "--model", model, "--rate", str(rate),
                        "--duration", str(duration), "--warmup", str(warmup), "--json",
                        "--key-space", str(key_space), "--seed", "42", *TLGEN_WORKLOAD],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=duration + warmup + 60)
    lines = r.stdout.strip().splitlines()
    try:
        doc = json.loads(lines[-1])
    except (IndexError, ValueError):
        doc = None
    return r.returncode, r.stdout, doc


def phase_line(name, doc):
    line = ("%-22s p50 %8.0f us  p99 %8.0f us  max %8.0f us  ok %d/%d  errors %d  disconnects %d"
            % (name, doc["p50_us"], doc["p99_us"], doc["max_us"], doc["ok"], doc["scheduled"],
               doc["errors"], doc["disconnects"]))
    if doc["errors"]:
        line += " (%s)" % ", ".join("%s %d" % kv for kv in doc["errors_by_code"].items() if kv[1])
    if not doc["valid"]:
        line += "  INVALID: " + doc["invalid_reason"]
    return line


def bench(argv):
    global PIPELINE_ITEMS
    import argparse
    import shutil
    import signal
    sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
    import harness

    ap = argparse.ArgumentParser(description="tlgen p50/p99 without and with the hostile mix")
    ap.add_argument("--duration", type=int, default=20, help="measured seconds per phase")
    ap.add_argument("--rate", type=int, default=TLGEN_RATE)
    ap.add_argument("--force-epoll", action="store_true", help="tlserve's epoll data plane")
    ap.add_argument("--pipeliners", type=int, default=PIPELINERS,
                    help="peers that pipeline and never read (0: the rest of the mix alone)")
    ap.add_argument("--pipeline-items", type=int, default=PIPELINE_ITEMS,
                    help="items per pipelined PREDICT (what each costs the server to score)")
    a = ap.parse_args(argv)
    PIPELINE_ITEMS = a.pipeline_items
    tlgen = os.path.join(harness.BUILD, "loadgen", "tlgen")
    harness.require(harness.TLSERVE, harness.TLSYNTH, tlgen)
    why = raise_nofile()
    if why:
        sys.exit("hostile: " + why)
    flags, missing = supported_flags(harness.TLSERVE)
    if a.force_epoll:
        flags.append("--force-epoll")
    keys = 20000
    tmp, model_dir = harness.temp_model("tlhostile", keys, "ctr")
    srv = peers = None
    try:
        srv = harness.Server(model_dir, *flags)
        warm(srv.port, "ctr", harness.model_key)
        start_kib = status_kib(srv.proc.pid, "VmRSS")
        print("tlserve %s" % " ".join(flags))
        if missing:
            print("  (this binary lacks %s: run without them)" % ", ".join(missing))
        def cpu():  # (tlserve's CPU seconds, this process's: the hostile driver's)
            t = os.times()
            return harness.cpu_seconds(srv.proc.pid), t.user + t.system

        c0 = cpu()
        rc, out, base = tlgen_run(tlgen, srv.port, "ctr", keys, a.duration, a.rate)
        if base is None:
            sys.exit("hostile: tlgen printed no JSON (exit %d):\n%s" % (rc, out))
        c1 = cpu()
        print(phase_line("without hostile peers", base)
              + "  cpu/s: tlserve %.2f" % ((c1[0] - c0[0]) / (a.duration + 1)), flush=True)
        # The floor: the same hostile mix against ANOTHER tlserve on this machine (a decoy) while
        # tlgen talks to this one.  What the mix costs the machine (its traffic, the decoy's work,
        # the driver) shows here; what this server's handling of it adds shows in the next phase.
        decoy = harness.Server(model_dir, *flags)
        try:
            peers = HostilePeers(decoy.port, "ctr", harness.model_key, pipeliners=a.pipeliners)
            peers.start()
            time.sleep(1.5)
            rc, out, floor = tlgen_run(tlgen, srv.port, "ctr", keys, a.duration, a.rate)
            if floor is None:
                sys.exit("hostile: tlgen printed no JSON (exit %d):\n%s" % (rc, out))
            print(phase_line("floor: peers on a decoy", floor)
                  + "  cpu/s: decoy tlserve %.2f"
                  % (harness.cpu_seconds(decoy.proc.pid) / (a.duration + 2.5)), flush=True)
        finally:
            if peers:
                peers.stop()
                peers = None
            decoy.stop()
        peers = HostilePeers(srv.port, "ctr", harness.model_key, pipeliners=a.pipeliners)
        peers.start()
        time.sleep(1.5)  # the idle sockets are in (and idle for a second) before tlgen connects
        c1 = cpu()
        rc, out, hostile = tlgen_run(tlgen, srv.port, "ctr", keys, a.duration, a.rate)
        if hostile is None:
            sys.exit("hostile: tlgen printed no JSON (exit %d):\n%s" % (rc, out))
        c2 = cpu()
        print(phase_line("with hostile peers", hostile)
              + "  cpu/s: tlserve %.2f, hostile driver %.2f"
              % ((c2[0] - c1[0]) / (a.duration + 1), (c2[1] - c1[1]) / (a.duration + 1)))
        if hostile["ok"] and not hostile["errors"]:
            print("p99 with/without: %.2f (target <= 1.5); with/floor: %.2f"
                  % (hostile["p99_us"] / max(base["p99_us"], 1.0),
                     hostile["p99_us"] / max(floor["p99_us"], 1.0)))
        else:
            print("p99 with/without: not comparable: %d of %d requests failed with the hostile "
                  "peers" % (hostile["errors"], hostile["scheduled"]))
        hwm_kib = status_kib(srv.proc.pid, "VmHWM")
        caps = WORKERS * (MAX_INPUT_BYTES + MAX_OUTPUT_BYTES)
        print("peak RSS (VmHWM) %.1f MiB; bound: start RSS %.1f MiB + workers x (max-input + "
              "max-output) %.0f MiB + slack %.0f MiB = %.1f MiB"
              % (hwm_kib / 1024, start_kib / 1024, caps / 2**20, RSS_SLACK / 2**20,
                 start_kib / 1024 + (caps + RSS_SLACK) / 2**20))
        m = parse_metrics(srv.metrics())
        reaped = {k: v for k, v in m.items() if "refused" in k or "reaped" in k}
        print("server: %s" % (", ".join("%s %d" % kv for kv in sorted(reaped.items()))
                              or "no refused/reaped metrics"))
        st = peers.stats()
        print("peers: %s" % ", ".join("%s %s" % kv for kv in sorted(st.items())))
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        try:
            rc = srv.proc.wait(timeout=DRAIN_S + 10)
        except Exception:
            rc = None
        print("SIGTERM with the peers connected: exit %s after %.1f s"
              % (rc, time.monotonic() - t0))
    finally:
        if peers:
            peers.stop()
        if srv:
            srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    bench(sys.argv[1:])
