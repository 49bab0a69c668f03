#!/usr/bin/env python3
"""What an online export's cut of the update exchange costs (--bus-mode partitioned).

Every export takes a cut under the model's writer lock (server/online_sync_export.c): it copies
the accumulators' residual, hands the peers' keys to the export and (a DNN) copies its MLP state.
The trainer and the bus consumer wait through it; PREDICT does not take that lock.

Starts a real 3-node NATS JetStream cluster (tests/integration/natscluster.py) and, for each
residual size R in RESIDUALS and exports on (--online-export-ms EXPORT_MS) then off, two LR
replicas A and B (an empty `tlsynth model --keys 0`, --sync-max-keys 2R + 2^17, a stream of
their own, the default 1-bit top-k exchange: a turn sends 5% of the held keys, the rest stay as
residual).  A is filled with R / FIELDS tlsynth samples of FIELDS uniform fields over 2^22 values
each (about R distinct keys), then for SECONDS:
  - a sender process keeps A's trainer queue full with those samples again (the residual stays
    near R), 500 samples a TRAIN frame;
  - a second process sends B 100 samples a second (A applies peers' messages meanwhile);
  - a third PREDICTs one item of FIELDS keys on A every 5 ms and times each answer.
Reads per run: A's samples learned per second over the window (the trainer saturated: its queue
never empty), PREDICT p50/p99, and from A's log each export's cut (its writer lock hold, the
residual keys copied) and the whole hand-over's hold.  Prints a markdown table over the cuts
at the full residual (90% of the run's largest or more): one that grew the buffers is left out
once the residual grew further (it shows in the per-run line on stderr).

Run: BUILD=build python3 server/bench/sync_cut_cost.py
Env: RESIDUALS=100000,1000000  EXPORT_MS=1500  SECONDS=15  FIELDS=40  BUILD=build
"""
import multiprocessing
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "codec", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import tlserve  # noqa: E402
from tlserve.wire import MsgType, encode_frame, encode_train, train_flags  # noqa: E402
import natscluster  # noqa: E402

env = os.environ.get
RESIDUALS = [int(r) for r in env("RESIDUALS", "100000,1000000").split(",") if r]
EXPORT_MS = int(env("EXPORT_MS", "1500"))
SECONDS = float(env("SECONDS", "15"))
FIELDS = int(env("FIELDS", "40"))
BUILD = os.path.join(ROOT, env("BUILD", "build"))
FRAME = 500
PROCS = []


def say(msg):
    print("== " + msg, file=sys.stderr, flush=True)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(admin, name):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin, timeout=10).read()
    for line in text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def samples(path, n, seed):
    subprocess.run([os.path.join(BUILD, "model", "tlsynth"), "data", "--model", "lr",
                    "--samples", str(n), "--fields", str(FIELDS), "--values", "4194304",
                    "--zipf", "0", "--format", "libsvm", "--seed", str(seed), "--out", path],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            rows.append((float(parts[0]), sorted({int(t.split(":")[0]) for t in parts[1:]})))
    return rows


def frames(rows):
    return [encode_frame(MsgType.TRAIN, 1 + i // FRAME, encode_train("ctr", [], rows[i:i + FRAME]),
                         train_flags(None)) for i in range(0, len(rows), FRAME)]


def send_frames(port, data, stop, period):
    """Sends the encoded TRAIN frames in a cycle, each acknowledged before the next (an
    OVERLOADED answer: the queue is full, the trainer saturated), until stop is set."""
    c = tlserve.Client("127.0.0.1", port, timeout=60)
    i = 0
    while not stop.is_set():
        c.send_raw(data[i % len(data)])
        try:
            c.wait_for(1 + i % len(data))
        except tlserve.TlserveError:
            time.sleep(0.005)
        i += 1
        if period:
            time.sleep(period)


def predicts(port, rows, stop, out):
    c = tlserve.Client("127.0.0.1", port, timeout=60)
    lat, i = [], 0
    while not stop.is_set():
        ids = rows[i % len(rows)][1]
        t = time.perf_counter()
        c.predict("ctr", [], [ids])
        lat.append(time.perf_counter() - t)
        i += 1
        time.sleep(0.005)
    out.put(lat)


class Replica:
    def __init__(self, model, work, cluster, stream, name, args):
        self.port, self.admin = free_port(), free_port()
        repo = os.path.join(work, "repo_" + name)
        shutil.copytree(model, os.path.join(repo, "ctr", "1"))
        self.log = os.path.join(work, name + ".log")
        self.p = subprocess.Popen(
            [os.path.join(BUILD, "server", "tlserve"), "--model-repo", repo,
             "--port", str(self.port), "--admin-port", str(self.admin), "--workers", "1",
             "--gate-sample", "0", "--guard-window-ms", "0", "--load-sched-idle=false",
             "--online", "--online-nice", "0",
             "--sample-log-dir", os.path.join(work, "log_" + name),
             "--bus-servers", cluster.urls, "--bus-stream", stream, "--bus-subject-prefix",
             stream.lower(), "--bus-node", name, "--bus-mode", "partitioned"] + args,
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        PROCS.append(self.p)
        for _ in range(900):
            try:
                if metric(self.admin, "tlserve_sync_caught_up") == 1:
                    return
            except OSError:
                pass
            if self.p.poll() is not None:
                sys.exit("tlserve exited: see %s" % self.log)
            time.sleep(0.1)
        sys.exit("tlserve never read its stream: see %s" % self.log)

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(120)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def run(model, work, cluster, residual, exports, rows, trickle):
    stream = "CC%d" % random.randrange(1 << 30)
    args = ["--sync-max-keys", str(2 * residual + (1 << 17)),
            "--online-export-ms", str(EXPORT_MS if exports else 0)]
    tag = "%d_%s" % (residual, "on" if exports else "off")
    a = Replica(model, work, cluster, stream, "a" + tag, args)
    b = Replica(model, work, cluster, stream, "b" + tag, args)
    fill = frames(rows)
    with tlserve.Client("127.0.0.1", a.port, timeout=120) as c:  # the residual: ~R keys
        for i in range(0, len(rows), FRAME):
            while c.train("ctr", [], rows[i:i + FRAME]) == 0:
                time.sleep(0.01)
    deadline = time.time() + 300
    while metric(a.admin, 'tlserve_online_samples_total{model="ctr"}') < len(rows):
        if time.time() > deadline:
            sys.exit("A never learned its fill: see %s" % a.log)
        time.sleep(0.2)
    time.sleep(2 * EXPORT_MS / 1000 if exports else 2)  # the fill's exports and turns pass
    logged = os.path.getsize(a.log)
    stop, out = multiprocessing.Event(), multiprocessing.Queue()
    workers = [multiprocessing.Process(target=send_frames, args=(a.port, fill, stop, 0)),
               multiprocessing.Process(target=send_frames, args=(b.port, trickle, stop, 1.0)),
               multiprocessing.Process(target=predicts, args=(a.port, rows, stop, out))]
    for w in workers:
        w.start()
    time.sleep(1)  # the queue fills
    n0, t0 = metric(a.admin, 'tlserve_online_samples_total{model="ctr"}'), time.time()
    empty, polls = 0, 0
    while time.time() < t0 + SECONDS:
        time.sleep(0.25)
        polls += 1
        empty += metric(a.admin, 'tlserve_online_queue_bytes{model="ctr"}') == 0
    n1, t1 = metric(a.admin, 'tlserve_online_samples_total{model="ctr"}'), time.time()
    residual_now = metric(a.admin, "tlserve_sync_residual_keys")
    stop.set()
    lat = out.get(timeout=60)
    for w in workers:
        w.join(60)
    a.stop()
    b.stop()
    with open(a.log) as f:
        f.seek(logged)
        text = f.read()
    cuts = [(float(h), float(c_), int(k)) for h, c_, k in re.findall(
        r"writer lock held (\d+\.\d+) s to gather them; the update exchange's cut (\d+\.\d+) s "
        r"of it, copying (\d+) residual keys", text)]
    row = {"R": residual, "exports": exports, "rate": (n1 - n0) / (t1 - t0),
           "empty": empty / max(polls, 1), "p50": pct(lat, 0.5), "p99": pct(lat, 0.99),
           "predicts": len(lat), "cuts": cuts, "residual": residual_now}
    say("R=%d exports %s: %.0f samples/s (queue empty in %.0f%% of polls), PREDICT p50 %.2f ms "
        "p99 %.2f ms (%d), %d cuts %s, residual after %d" % (
            residual, "on" if exports else "off", row["rate"], 100 * row["empty"],
            row["p50"] * 1e3, row["p99"] * 1e3, len(lat), len(cuts),
            " ".join("%.4f/%d" % (c_, k) for _, c_, k in cuts), residual_now))
    return row


def main():
    work = tempfile.mkdtemp(prefix="tl_cutcost_")
    cluster, results = None, []
    load0 = os.getloadavg()
    try:
        cluster = natscluster.start("tl_cutcost_nats_")
        model = os.path.join(work, "m")
        subprocess.run([os.path.join(BUILD, "model", "tlsynth"), "model", "--keys", "0",
                        "--name", "ctr", "--out", model], check=True, stdout=subprocess.DEVNULL)
        trickle = frames(samples(os.path.join(work, "b.svm"), 100, 7))
        for r in RESIDUALS:
            rows = samples(os.path.join(work, "a.svm"), r // FIELDS, r)
            for exports in (True, False):
                results.append(run(model, work, cluster, r, exports, rows, trickle))
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()
                p.wait()
        if cluster:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    L = ["Load average before: %.2f %.2f %.2f, after: %.2f %.2f %.2f (%d cores)" % (
        load0 + os.getloadavg() + (os.cpu_count(),)), "",
         "| residual keys copied (median) | cuts | cut hold median | cut hold max | hand-over "
         "hold median | trainer samples/s exports on / off | PREDICT p99 on / off (p50) |",
         "|---|---|---|---|---|---|---|"]
    for r in RESIDUALS:
        on = [x for x in results if x["R"] == r and x["exports"]][0]
        off = [x for x in results if x["R"] == r and not x["exports"]][0]
        # the cuts at the full residual (an export of the fill can log in the window)
        top = max([k for _, _, k in on["cuts"]] or [0])
        cuts = [x for x in on["cuts"] if x[2] >= 0.9 * top] or [(float("nan"),) * 3]
        L.append("| %d | %d | %.1f ms | %.1f ms | %.1f ms | %.0f / %.0f | %.2f / %.2f ms "
                 "(%.2f / %.2f) |" % (
                     statistics.median(k for _, _, k in cuts), len(cuts),
                     1e3 * statistics.median(c for _, c, _ in cuts),
                     1e3 * max(c for _, c, _ in cuts),
                     1e3 * statistics.median(h for h, _, _ in cuts), on["rate"], off["rate"],
                     1e3 * on["p99"], 1e3 * off["p99"], 1e3 * on["p50"], 1e3 * off["p50"]))
    print("\n".join(L))


if __name__ == "__main__":
    main()
