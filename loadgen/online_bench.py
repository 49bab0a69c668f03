#!/usr/bin/env python3
"""online_bench.py — online learning's figures (`loadgen/bench.sh online`).

1. Online equals offline: tlserve --online serves an LR model with no keys and is sent a
   training file in file order as TRAIN frames (64 rows a frame with an empty shared block:
   the rows are learned in order); its progressive logloss (tlserve_online_logloss) is set
   beside tltrain's one-pass FTRL on the same file (`progressive logloss` of epoch 1), same
   optimizer defaults.  A TRAIN block holds its ids sorted and the file does not, so the
   sums run in another order: equal to float rounding.
2. Trainer throughput: TRAIN frames of the standard request's shape (300 shared ids, then 100
   samples of 200 ids; keys of the model) sent pipelined as fast as this client can for
   DURATION s; the trainer's rate is tlserve_online_samples_total over the window, x 500
   features a sample.  The figure is bounded by what the sender and the worker deliver on 2
   cores shared with the trainer: OVERLOADED answers say the queue was full (trainer-bound).
   Twice: ids over all the model's keys (every id a random access into tables larger than the
   caches), then over its first HOT_KEYS keys (40k: the id count of tltrain's offline figure,
   a working set that fits the caches, as a stream's popular ids do).
3. The cost of training to serving: tlgen sends the standard request at RATE req/s in phases
   of PHASE s, PHASES rounds of three kinds in a rotating order: "off" (serving alone),
   "train" (TRAIN at TRAIN_RATE samples/s, frames of 100 samples) and "burn" (a process at
   nice 19 spinning for the share of a core the trainer thread took in the round's "train"
   phase, or the previous round's: the floor, what any co-located work of that size costs
   serving on this machine).  PREDICT p99 of "train" over "off" phase by phase (the target),
   and "burn" over "off" and "train" over "burn".
4. Freshness, in phases of its own (TRAIN at TRAIN_RATE, tlgen at RATE), so that its probe's
   PREDICTs do not count in part 3: every 50 ms a PREDICT flagged LOG of two items (a fresh
   key, and a control key never trained), a FEEDBACK (label 1) for the first, then PREDICTs
   of the two items every 0.5 ms, open-loop, until an answer shows the gap between their
   logits moved (a request reads one bias for both items, so the bias's own moves cancel):
   bounds on the freshness from both sides (see probe), beside the server's own figure,
   which measures the target's quantity directly.  The probe runs in a process of its own.

Env: KEYS=10M  HOT_KEYS=40k  RATE=300  TRAIN_RATE=10000  PHASE=20  PHASES=2  DURATION=5  BUILD=build
     SERVER_ARGS="" (more tlserve options for parts 2 and 3, e.g. --online-nice 0)
     DATA=../shared/data/criteo_tiny/train.ffm  RESULTS=results/<date>_online
Prints the summary (markdown) on stdout; everything goes to RESULTS.
"""
import json
import math
import multiprocessing
import os
import queue
import random
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "codec", "python"))
import tlserve  # noqa: E402
from tlserve import MsgType  # noqa: E402

env = os.environ.get


def count(s):
    s = str(s)
    mul = {"k": 10**3, "M": 10**6, "G": 10**9}.get(s[-1:], 1)
    return int(float(s[:-1] if mul > 1 else s) * mul)


KEYS = count(env("KEYS", "10M"))
HOT_KEYS = count(env("HOT_KEYS", "40k"))  # part 2's second run: ids from this many keys
RATE = float(env("RATE", "300"))
TRAIN_RATE = float(env("TRAIN_RATE", "10000"))
SERVER_ARGS = env("SERVER_ARGS", "").split()  # more tlserve options for parts 2 and 3
PHASE = float(env("PHASE", "20"))
POLL_S = 0.0005  # the freshness probe's PREDICT every half millisecond
PHASES = int(env("PHASES", "2"))
DURATION = float(env("DURATION", "5"))
DATA = env("DATA", os.path.join(ROOT, "..", "shared", "data", "criteo_tiny", "train.ffm"))
BUILD = os.path.join(ROOT, env("BUILD", "build"))
STAMP = time.strftime("%Y-%m-%d_%H%M%S")
OUT = env("RESULTS", os.path.join(ROOT, "results", STAMP + "_online"))
M64, PHI = (1 << 64) - 1, 0x9E3779B97F4A7C15
PROCS = []


def say(msg):
    print("== " + msg, file=sys.stderr, flush=True)


def model_key(i, seed=42):
    """tlsynth's key i (store_synthetic_key, store/synthetic.h)."""
    z = (i + seed * PHI) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(admin, name):
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin, timeout=10).read()
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def serve(model_dir, *extra, log="tlserve.log"):
    port, admin = free_port(), free_port()
    f = open(os.path.join(OUT, log), "w")
    p = subprocess.Popen([os.path.join(BUILD, "server", "tlserve"), "--model", model_dir,
                          "--port", str(port), "--admin-port", str(admin), "--workers", "1",
                          "--lookup-threads", "1", "--gate-sample", "0",
                          "--guard-window-ms", "0"] + list(extra), stdout=f,
                         stderr=subprocess.STDOUT)
    PROCS.append(p)
    for _ in range(1200):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % admin, timeout=1) as r:
                if r.status == 200:
                    return p, port, admin
        except OSError:
            pass
        if p.poll() is not None:
            sys.exit("tlserve exited: see %s" % os.path.join(OUT, log))
        time.sleep(0.1)
    sys.exit("tlserve not ready")


def thread_cpu(pid, name):
    """CPU seconds (user + system) of the process's thread called name, or None."""
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                if f.read().strip() != name:
                    continue
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            continue
    return None


def stop(p):
    p.terminate()
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def wait_metric(admin, name, want, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = metric(admin, name)
        if v is not None and v >= want:
            return v
        time.sleep(0.05)
    sys.exit("%s stayed below %s" % (name, want))


# ---- 1. online equals offline -------------------------------------------------------------


def equality(work):
    empty = os.path.join(work, "empty")
    subprocess.run([os.path.join(BUILD, "model", "tlsynth"), "model", "--keys", "0", "--name",
                    "ctr", "--out", empty], check=True, stdout=subprocess.DEVNULL)
    r = subprocess.run([os.path.join(BUILD, "model", "tltrain"), "--train", DATA, "--format",
                        "libffm", "--model", "lr", "--epochs", "1"], capture_output=True,
                       text=True, check=True)
    offline = float(r.stdout.split("progressive logloss")[1].split()[0])
    rows = tlserve.libffm_rows(DATA)
    p, port, admin = serve(empty, "--online", log="tlserve_equality.log")
    with tlserve.Client("127.0.0.1", port, timeout=30) as c:
        for k in range(0, len(rows), 64):
            c.train("ctr", [], rows[k:k + 64])
    wait_metric(admin, 'tlserve_online_samples_total{model="ctr"}', len(rows))
    time.sleep(1.2)  # the trainer publishes its figures at most every second
    online = metric(admin, 'tlserve_online_logloss{model="ctr"}')
    stop(p)
    return len(rows), offline, online


# ---- 2 and 3 -------------------------------------------------------------------------------

def std_payloads(n, seed, space=None):
    """n TRAIN payloads of the standard shape, ids drawn uniformly from the model's first
    `space` keys (all of them by default)."""
    space = space or KEYS
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        shared = sorted({model_key(rnd.randrange(space)) for _ in range(300)})
        samples = [(float(rnd.random() < 0.1),
                    sorted({model_key(rnd.randrange(space)) for _ in range(200)}))
                   for _ in range(100)]
        out.append(tlserve.encode_train("ctr_lr", shared, samples))
    return out


class Trainer(threading.Thread):
    """Sends the payloads round-robin at `rate` frames/s (0: pipelined, as fast as it can)."""

    def __init__(self, port, payloads, rate):
        super().__init__(daemon=True)
        self.port, self.payloads, self.rate = port, payloads, rate
        self.stopping, self.sent, self.acked, self.refused = False, 0, 0, 0
        self.backoff = False  # OVERLOADED: wait a little before the next frame, as a client should

    def settle(self, c, rid):
        f = c.wait_for(rid)
        if f.type == MsgType.TRAIN_ACK:
            self.acked += 1
        else:
            self.refused += 1
            self.backoff = True

    def run(self):
        with tlserve.Client("127.0.0.1", self.port, timeout=60) as c:
            t0, inflight = time.time(), []
            while not self.stopping:
                if self.rate:
                    wait = t0 + self.sent / self.rate - time.time()
                    if wait > 0:
                        time.sleep(min(wait, 0.005))
                        continue
                elif self.backoff:
                    self.backoff = False
                    time.sleep(0.002)
                inflight.append(c.send_frame(MsgType.TRAIN,
                                             self.payloads[self.sent % len(self.payloads)]))
                self.sent += 1
                while len(inflight) > (16 if not self.rate else 0):
                    self.settle(c, inflight.pop(0))
            for rid in inflight:
                self.settle(c, rid)


def throughput(p, port, admin, payloads, where):
    """Part 2 on payloads (ids drawn `where`): the summary's lines."""
    t = Trainer(port, payloads, 0)
    t.start()
    time.sleep(1.0)
    s0, w0 = metric(admin, 'tlserve_online_samples_total{model="ctr_lr"}'), time.time()
    c0 = thread_cpu(p.pid, "tl-train-0")
    time.sleep(DURATION)
    s1, w1 = metric(admin, 'tlserve_online_samples_total{model="ctr_lr"}'), time.time()
    c1 = thread_cpu(p.pid, "tl-train-0")
    t.stopping = True
    t.join()
    rate = (s1 - s0) / (w1 - w0)
    busy = (c1 - c0) / (w1 - w0) if c0 is not None and c1 is not None else float("nan")
    per_cpu = rate / busy if busy > 0 else float("nan")
    say("throughput %s: %.0f samples/s, trainer on a core %.0f%% of the time, %.0f samples per "
        "trainer CPU second" % (where, rate, 100 * busy, per_cpu))
    drain(admin)
    return ["## Trainer throughput (one trainer thread, LR-FTRL), ids %s" % where,
            "", "%.0f samples/s x 500 features = **%.2fM feature updates/s** over %.1f s "
            "(frames sent %d, OVERLOADED %d: %s). The trainer thread was on a core %.0f%% of "
            "the time: **%.2fM feature updates per second of its CPU**; the rest of the 2 "
            "cores went to the worker decoding the frames, the sample log and this sender." % (
                rate, rate * 500 / 1e6, w1 - w0, t.sent, t.refused,
                "the queue was full: the trainer is the bound" if t.refused else
                "the queue never filled: the sender was the bound", 100 * busy,
                per_cpu * 500 / 1e6), ""]


def logit(p):
    p = min(max(p, 1e-12), 1 - 1e-12)
    return math.log(p / (1 - p))


def probe(port, stop_at, out):
    """Freshness probes until stop_at; each puts (lower_ms, upper_ms) into the queue out.

    Runs in a process of its own (probe_process), so that the Trainer thread's share of the
    interpreter never delays it.  Polls open-loop: after the FEEDBACK, a PREDICT of the two
    items is sent every POLL_S whatever the answers do, and the answers are read as they come
    (one connection: the server answers its frames in order).  The freshness F (the FEEDBACK's
    arrival to the first PREDICT that reflects it) is bounded from both sides, counted from
    sending the FEEDBACK: the last PREDICT whose answer does not reflect it was read by the
    server before the weights were written and after it was sent, so F is past that send
    (lower); the first whose answer reflects it was answered after they were, so F is under
    that answer's arrival here (upper: that PREDICT's own latency is in it)."""
    rnd = random.Random(7)
    with tlserve.Client("127.0.0.1", port, timeout=10) as c:
        sock = c._socket()
        while time.time() < stop_at:
            imp = rnd.randrange(1, 1 << 62)
            items = [[(1 << 63) | rnd.randrange(1 << 56)], [(3 << 62) | rnd.randrange(1 << 56)]]
            r = c.predict("ctr_lr", [], items, impression_id=imp)
            gap0 = logit(r.scores[0]) - logit(r.scores[1])
            t0 = time.perf_counter()
            fid = c.send_feedback("ctr_lr", [(imp, 0, 1.0)])
            sent, accepted, hit, last_stale = {}, None, None, t0
            next_t = t0
            while hit is None and time.perf_counter() - t0 < 5 and accepted is not False:
                now = time.perf_counter()
                if now >= next_t:
                    sent[c.send_predict("ctr_lr", [], items)] = now
                    next_t = max(next_t + POLL_S, now)  # open-loop, no catch-up bursts
                    continue
                if not select.select([sock], [], [], next_t - now)[0] and not c._rbuf:
                    continue
                f = c.recv_frame(timeout=5)
                if f.request_id == fid:
                    accepted = tlserve.feedback.decode_feedback_ack(f.payload).accepted == 1
                elif f.request_id in sent and f.type == MsgType.PREDICT_RESULT:
                    res = tlserve.wire.decode_predict_result(f.payload)
                    if abs(logit(res.scores[0]) - logit(res.scores[1]) - gap0) > 1e-9:
                        hit = ((last_stale - t0) * 1000, (time.perf_counter() - t0) * 1000)
                    else:
                        last_stale = sent[f.request_id]
                    del sent[f.request_id]
            for rid in list(sent) + ([fid] if accepted is None else []):
                f = c.wait_for(rid)  # the answers still in flight: the connection stays clean
                if rid == fid:
                    accepted = tlserve.feedback.decode_feedback_ack(f.payload).accepted == 1
            if hit and accepted:
                out.put(hit)
            time.sleep(0.05)


def probe_process(port, stop_at, out):
    """probe in a spawned process; its figures come back through the queue out."""
    proc = multiprocessing.get_context("spawn").Process(target=probe,
                                                        args=(port, stop_at, out), daemon=True)
    proc.start()
    return proc


BURNER = r"""
import os, sys, time
os.nice(19)
share, stop_at = float(sys.argv[1]), float(sys.argv[2])
while time.time() < stop_at:
    t0 = time.time()
    while time.time() - t0 < 0.01 * share:
        pass
    time.sleep(0.01 * (1 - share))
"""


def burner(share, seconds):
    """A process at nice 19 spinning for `share` of a core (10 ms periods) for `seconds`."""
    return subprocess.Popen([sys.executable, "-c", BURNER, "%.3f" % min(max(share, 0), 1),
                             "%.3f" % (time.time() + seconds)])


def tlgen(port, seconds, tag):
    f = os.path.join(OUT, "tlgen_%s.json" % tag)
    subprocess.run([os.path.join(BUILD, "loadgen", "tlgen"), "--port", str(port), "--model",
                    "ctr_lr", "--connections", "4", "--items", "200", "--shared", "300",
                    "--per-item", "200", "--key-space", str(KEYS), "--seed", "42",
                    "--rate", str(RATE), "--duration", str(seconds), "--warmup", "1", "--json"],
                   stdout=open(f, "w"), stderr=subprocess.STDOUT, check=False)
    return json.loads(open(f).read().strip().splitlines()[-1])


def drain(admin, timeout=120):
    """Waits until the trainer's queue is empty (a phase without training learns nothing)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not metric(admin, 'tlserve_online_queue_bytes{model="ctr_lr"}'):
            time.sleep(1)
            return
        time.sleep(0.2)
    sys.exit("the trainer's queue did not drain in %d s" % timeout)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(q / 100 * len(xs))) - 1)] if xs else float("nan")


def main():
    os.makedirs(OUT, exist_ok=True)
    work = tempfile.mkdtemp(prefix="tl_online_")
    L = ["# Online learning — %s" % STAMP, ""]
    try:
        n, offline, online = equality(work)
        say("equality: %d rows, tltrain %.6f, tlserve %.6f" % (n, offline, online))
        L += ["## Online equals offline (%s, %d rows in file order)" % (os.path.basename(
            os.path.dirname(DATA)) + "/" + os.path.basename(DATA), n), "",
              "| | progressive logloss |", "|---|---|",
              "| tltrain, one pass of FTRL (defaults) | %.6f |" % offline,
              "| tlserve --online, TRAIN frames in file order | %.6f |" % online,
              "| difference | %.2e |" % abs(online - offline), ""]

        model = os.path.join(work, "m")
        subprocess.run([os.path.join(BUILD, "model", "tlsynth"), "model", "--keys", str(KEYS),
                        "--name", "ctr_lr", "--seed", "42", "--out", model], check=True,
                       stdout=subprocess.DEVNULL)
        payloads = std_payloads(16, 3)
        logs = os.path.join(work, "samples")
        p, port, admin = serve(model, "--online", "--sample-log-dir", logs, *SERVER_ARGS)
        say("tlserve --online on %d keys; throughput for %g s" % (KEYS, DURATION))
        L += throughput(p, port, admin, payloads, "over all %s keys of the model" % "{:,}".format(KEYS))
        hot = min(HOT_KEYS, KEYS)
        L += throughput(p, port, admin, std_payloads(16, 4, hot),
                        "over %s of its keys (the id count of tltrain's offline figure)" %
                        "{:,}".format(hot))

        kinds = ("off", "train", "burn")
        rows, fresh, share = [], [], None
        fresh_q = multiprocessing.get_context("spawn").Queue()
        for k in range(PHASES):
            for j in range(3):
                kind = kinds[(j + k) % 3]  # round 0: off, train, burn (which needs a share)
                tr, bp = None, None
                c0 = thread_cpu(p.pid, "tl-train-0")
                if kind == "train":
                    tr = Trainer(port, payloads, TRAIN_RATE / 100)
                    tr.start()
                elif kind == "burn":
                    bp = burner(share, PHASE + 2)
                before, t0 = metric(admin, 'tlserve_online_samples_total{model="ctr_lr"}'), time.time()
                g = tlgen(port, PHASE, "%d_%s" % (k, kind))
                after, t1 = metric(admin, 'tlserve_online_samples_total{model="ctr_lr"}'), time.time()
                c1 = thread_cpu(p.pid, "tl-train-0")
                if tr:
                    tr.stopping = True
                    tr.join()
                    share = (c1 - c0) / (t1 - t0)
                if bp:
                    bp.kill()
                    bp.wait()
                rows.append((k, kind, g, (after - before) / (t1 - t0), share))
                say("round %d %s: p99 %s us, learned %.0f samples/s%s" % (
                    k, kind, g.get("p99_us"), (after - before) / (t1 - t0),
                    ", trainer on a core %.0f%% of the time" % (100 * share) if tr else ""))
                drain(admin)
        for k in range(PHASES):
            tr = Trainer(port, payloads, TRAIN_RATE / 100)
            tr.start()
            pr = probe_process(port, time.time() + PHASE, fresh_q)
            tlgen(port, PHASE, "%d_fresh" % k)
            tr.stopping = True
            tr.join()
            while True:  # read while it runs: a full pipe would keep it from exiting
                try:
                    fresh.append(fresh_q.get(timeout=1))
                except queue.Empty:
                    if not pr.is_alive():
                        break
            pr.join()
            drain(admin)
        L += ["## The cost of training to serving (tlgen %g req/s, the standard request)" % RATE,
              "", "| round | phase | learned samples/s | trainer's core share | p50 us | p99 us | "
              "p99.9 us | errors |", "|---|---|---|---|---|---|---|---|"]
        for k, kind, g, lr, sh in rows:
            L.append("| %d | %s | %.0f | %s | %.0f | %.0f | %.0f | %d |" % (
                k, kind, lr, "%.0f%%" % (100 * sh) if kind != "off" and sh is not None else "",
                g.get("p50_us", 0), g.get("p99_us", 0),
                g.get("p99.9_us", g.get("p999_us", 0)), g.get("errors", 0)))

        def p99(kind):
            return {k: g["p99_us"] for k, kd, g, _, _ in rows if kd == kind}

        off, on, burn = p99("off"), p99("train"), p99("burn")
        ks = [k for k in range(PHASES) if k in off and k in on]
        kb = [k for k in ks if k in burn]
        L += ["", "PREDICT p99, round by round: train / off %s (target at most 1.3x); burn / off "
              "%s (the floor: the same CPU spent by any process); train / burn %s." % (
                  ", ".join("%.2fx" % (on[k] / off[k]) for k in ks),
                  ", ".join("%.2fx" % (burn[k] / off[k]) for k in kb),
                  ", ".join("%.2fx" % (on[k] / burn[k]) for k in kb)), ""]
        lower_ms, upper_ms = [f[0] for f in fresh], [f[1] for f in fresh]
        L += ["## Freshness (%d probes in %d phases of training at %g samples/s beside tlgen; "
              "PREDICTs polled open-loop every %g ms)" % (
                  len(fresh), PHASES, TRAIN_RATE, POLL_S * 1000), "",
              "Target: p99 under 100 ms.  The server's own figure (a FEEDBACK's arrival to its "
              "weights written, after which every PREDICT reads them) p50 **%.2f ms**, p99 "
              "**%.2f ms**.  The probe's bounds, from sending the FEEDBACK: past the send of the "
              "last PREDICT that did not reflect it, p50 %.1f ms, p99 %.1f ms, max %.1f ms; "
              "under the answer of the first that did (that PREDICT's latency in it), p50 %.1f "
              "ms, p99 %.1f ms, max %.1f ms." % (
                  1000 * (metric(admin, 'tlserve_online_freshness_seconds{model="ctr_lr",'
                                 'quantile="0.5"}') or 0),
                  1000 * (metric(admin, 'tlserve_online_freshness_seconds{model="ctr_lr",'
                                 'quantile="0.99"}') or 0),
                  pct(lower_ms, 50), pct(lower_ms, 99), max(lower_ms, default=float("nan")),
                  pct(upper_ms, 50), pct(upper_ms, 99), max(upper_ms, default=float("nan"))),
              "", "Stalls over the whole run: worker loop rounds over 50 ms %d "
              "(`tlserve_slow_rounds_total`), sample log appends over 20 ms %d "
              "(`tlserve_online_log_slow_total`, each in tlserve.log); the starved trainer "
              "boosted to nice 0 %d times (`tlserve_online_boosts_total`)." % (
                  metric(admin, "tlserve_slow_rounds_total") or 0,
                  metric(admin, 'tlserve_online_log_slow_total{model="ctr_lr"}') or 0,
                  metric(admin, 'tlserve_online_boosts_total{model="ctr_lr"}') or 0), ""]
        stop(p)
    finally:
        for q in PROCS:
            if q.poll() is None:
                q.kill()
        shutil.rmtree(work, ignore_errors=True)
    text = "\n".join(L) + "\n"
    open(os.path.join(OUT, "summary.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
