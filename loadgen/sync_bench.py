#!/usr/bin/env python3
"""sync_bench.py — partitioned replicas' figures (`loadgen/bench.sh sync`).

The issue's targets for --bus-mode partitioned with 2 and 4 replicas: bytes on the bus at least
25x fewer than uncompressed fp32 updates for the same intervals, and progressive logloss within
+0.002 of an uncompressed exchange.

Starts a real 3-node NATS JetStream cluster (tests/integration/natscluster.py, stopped at the
end), makes an LR model with no keys (tlsynth model --keys 0: the trainer inserts), then for R in
REPLICAS and for each mode (the compressed top-k exchange as configured by default, each --sync-topk
in TOPKS, and --sync-exact: every turn every key f32, the uncompressed exchange) starts R tlserve
replicas (--online --bus-mode partitioned, a stream of their own, --sync-interval-ms
INTERVAL_MS, a sample log each) and streams the criteo file's first 90% in file order as TRAIN
frames of one sample, sample i to replica i mod R, at RATE samples/s in total.  Then it waits
until every replica learned its samples and every message one replica published was applied by
all others with nothing left in any residual (quiet turns go out exact), stable over two
intervals, and reads per replica:
  - tlserve_sync_bytes_total: the bytes of the update messages it published;
  - tlserve_sync_fp32_bytes_total: what uncompressed fp32 updates of the same turns would have
    cost (per turn, the distinct keys its trainer stepped x (8 B key + 2 x 4 B));
  - tlserve_online_logloss: its progressive logloss (each of its samples scored before learned);
  - a test logloss: PREDICT of the file's last 10% (never trained) on this replica.
Prints one table and writes RESULTS/summary.md, with the two derived figures per R: bytes ratio
(fp32-equivalent / bytes of the compressed run; also the exact run's bytes / the compressed
run's) and progressive logloss compressed minus exact.

LOCKSTEP (TURN=N > 0): instead of turns by wall time, each replica turns once every N samples
(all replicas' together, as above), the replicas' turns staggered as independent timers fall:
the bench sends N / R samples, waits until every replica learned its part, asks the next
replica in turn for a turn (POST /v1/sync:turn) and waits until every message of that turn was
applied by every other replica before it sends the next N / R; at the end, turns at every
replica until no residual is left.  Every replica then learns the same samples against the
same peer updates in every run: the logloss figures repeat to float rounding (the order in
which one replica applies its peers' messages), where turns by wall time move them run to run
by the timing of the turns.  RATE and INTERVAL_MS are then unused.

Env: DATA=the largest criteo libffm file in ../shared/data  ROWS=0 (cap, 0: all)  RATE=50
     INTERVAL_MS=200  TURN=0  REPLICAS=2,4  TOPKS="" (more --sync-topk values, each a row)
     SERVER_ARGS="" (more tlserve options for every replica)  BUILD=build
     RESULTS=results/<date>_sync
Prints the summary (markdown) on stdout; everything goes to RESULTS.
"""
import glob
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "codec", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import tlserve  # noqa: E402
import natscluster  # noqa: E402

env = os.environ.get


def largest_criteo():
    found = glob.glob(os.path.join(ROOT, "..", "shared", "data", "*criteo*", "*.ffm"))
    if not found:
        sys.exit("no criteo libffm file under ../shared/data: set DATA")
    return max(found, key=os.path.getsize)


DATA = env("DATA") or largest_criteo()
ROWS = int(env("ROWS", "0"))
RATE = float(env("RATE", "50"))
INTERVAL_MS = int(env("INTERVAL_MS", "200"))
TURN = int(env("TURN", "0"))  # > 0: lockstep turns of this many samples (all replicas)
TOKEN = "sync-bench"
REPLICAS = [int(r) for r in env("REPLICAS", "2,4").split(",") if r]
TOPKS = [t for t in env("TOPKS", "").split(",") if t]
SERVER_ARGS = env("SERVER_ARGS", "").split()
BUILD = os.path.join(ROOT, env("BUILD", "build"))
STAMP = time.strftime("%Y-%m-%d_%H%M%S")
OUT = env("RESULTS", os.path.join(ROOT, "results", STAMP + "_sync"))
PROCS = []


def say(msg):
    print("== " + msg, file=sys.stderr, flush=True)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(admin):
    return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin, timeout=10).read().decode()


def metric(admin, name, text=None):
    """The sample `name` (with its labels, if any) of admin's /metrics, or 0."""
    for line in (text or metrics(admin)).splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class Replica:
    def __init__(self, model, work, cluster, stream, name, mode_args):
        self.args = (model, work, cluster, stream, name, mode_args)
        self.start()

    def start(self):
        model, work, cluster, stream, name, mode_args = self.args
        self.port, self.admin = free_port(), free_port()
        while self.admin == self.port:
            self.admin = free_port()
        self.log = os.path.join(OUT, "tlserve_%s.log" % name)
        self.p = subprocess.Popen(
            [os.path.join(BUILD, "server", "tlserve"), "--model", model, "--port", str(self.port),
             "--admin-port", str(self.admin), "--workers", "1", "--lookup-threads", "1",
             "--gate-sample", "0", "--guard-window-ms", "0", "--online",
             "--sample-log-dir", os.path.join(work, "log_" + name), "--bus-servers", cluster.urls,
             "--bus-stream", stream, "--bus-subject-prefix", stream.lower(), "--bus-node", name,
             "--bus-mode", "partitioned", "--admin-token", TOKEN,
             "--sync-interval-ms", str(3600000 if TURN else INTERVAL_MS)]
            + mode_args + SERVER_ARGS, stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        PROCS.append(self.p)

    def ready(self, tries=3):
        """Waits until it is connected to the bus.  A start that failed (the cluster slow to
        answer the stream's info on a loaded machine) is made again, up to `tries` times."""
        for _ in range(600):
            try:
                if metric(self.admin, "tlserve_bus_connected") == 1:
                    return
            except OSError:
                pass
            if self.p.poll() is not None:
                if tries <= 1:
                    sys.exit("tlserve exited: see %s" % self.log)
                say("tlserve exited at start (%s): starting it again" % open(
                    self.log).read().strip().splitlines()[-1])
                time.sleep(1)
                self.start()
                return self.ready(tries - 1)
            time.sleep(0.1)
        sys.exit("tlserve not connected to the bus: see %s" % self.log)

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def settle(reps, shares, timeout=120):
    """Waits until every replica learned its share, applied every message the others sent,
    holds no residual, and that over two intervals.  Returns True, or False on timeout."""
    deadline, last = time.time() + timeout, None
    while time.time() < deadline:
        texts = [metrics(r.admin) for r in reps]
        sent = [metric(0, "tlserve_sync_sent_total", t) for t in texts]
        now = tuple((metric(0, 'tlserve_online_samples_total{model="ctr"}', t),
                     metric(0, "tlserve_sync_applied_total", t),
                     metric(0, "tlserve_sync_residual_keys", t), s) for t, s in zip(texts, sent))
        done = all(n[0] >= share and n[1] == sum(sent) - n[3] and n[2] == 0
                   for n, share in zip(now, shares))
        if done and now == last:
            return True
        last = now if done else None
        time.sleep(2 * INTERVAL_MS / 1000)
    return False


def wait_for(pred, what, timeout=120):
    deadline = time.time() + timeout
    while not pred():
        if time.time() > deadline:
            sys.exit("lockstep: %s did not happen in %d s" % (what, timeout))
        time.sleep(0.002)


def lockstep_turn(reps, turning=None):
    """One turn at each replica of `turning` (default: all); returns once every message of it
    was applied by all others."""
    turning = reps if turning is None else turning
    before = [metric(r.admin, "tlserve_sync_turns_total") for r in turning]
    for r in turning:
        req = urllib.request.Request("http://127.0.0.1:%d/v1/sync:turn" % r.admin, data=b"",
                                     headers={"Authorization": "Bearer " + TOKEN})
        urllib.request.urlopen(req, timeout=10).read()
    wait_for(lambda: all(metric(r.admin, "tlserve_sync_turns_total") > b
                         for r, b in zip(turning, before)), "a turn")
    sent = [metric(r.admin, "tlserve_sync_sent_total") for r in reps]
    wait_for(lambda: all(metric(r.admin, "tlserve_sync_applied_total") == sum(sent) - own
                         for r, own in zip(reps, sent)), "the turn's messages applied")


def stream_lockstep(reps, clients, train):
    """TURN samples a replica's turn; the replicas' turns staggered evenly (after every TURN / R
    samples, the next replica in turn), as independent timers would fall."""
    r, learned = len(reps), [0] * len(reps)
    step = max(TURN // r, 1)
    for k, start in enumerate(range(0, len(train), step)):
        for i in range(start, min(start + step, len(train))):
            y, ids = train[i]
            if clients[i % r].train("ctr", [], [(y, ids)]) != 1:
                sys.exit("a TRAIN frame was not accepted")
            learned[i % r] += 1
        wait_for(lambda: all(metric(rep.admin, 'tlserve_online_samples_total{model="ctr"}') >= n
                             for rep, n in zip(reps, learned)), "the turn's samples learned")
        lockstep_turn(reps, [reps[k % r]])


def drain_lockstep(reps):
    """Turns at every replica until none holds a residual after two turns in a row: the first
    sends what each learned since its last turn, and a replica's two accumulators take turns
    (tlserve_sync_residual_keys is the one just sent), so a quiet turn (sent exact) empties
    one of them and the next the other."""
    clean = 0
    for _ in range(8):
        lockstep_turn(reps)
        clean = clean + 1 if all(metric(rep.admin, "tlserve_sync_residual_keys") == 0
                                 for rep in reps) else 0
        if clean == 2:
            return True
    return False


def logloss(pairs):
    s = 0.0
    for y, p in pairs:
        p = min(max(p, 1e-7), 1 - 1e-7)
        s -= y * math.log(p) + (1 - y) * math.log(1 - p)
    return s / len(pairs)


def run(model, work, cluster, r, mode, mode_args, train, test):
    stream = "SB%d" % random.randrange(1 << 30)
    reps = [Replica(model, work, cluster, stream, "%s_r%d_%d" % (mode, r, i), mode_args)
            for i in range(r)]
    for rep in reps:
        rep.ready()
    time.sleep(0.5)  # each consumer reads the (empty) stream once before its publisher sends
    clients = [tlserve.Client("127.0.0.1", rep.port, timeout=30) for rep in reps]
    t0 = time.time()
    if TURN:
        stream_lockstep(reps, clients, train)
    for i, (y, ids) in enumerate([] if TURN else train):
        wait = t0 + i / RATE - time.time()
        if wait > 0:
            time.sleep(wait)
        if clients[i % r].train("ctr", [], [(y, ids)]) != 1:
            sys.exit("a TRAIN frame was not accepted")
    streamed = time.time() - t0
    texts = [metrics(rep.admin) for rep in reps]  # the stream's end, before the drain
    live_bytes = sum(metric(0, "tlserve_sync_bytes_total", t) for t in texts)
    live_fp32 = sum(metric(0, "tlserve_sync_fp32_bytes_total", t) for t in texts)
    live_residual = [metric(0, "tlserve_sync_residual_keys", t) for t in texts]
    shares = [len(range(i, len(train), r)) for i in range(r)]
    settled = drain_lockstep(reps) if TURN else settle(reps, shares)
    if not settled:
        say("R=%d %s: the replicas did not settle in 120 s (figures read anyway)" % (r, mode))
    time.sleep(1.2)  # the trainer publishes its logloss at most every second
    texts = [metrics(rep.admin) for rep in reps]
    row = {"r": r, "mode": mode, "settled": settled, "streamed_s": streamed,
           "live_bytes": live_bytes, "live_fp32": live_fp32, "live_residual": live_residual,
           "bytes": sum(metric(0, "tlserve_sync_bytes_total", t) for t in texts),
           "fp32": sum(metric(0, "tlserve_sync_fp32_bytes_total", t) for t in texts),
           "sent": sum(metric(0, "tlserve_sync_sent_total", t) for t in texts),
           "exact": sum(metric(0, "tlserve_sync_exact_total", t) for t in texts),
           "keys": sum(metric(0, "tlserve_sync_sent_keys_total", t) for t in texts),
           "prog": [metric(0, 'tlserve_online_logloss{model="ctr"}', t) for t in texts],
           "merge_max": max(metric(0, 'tlserve_sync_merge_max_seconds{model="ctr"}', t)
                            for t in texts),
           "bad": sum(metric(0, "tlserve_sync_gap_total", t) + metric(
               0, "tlserve_sync_refused_version_total", t) + metric(
               0, "tlserve_sync_overflow_total", t) for t in texts)}
    tests = []
    for c in clients:
        pairs = []
        for k in range(0, len(test), 100):
            part = test[k:k + 100]
            scores = c.predict("ctr", [], [ids for _, ids in part]).scores
            pairs += [(y, s) for (y, _), s in zip(part, scores)]
        tests.append(logloss(pairs))
        c.close()
    row["test"] = tests
    for rep in reps:
        rep.stop()
    say("R=%d %s: bytes %d, fp32-equivalent %d (%.2fx; at the stream's end %.2fx, residual keys "
        "then %s), %d messages (%d exact, %d keys), progressive logloss %s, test logloss %s, "
        "streamed in %.1f s; a turn's residual merge held the writer lock %.2f ms at most" % (
            r, mode, row["bytes"], row["fp32"], row["fp32"] / max(row["bytes"], 1),
            live_fp32 / max(live_bytes, 1), " ".join("%d" % x for x in live_residual), row["sent"],
            row["exact"], row["keys"], " ".join("%.5f" % x for x in row["prog"]),
            " ".join("%.5f" % x for x in tests), streamed, row["merge_max"] * 1e3))
    return row


def mean(xs):
    return sum(xs) / len(xs)


def main():
    os.makedirs(OUT, exist_ok=True)
    rows = tlserve.libffm_rows(DATA)
    if ROWS:
        rows = rows[:ROWS]
    cut = len(rows) - len(rows) // 10
    train, test = rows[:cut], rows[cut:]
    work = tempfile.mkdtemp(prefix="tl_syncb_")
    cluster = None
    modes = [("default", [])] + [("topk=" + t, ["--sync-topk", t]) for t in TOPKS] + \
            [("exact", ["--sync-exact"])]
    results = []
    try:
        cluster = natscluster.start("tl_syncb_nats_")
        model = os.path.join(work, "m")
        subprocess.run([os.path.join(BUILD, "model", "tlsynth"), "model", "--keys", "0",
                        "--name", "ctr", "--out", model], check=True, stdout=subprocess.DEVNULL)
        say("%s: %d rows trained, %d held out; %s" % (
            DATA, len(train), len(test), "lockstep, a turn every %d samples" % TURN if TURN else
            "%g samples/s, turns every %d ms" % (RATE, INTERVAL_MS)))
        for r in REPLICAS:
            for mode, args in modes:
                results.append(run(model, work, cluster, r, mode, args, train, test))
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()
                p.wait()
        if cluster:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)

    name = os.path.basename(os.path.dirname(DATA)) + "/" + os.path.basename(DATA)
    pace = ("in lockstep, a replica's turn every %d samples, staggered" % TURN
            if TURN else "%g samples/s in total (%.0f s, about %d turns of %d ms)" % (
                RATE, len(train) / RATE, len(train) / RATE * 1000 / INTERVAL_MS, INTERVAL_MS))
    L = ["# Partitioned replicas — %s" % STAMP, "",
         "%s: the first %d rows streamed in file order as TRAIN frames of one sample, sample i "
         "to replica i mod R, %s; the last %d rows held out for the test logloss.  LR-FTRL "
         "(defaults) from an empty model; a 3-node NATS JetStream cluster on loopback." % (
             name, len(train), pace, len(test)), "",
         "Bytes and fp32-equivalent bytes are the sums over the replicas, after the drain "
         "(every residual sent: quiet turns go out exact); \"at the stream's end\" is the "
         "same ratio read when the last sample was acknowledged, residuals still held.", "",
         "| R | mode | bytes on the bus | fp32-equivalent bytes | fp32 / bytes | at the "
         "stream's end | messages (exact) | keys sent | progressive logloss (mean of "
         "replicas) | test logloss (mean) |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for x in results:
        L.append("| %d | %s | %d | %d | %.2fx | %.2fx | %d (%d) | %d | %.5f | %.5f |%s" % (
            x["r"], x["mode"], x["bytes"], x["fp32"], x["fp32"] / max(x["bytes"], 1),
            x["live_fp32"] / max(x["live_bytes"], 1), x["sent"],
            x["exact"], x["keys"], mean(x["prog"]), mean(x["test"]),
            "" if x["settled"] and not x["bad"] else " (did not settle, or gaps/refusals/overflow: "
            "%d)" % x["bad"]))
    L.append("")
    for r in REPLICAS:
        ex = [x for x in results if x["r"] == r and x["mode"] == "exact"][0]
        for x in results:
            if x["r"] != r or x["mode"] == "exact":
                continue
            ratio = x["fp32"] / max(x["bytes"], 1)
            vs_exact = ex["bytes"] / max(x["bytes"], 1)
            d = mean(x["prog"]) - mean(ex["prog"])
            dt = mean(x["test"]) - mean(ex["test"])
            L.append("- R=%d, %s: bytes **%.2fx** fewer than uncompressed fp32 updates of the same "
                     "turns (target >= 25x: %s; the exact exchange's own bytes / these: %.2fx); "
                     "progressive logloss minus the exact exchange's **%+.5f** (target <= "
                     "+0.002: %s); test logloss %+.5f." % (
                         r, x["mode"], ratio, "met" if ratio >= 25 else "missed", vs_exact, d,
                         "met" if d <= 0.002 else "missed", dt))
    text = "\n".join(L) + "\n"
    open(os.path.join(OUT, "summary.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
