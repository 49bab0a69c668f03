#!/usr/bin/env python3
"""reload_bench.py — the "reload under load" scenario of loadgen/bench.sh (`bench.sh reload`).

tlserve --model-repo serves an LR model of KEYS keys (tlsynth, seed 42) with --keep-versions 1
while tlgen sends the standard request (200 items, 300 shared + 200 per-item ids) at half the
max rate (measured first with tlgen's max-rate search, as bench.sh does, unless MAX_RPS is
given).  During the run, versions are renamed into the repository one at a time:
  version 2: a FULL version (tlsnap compact of version 1 and a 1% delta made by mkdelta),
  versions 3..12: DELTAS of 1% of the keys each (mkdelta: upserts of existing keys with new
  values, 1% of that as inserts and as deletes), each against the one before.
Every version is written before tlserve starts, into a staging directory on the same file
system, so that appearing is one rename (what a producer's atomic publish looks like) and
writing it costs the server nothing.  After each rename the script polls GET /v1/models until
the version is active, then waits GAP seconds (FULL_GAP after the full one) before the next.

Windows (from tlgen --interval-ms, intervals by due time, merged by adding buckets):
  steady    the measured start .. the full version's rename
  swap      rename of version 2 .. the first answer carrying version 2
  delta N   rename of version N .. its overlay folded into the model (tlserve's
            tlserve_delta_folds_total, polled; the first answer carrying it when later): all
            ten merged in one row, and the worst single one
  floor     after the versions, each one's extra CPU (tlserve's CPU seconds in its window over
            its steady rate) spent again by processes that only burn it, at the loader's nice
            (10) until live and the fold's (0) until folded, with the same gaps: what that
            much CPU costs serving on this machine, whoever spends it (the full swap's and
            the deltas' floors are rows of their own; the reload windows over them in a line)
  after     the last version live and folded, or the last floor, + 1 s .. the end
  quiet     every interval outside [rename, window end + 1 s] of every version: steady, the
            gaps between versions and after, pooled.  The same-run floor: what this machine
            gives when nothing is loading, measured between the reloads rather than only
            before them (a noisy machine drifts over a run of minutes).
An interval belongs to a window when it lies in it; boundary intervals count in the
reload window (an interval overlapping a reload is not steady).  Memory: tlserve's VmRSS
sampled every 50 ms (peak in steady, peak during each reload) and its VmHWM at the end.
Apply rate: the delta's keys / (first answer with it - its rename); time to first request
the same denominator.

Usage: loadgen/bench.sh reload   (or python3 loadgen/reload_bench.py)
Env:   KEYS=100M  MAX_RPS=<req/s> (skip the search)  STEADY=30 AFTER=10 GAP=4 FULL_GAP=auto
       ALLOW=auto (s a version may take to go live: sizes the run; 2 x version 1's load + 2)
       DELTAS=10  DELTA_PCT=1  INTERVAL_MS=100  CONNECTIONS=4  TIMEOUT_MS=10000
       P99_BOUND_US=2000  SEARCH_FROM=20  SEARCH_DURATION=3  BUILD=build-release
       SERVE_ARGS="--workers 1 --lookup-threads 1"  RESULTS=results/<date>_reload  KEEP_WORK=1
Prints the summary (markdown) on stdout; progress on stderr; everything in RESULTS.
"""
import json, os, shutil, signal, socket, subprocess, sys, tempfile, threading, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
os.chdir(ROOT)
env = os.environ.get


def count(s):
    s = str(s)
    mul = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9}.get(s[-1:], 1)
    return int(float(s[:-1] if mul > 1 else s) * mul)


KEYS = count(env("KEYS", "100M"))
STEADY = float(env("STEADY", "30"))
AFTER = float(env("AFTER", "10"))
GAP = float(env("GAP", "4"))
FULL_GAP = float(env("FULL_GAP", "0")) or max(6.0, KEYS / 5e6)
NDELTAS = int(env("DELTAS", "10"))
DELTA_PCT = float(env("DELTA_PCT", "1"))
INTERVAL_MS = float(env("INTERVAL_MS", "100"))
CONNECTIONS = env("CONNECTIONS", "4")
TIMEOUT_MS = env("TIMEOUT_MS", "10000")
P99_BOUND_US = env("P99_BOUND_US", "2000")
SEARCH_FROM = env("SEARCH_FROM", "20")
SEARCH_DURATION = env("SEARCH_DURATION", "3")
BUILD = env("BUILD", "build-release")
SERVE_ARGS = env("SERVE_ARGS", "--workers 1 --lookup-threads 1").split()
STAMP = time.strftime("%Y-%m-%d_%H%M%S")
OUT = os.path.realpath(env("RESULTS", "results/%s_reload" % STAMP))
MODEL = "ctr_lr"
PROCS = []


def say(*a):
    print("==", *a, file=sys.stderr, flush=True)


def die(msg):
    print("reload_bench: " + msg, file=sys.stderr)
    sys.exit(1)


def run(args, out=None, **kw):
    say(" ".join(str(a) for a in args))
    with open(out, "w") if out else open(os.devnull, "w") as f:
        r = subprocess.run([str(a) for a in args], stdout=f, stderr=subprocess.STDOUT, **kw)
    if r.returncode != 0:
        if out:
            sys.stderr.write(open(out).read())
        die("%s failed (exit %d)" % (args[0], r.returncode))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http_json(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=2) as r:
        return json.loads(r.read())


def active_version(port):
    try:
        for m in http_json(port, "/v1/models")["models"]:
            if m.get("name") == MODEL:
                return int(m.get("version") or 0)
    except Exception:
        return None
    return None


def folds_done(port):
    """tlserve_delta_folds_total{result="done"} (None when /metrics does not answer)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2) as r:
            for line in r.read().decode().splitlines():
                if line.startswith('tlserve_delta_folds_total{result="done"}'):
                    return int(float(line.rsplit(" ", 1)[1]))
    except Exception:
        return None
    return 0


def rss_sampler(pid, samples, stop):
    """(wall time, VmRSS kB, CPU seconds user + system) of pid every 50 ms, until stop is set."""
    path, tick = "/proc/%d/status" % pid, os.sysconf("SC_CLK_TCK")
    while not stop.is_set():
        try:
            rss = next(int(l.split()[1]) for l in open(path) if l.startswith("VmRSS:"))
            f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
            samples.append((time.time(), rss, (int(f[11]) + int(f[12])) / tick))
        except (OSError, StopIteration):
            return
        stop.wait(0.05)


def cpu_at(samples, t):
    """tlserve's CPU seconds at time t (the last sample at or before it)."""
    c = samples[0][2] if samples else 0.0
    for ts, _, cs in samples:
        if ts > t:
            break
        c = cs
    return c


BURNER = r"""
import mmap, os, sys, time
share, stop_at, nice, touch = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.nice(nice)
# touch: bytes of fresh anonymous memory faulted in, one page at a time, paced to be done by
# 90% of the window (part of the CPU share), and unmapped at its end
m = mmap.mmap(-1, touch) if touch > 0 else None
start, off = time.time(), 0
span = max(1e-3, 0.9 * (stop_at - start))
while time.time() < stop_at:
    t0 = time.time()
    while time.time() - t0 < 0.01 * share:
        if m is not None and off < touch and off < touch * (time.time() - start) / span:
            m[off] = 1
            off += 4096
    time.sleep(max(0.0, 0.01 * (1 - share)))
if m is not None:
    m.close()
"""


def burn(cores, seconds, nice, touch=0):
    """Spends `cores` of CPU for `seconds` at `nice` (ceil(cores) processes, 10 ms periods),
    the first of them also faulting in `touch` bytes of fresh memory within that CPU."""
    n = max(1, -(-cores // 1)) if cores > 0 or touch > 0 else 0
    stop_at = time.time() + seconds
    ps = [subprocess.Popen([sys.executable, "-c", BURNER, "%.3f" % min(1.0, max(cores / n, 0.01)),
                            "%.3f" % stop_at, str(nice), str(touch if i == 0 else 0)])
          for i in range(int(n))]
    time.sleep(max(0.0, stop_at - time.time()))
    for p in ps:
        p.wait()


def rss_growth(samples, a, z):
    """Bytes tlserve's VmRSS rose in [a, z] over its value at a (0 without samples)."""
    base = next((r for t, r, _ in reversed(samples) if t <= a), None)
    top = max((r for t, r, _ in samples if a <= t <= z), default=None)
    return max(0, top - base) * 1024 if base is not None and top is not None else 0


def vm_hwm(pid):
    try:
        for line in open("/proc/%d/status" % pid):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def main():
    os.makedirs(OUT, exist_ok=True)
    if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
        run(["cmake", "-S", ".", "-B", BUILD, "-DCMAKE_BUILD_TYPE=Release"])
    run(["cmake", "--build", BUILD, "-j%d" % os.cpu_count(), "--target", "tlsnap", "tlsynth",
         "tlserve", "tlgen", "mkdelta"])
    B = os.path.realpath(BUILD)
    tlsnap, tlsynth = B + "/store/tlsnap", B + "/model/tlsynth"
    tlserve, tlgen, mkdelta = B + "/server/tlserve", B + "/loadgen/tlgen", B + "/loadgen/mkdelta"
    work = tempfile.mkdtemp(prefix="tl_reload.", dir=env("TMPDIR", "/tmp"))
    try:
        bench(work, tlsnap, tlsynth, tlserve, tlgen, mkdelta)
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.terminate()
        for p in PROCS:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        if env("KEEP_WORK") == "1":
            say("work dir kept: " + work)
        else:
            shutil.rmtree(work, ignore_errors=True)


def bench(work, tlsnap, tlsynth, tlserve, tlgen, mkdelta):
    repo, stage = os.path.join(work, "repo"), os.path.join(work, "stage")
    os.makedirs(os.path.join(repo, MODEL))
    os.makedirs(os.path.join(stage, MODEL))
    ups = max(1, int(KEYS * DELTA_PCT / 100))
    ins = dels = max(1, ups // 100)
    ups -= ins  # a delta of DELTA_PCT % of the keys: upserts + inserts (+ deletes)
    v1 = os.path.join(repo, MODEL, "1")
    t0 = time.time()
    run([tlsynth, "model", "--keys", KEYS, "--out", v1, "--name", MODEL, "--seed", 42,
         "--kind", "lr", "--value-floats", 1], out=os.path.join(OUT, "tlsynth.txt"))
    say("version 1: %d keys in %.1f s" % (KEYS, time.time() - t0))
    # version 2 (full): version 1 + delta 1, compacted; then deltas 2..NDELTAS+1 as 3..12
    d2 = os.path.join(work, "d2")
    run([mkdelta, "--parent", v1, "--out", d2, "--keys", KEYS, "--seq", 1, "--version", 2,
         "--upserts", ups, "--inserts", ins, "--deletes", dels], out=os.path.join(OUT, "mkdelta_2.txt"))
    t0 = time.time()
    run([tlsnap, "compact", v1, d2, os.path.join(stage, MODEL, "2")],
        out=os.path.join(OUT, "compact_2.txt"))
    say("version 2 (full, compacted): %.1f s" % (time.time() - t0))
    shutil.rmtree(d2)
    versions = [(2, "full", KEYS - dels + ins)]
    parent = os.path.join(stage, MODEL, "2")
    for n in range(NDELTAS):
        v = 3 + n
        d = os.path.join(stage, MODEL, str(v))
        run([mkdelta, "--parent", parent, "--out", d, "--keys", KEYS, "--seq", n + 2,
             "--upserts", ups, "--inserts", ins, "--deletes", dels],
            out=os.path.join(OUT, "mkdelta_%d.txt" % v))
        versions.append((v, "delta", ups + ins + dels))
        parent = d
    delta_bytes = max(dir_bytes(os.path.join(stage, MODEL, str(v))) for v, k, _ in versions
                      if k == "delta")

    port, admin = free_port(), free_port()
    log = open(os.path.join(OUT, "tlserve.log"), "w")
    srv = subprocess.Popen([tlserve, "--model-repo", repo, "--keep-versions", "1", "--port",
                            str(port), "--admin-port", str(admin)] + SERVE_ARGS,
                           stdout=log, stderr=subprocess.STDOUT)
    PROCS.append(srv)
    say("tlserve --model-repo %s --keep-versions 1 %s on :%d" % (repo, " ".join(SERVE_ARGS), port))
    deadline = time.time() + 600
    t_start = time.time()
    while active_version(admin) != 1:
        if srv.poll() is not None or time.time() > deadline:
            die("tlserve did not serve version 1 (see %s/tlserve.log)" % OUT)
        time.sleep(0.2)
    load_s = time.time() - t_start
    say("version 1 live %.1f s after tlserve started" % load_s)

    std = [tlgen, "--port", port, "--model", MODEL, "--connections", CONNECTIONS, "--items", 200,
           "--shared", 300, "--per-item", 200, "--key-space", KEYS, "--seed", 42,
           "--timeout-ms", TIMEOUT_MS, "--json"]
    max_rps = float(env("MAX_RPS", "0"))
    if max_rps <= 0:
        f = os.path.join(OUT, "search.txt")
        subprocess.run([str(a) for a in std + ["--duration", SEARCH_DURATION, "--warmup", 1,
                        "--search-p99-us", P99_BOUND_US, "--search-from", SEARCH_FROM]],
                       stdout=open(f, "w"), stderr=subprocess.STDOUT)
        d = json.loads(open(f).read().strip().splitlines()[-1])
        max_rps = d["max_rps"] or min((p for p in d["probes"] if p.get("ok")),
                                      key=lambda p: p["p99_us"])["offered_rps"]
    rate = max(1, round(max_rps / 2))
    say("max rate %.0f req/s; running at %d req/s" % (max_rps, rate))

    # the run: long enough for the whole schedule when each version takes at most ALLOW s to go
    # live (default: twice version 1's start-up load + 2 s; a delta may cost a full rebuild)
    allow = float(env("ALLOW", "0")) or 2 * load_s + 2
    total = STEADY + FULL_GAP + NDELTAS * GAP + AFTER + (1 + NDELTAS) * allow
    total += FULL_GAP + NDELTAS * GAP + (1 + NDELTAS) * allow  # the floor's replay (below)
    ivf = os.path.join(OUT, "intervals.jsonl")
    gen_out = os.path.join(OUT, "tlgen.txt")
    samples, stop = [], threading.Event()
    sampler = threading.Thread(target=rss_sampler, args=(srv.pid, samples, stop), daemon=True)
    sampler.start()
    gen = subprocess.Popen([str(a) for a in std + ["--rate", rate, "--duration", "%.1f" % total,
                            "--warmup", 1, "--interval-ms", INTERVAL_MS, "--interval-out", ivf]],
                           stdout=open(gen_out, "w"), stderr=subprocess.STDOUT)
    PROCS.append(gen)
    start = time.time() + 1.02  # tlgen's measured window starts after its warm-up (+20 ms)
    events = []  # (version, kind, changed keys, rename time, active seen time)
    at = start + STEADY
    for v, kind, nkeys in versions:
        time.sleep(max(0.0, at - time.time()))
        folds0 = folds_done(admin)
        os.rename(os.path.join(stage, MODEL, str(v)), os.path.join(repo, MODEL, str(v)))
        t_ren = time.time()
        while True:
            a = active_version(admin)
            if a is not None and a >= v:
                break
            if srv.poll() is not None:
                die("tlserve exited (see %s/tlserve.log)" % OUT)
            if time.time() - t_ren > 300:
                die("version %d not live 300 s after its rename" % v)
            time.sleep(0.01)
        t_act = time.time()
        # A delta's apply ends when its overlay is folded into the model (the background
        # pass after the swap): the window runs to there.
        t_fold = t_act
        while kind == "delta" and folds0 is not None and time.time() - t_act < 60:
            f = folds_done(admin)
            if f is not None and f > folds0:
                t_fold = time.time()
                break
            time.sleep(0.01)
        events.append((v, kind, nkeys, t_ren, t_act, t_fold))
        say("version %d (%s) live %.3f s after its rename%s" % (
            v, kind, t_act - t_ren,
            ", folded after %.3f s" % (t_fold - t_ren) if t_fold > t_act else ""))
        at = t_act + (FULL_GAP if kind == "full" else GAP)
    # The floor: each reload's extra CPU (tlserve's CPU over its steady rate) replayed by
    # processes that only burn it, at the loader's nice (10) until live and the fold's (0)
    # until folded, one reload at a time with the same gaps, and as much fresh memory faulted
    # in as tlserve's RSS grew then: what spending that much CPU and memory costs serving on
    # this machine, whoever spends it.
    time.sleep(max(0.0, at - time.time()))
    t_st = events[0][3]
    r0 = (cpu_at(samples, t_st) - cpu_at(samples, start)) / max(1e-3, t_st - start)
    burns = []
    for v, kind, nkeys, t_ren, t_act, t_fold in events:
        b0, spent, touched = time.time(), [], 0
        for a, z, nice in ((t_ren, t_act, 10), (t_act, t_fold, 0)):
            if z - a < 0.05:
                continue
            extra = max(0.0, cpu_at(samples, z) - cpu_at(samples, a) - r0 * (z - a))
            grown = rss_growth(samples, a, z)
            spent.append(extra)
            touched += grown
            burn(extra / (z - a), z - a, nice, grown)
        burns.append((v, kind, b0, time.time(), sum(spent)))
        say("floor for version %d (%s): %.2f CPU s, %.0f MiB of fresh memory, over %.3f s"
            % (v, kind, sum(spent), touched / 2**20, time.time() - b0))
        time.sleep(FULL_GAP if kind == "full" else GAP)
    gen.wait()
    stop.set()
    sampler.join()
    hwm = vm_hwm(srv.pid)
    report(ivf, gen_out, events, burns, samples, hwm, rate, max_rps, delta_bytes)


def pctl(buckets, total, q):
    """The latency (us) at percentile q of merged buckets {index: count}."""
    if total == 0:
        return None
    want = max(1, -(-q * total // 100))
    seen = 0
    for i in sorted(buckets):
        seen += buckets[i]
        if seen >= want:
            if i < 64:
                return i / 1000
            e, s = i // 64 + 5, i % 64
            return (((64 + s + 1) << (e - 6)) - 1) / 1000
    return None


def report(ivf, gen_out, events, burns, samples, hwm, rate, max_rps, delta_bytes):
    lines = open(ivf).read().strip().splitlines()
    head = json.loads(lines[0])
    ivs = [json.loads(l) for l in lines[1:] if l.startswith('{"i"')]
    first_seen = {int(k): v / 1000 for k, v in json.loads(lines[-1])["first_seen"].items()}
    step = head["interval_ms"] / 1000
    gen_json = json.loads(open(gen_out).read().strip().splitlines()[-1])

    # window edges in unix s; a reload window ends at the first answer with its version
    wins = []
    for v, kind, nkeys, t_ren, t_act, t_fold in events:
        live = first_seen.get(v, t_act)
        wins.append((v, kind, nkeys, t_ren, max(live, t_ren), t_act, max(live, t_fold)))
    steady_end = wins[0][3]
    after_start = max(wins[-1][4], wins[-1][6], burns[-1][3] if burns else 0) + 1.0

    def merge(pred):
        b, tot, err, sched = {}, 0, 0, 0
        for iv in ivs:
            s = iv["start_unix_ms"] / 1000
            if pred(s, s + step):
                for i, c in iv["b"]:
                    b[i] = b.get(i, 0) + c
                tot += iv["ok"]
                err += iv["errors"]
                sched += iv["scheduled"]
        return b, tot, err, sched

    def inside(a, z):
        return lambda s, e: e > a and s < z

    rows = []
    steady = merge(lambda s, e: e <= steady_end)
    rows.append(("steady (before)", steady))
    full = [w for w in wins if w[1] == "full"]
    deltas = [w for w in wins if w[1] == "delta"]
    for w in full:
        rows.append(("full swap (v%d)" % w[0], merge(inside(w[3], w[4]))))
    if deltas:
        rows.append(("delta applies to folded (%d merged)" % len(deltas),
                     merge(lambda s, e: any(e > w[3] and s < w[6] for w in deltas))))
        rows.append(("  of which rename to live",
                     merge(lambda s, e: any(e > w[3] and s < w[4] for w in deltas))))
        rows.append(("  of which live to folded",
                     merge(lambda s, e: any(e > w[4] and s < w[6] for w in deltas))))
        worst = max(deltas, key=lambda w: pctl(merge(inside(w[3], w[6]))[0],
                                               merge(inside(w[3], w[6]))[1], 99) or 0)
        rows.append(("worst delta (v%d)" % worst[0], merge(inside(worst[3], worst[6]))))
    bf = [b for b in burns if b[1] == "full"]
    bd = [b for b in burns if b[1] == "delta"]
    if bf:
        rows.append(("floor: the full swap's CPU replayed",
                     merge(lambda s, e: any(e > b[2] and s < b[3] for b in bf))))
    if bd:
        rows.append(("floor: the deltas' CPU replayed (%d merged)" % len(bd),
                     merge(lambda s, e: any(e > b[2] and s < b[3] for b in bd))))
    rows.append(("after", merge(lambda s, e: s >= after_start)))
    busy = [(w[3], max(w[4], w[6]) + 1.0) for w in wins] + [(b[2], b[3] + 1.0) for b in burns]
    quiet = merge(lambda s, e: all(e <= a or s >= z for a, z in busy))
    rows.append(("quiet (steady + gaps + after)", quiet))
    end = (ivs[-1]["start_unix_ms"] / 1000 + step) if ivs else after_start
    short = end - after_start < AFTER / 2
    sp = [pctl(steady[0], steady[1], q) for q in (50, 99, 99.9)]
    qp = [pctl(quiet[0], quiet[1], q) for q in (50, 99, 99.9)]
    L = ["# Reload under load — %s" % STAMP, ""]
    L.append("- LR, %s keys, `tlserve --model-repo --keep-versions 1 %s`; tlgen standard request "
             "at %d req/s (half of the max rate %.0f req/s with p99 <= %s us), %s connections; "
             "intervals of %g ms by due time; latency corrected (from the due time)."
             % ("{:,}".format(KEYS), " ".join(SERVE_ARGS), rate, max_rps, P99_BOUND_US,
                CONNECTIONS, INTERVAL_MS))
    L.append("- Versions: v2 full (tlsnap compact of v1 + a %g%% delta), then %d deltas of %g%% "
             "(%s changed keys each: upserts, 1%% inserts, 1%% deletes), each renamed in after the "
             "previous one was live and a quiet gap (%g s after the full, %g s after a delta)."
             % (DELTA_PCT, len(deltas), DELTA_PCT, "{:,}".format(deltas[0][2]) if deltas else 0,
                FULL_GAP, GAP))
    L.append("- Machine: %d cores; load average before: %s." % (os.cpu_count(), LOADAVG))
    L.append("")
    L.append("| window | requests | p50 us | p99 us | p99.9 us | errors | p50 / p99 / p99.9 vs steady "
             "| vs quiet |")
    L.append("|---|---|---|---|---|---|---|---|")

    def ratios(p, base):
        return " / ".join("%.2fx" % (x / y) if x and y else "-" for x, y in zip(p, base))
    for name, (b, tot, err, sched) in rows:
        p = [pctl(b, tot, q) for q in (50, 99, 99.9)]
        L.append("| %s | %d | %s | %s | %s | %d | %s | %s |" % (
            name, sched, *("%.0f" % x if x is not None else "-" for x in p), err, ratios(p, sp),
            ratios(p, qp)))
    byname = {name: [pctl(b, tot, 99)] for name, (b, tot, err, sched) in rows}

    def p99_of(prefix):
        return next((v[0] for k, v in byname.items() if k.startswith(prefix)), None)
    fl_d, fl_f = p99_of("floor: the deltas"), p99_of("floor: the full")
    re_d, re_f = p99_of("delta applies"), p99_of("full swap")
    if fl_d or fl_f:
        L.append("")
        L.append("Floor (each reload's extra CPU, %s CPU s in all, spent by a process that only "
                 "burns it and faults in as much fresh memory as tlserve's RSS grew, at nice 10 until "
                 "live and 0 until folded): p99 during the deltas over "
                 "their floor %s, during the full swap over its floor %s." % (
                     "%.1f" % sum(b[4] for b in burns),
                     "%.2fx" % (re_d / fl_d) if re_d and fl_d else "-",
                     "%.2fx" % (re_f / fl_f) if re_f and fl_f else "-"))
    if short:
        L.append("")
        L.append("**The after window is %.1f s, under AFTER/2: versions went live slower than "
                 "ALLOW allowed; run again with a larger ALLOW.**" % max(0.0, end - after_start))
    L.append("")
    L.append("tlgen over the whole run: %d scheduled, %d answered, %d errors, valid %s (`tlgen.txt`)."
             % (gen_json["scheduled"], gen_json["ok"], gen_json["errors"], gen_json["valid"]))
    L.append("")
    for v, kind, nkeys, t_ren, live, t_act, _ in wins:
        dt = live - t_ren
        extra = ""
        if kind == "delta" and dt > 0:
            extra = "; apply rate %.2fM keys/s" % (nkeys / dt / 1e6)
        L.append("- v%d %s: first answer with it %.3f s after the rename (/v1/models said active "
                 "after %.3f s)%s." % (v, kind, dt, t_act - t_ren, extra))
    # tlserve's own account (its log): load to active, and the gate's share of it
    import re
    active_s, gate_s, gate_cpu, build = {}, {}, {}, {}
    for line in open(os.path.join(OUT, "tlserve.log"), errors="replace"):
        m = re.search(r"load \d+: \S+ version (\d+) active after ([\d.]+) s", line)
        if m:
            active_s[int(m.group(1))] = float(m.group(2))
        m = re.search(r"gate: \S+ version (\d+) passed: .*; ([\d.]+) s"
                      r"(?: \(this thread's CPU ([\d.]+) s\))?", line)
        if m:
            gate_s[int(m.group(1))] = float(m.group(2))
            if m.group(3):
                gate_cpu[int(m.group(1))] = float(m.group(3))
        m = re.search(r"repo: version (\d+) = version \d+ \+ \d+ delta\(s\), (\d+) keys as an "
                      r"overlay in ([\d.]+) s .*this thread's CPU ([\d.]+) s", line)
        if m:
            build[int(m.group(1))] = (int(m.group(2)), float(m.group(3)), float(m.group(4)))
    if active_s:
        L.append("")
        L.append("tlserve's log (load start to active; the gate's part): " + "; ".join(
            "v%d %s%s" % (v, "%.3f s" % active_s[v],
                          " (gate %.3f s)" % gate_s[v] if v in gate_s else "")
            for v, *_ in wins if v in active_s) + ".")
        dl = sorted(nk / active_s[v] for v, k, nk, *_ in wins if k == "delta" and active_s.get(v))
        if dl:
            L.append("Delta apply rate by tlserve's log (changed keys / load-to-active): median "
                     "%.2fM keys/s." % (dl[len(dl) // 2] / 1e6))
    if build:
        # The loader runs SCHED_IDLE: its wall time is mostly waiting for the CPU serving leaves.
        vs = sorted(build)
        wall = sorted(k / w for k, w, c in build.values() if w > 0)
        cpu = sorted(k / c for k, w, c in build.values() if c > 0)
        L.append("Overlay builds (keys; wall s; the loader thread's CPU s): " + "; ".join(
            "v%d %d, %.3f, %.3f" % (v, *build[v]) for v in vs) + ".")
        if wall and cpu:
            L.append("Overlay build rate median %.2fM keys/s of wall time, %.2fM keys per second "
                     "of the loader thread's CPU." % (wall[len(wall) // 2] / 1e6,
                                                     cpu[len(cpu) // 2] / 1e6))
        g = sorted((gate_s[v], gate_cpu[v]) for v in vs if v in gate_s and v in gate_cpu)
        if g:
            L.append("Their gates (wall s, the loader thread's CPU s): " +
                     "; ".join("%.3f, %.3f" % x for x in g) + ".")
    if deltas:
        dts = sorted(w[4] - w[3] for w in deltas)
        L.append("")
        L.append("**Deltas (%s keys each): time to first request median %.3f s, max %.3f s; apply "
                 "rate (keys / time to first request) median %.2fM keys/s, min %.2fM keys/s.**"
                 % ("{:,}".format(deltas[0][2]), dts[len(dts) // 2], dts[-1],
                    deltas[0][2] / dts[len(dts) // 2] / 1e6 if dts[len(dts) // 2] else 0,
                    deltas[0][2] / dts[-1] / 1e6 if dts[-1] else 0))

    def peak(a, z):
        xs = [kb for t, kb, _ in samples if a <= t <= z]
        return max(xs) if xs else 0
    st_peak = peak(0, steady_end)
    L.append("")
    mem = ["steady peak RSS %.0f MiB" % (st_peak / 1024)]
    for w in full:
        mem.append("during the full swap %.0f MiB" % (peak(w[3], w[5] + 0.5) / 1024))
    if deltas:
        dp = max(peak(w[3], w[6] + 0.5) for w in deltas)
        mem.append("during delta applies at most %.0f MiB (+%.0f MiB over steady; a delta's files: "
                   "%.1f MiB)" % (dp / 1024, (dp - st_peak) / 1024, delta_bytes / 2**20))
        # Per delta: the peak from its rename to the end of its quiet gap (the fold runs
        # there) over the RSS of the second before the rename (what was resident then,
        # the kept version included).  Bound: 3 x the delta's files + one shard (16 shards).
        grow = max(peak(w[3], w[3] + GAP * 0.9) - peak(w[3] - 1.0, w[3]) for w in deltas)
        bound = 3 * delta_bytes / 1024 + st_peak / 16
        mem.append("growth during a delta (its rename to the end of its gap, over the second "
                   "before) at most +%.1f MiB, bound 3 x files + one shard = %.1f MiB"
                   % (grow / 1024, bound / 1024))
    mem.append("VmHWM at the end %.0f MiB" % (hwm / 1024))
    L.append("Memory (tlserve VmRSS every 50 ms): " + "; ".join(mem) + ".")
    L.append("")
    L.append("Raw: `intervals.jsonl` (tlgen --interval-ms), `tlgen.txt`, `tlserve.log`, "
             "`mkdelta_*.txt`, `search.txt`.")
    text = "\n".join(L) + "\n"
    open(os.path.join(OUT, "summary.md"), "w").write(text)
    say("summary: %s/summary.md" % OUT)
    print(text)


LOADAVG = " ".join(open("/proc/loadavg").read().split()[:3])
if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(130))
    main()
