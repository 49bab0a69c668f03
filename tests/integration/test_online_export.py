"""Online updates exported into the model repository (--online-export-ms), and what relies on them.

tlserve --model-repo REPO --online learns TRAIN frames into the served version and, on a timer
and at SIGTERM, writes what it changed as a delta version REPO/ctr/<v+1>/ (producer
"tlserve-online log=P ..."):
- the export goes live without the trainer starting over (tlserve_online_resets_total stays 1)
  and the version keeps counting up while it learns;
- after SIGTERM, a plain tlserve on the repository (the chain: full + the exports) scores float
  for float as the online server did before it stopped: the exports hold exactly the live
  weights;
- kill -9 after some exports and more acknowledged frames, restart: the server loads the chain,
  restores the optimizer state the exports carry (FTRL's z and n of the keys each exported, in
  their TRAINER_STATE files) and learns its sample log again from the position the newest
  export covers.  It then equals, float for float, a server that NEVER crashed: one that loaded
  version 1 and learned every acknowledged frame in the same order (without exports: they do
  not change the math);
- a corrupt TRAINER_STATE at a restart is a warning naming the file and what was wrong; the
  server serves and learns on from a fresh optimizer state;
- rollback after an export drops the online updates: the served scores are the rolled-back-to
  version's files' scores, exactly;
- an export that cannot be written is an ERROR line and a counted failure; training goes on and
  the next tick exports;
- with --online-full-every 3 every third export is a FULL version (producer "tlserve-online",
  every key, TRAINER_STATE with every key's state) that tlsnap verifies and the next delta has
  as its parent; kill -9 and a restart serve exactly the digest served before (the chain starts
  at the full export, the optimizer state at its TRAINER_STATE), and learning on from there
  equals a server that never crashed.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_online_export.py
"""

import json
import os
import re
import shutil
import signal
import subprocess
import time
import unittest

import harness
from harness import TLSERVE, TLSNAP, TLSYNTH, ServerCase, gen_model, model_key, require

TOKEN = "online-export-token"
SEED = 41
M = "ctr"


def sample(j):
    """A shared block and one item block of the model's keys."""
    shared = sorted(model_key(i, SEED) for i in range(30))
    item = sorted(model_key(1000 + 10 * j + i, SEED) for i in range(10))
    return shared, item


def frame(k):
    shared, item = sample(k % 37)
    return shared, [(float(k % 3 == 0), item), (float(k % 5 == 0), sample(k % 11)[1])]


PROBES = [sample(j) for j in range(40)]


def versions(repo):
    d = os.path.join(repo, M)
    return sorted(int(n) for n in os.listdir(d) if n.isdigit())


class OnlineExport(ServerCase):
    TMP_PREFIX = "tl_oexport_"

    @classmethod
    def setUpClass(cls):
        require(TLSERVE, TLSYNTH, TLSNAP)

    def setUp(self):
        super().setUp()
        self.repo = os.path.join(self.tmp, "repo")
        gen_model(os.path.join(self.repo, M, "1"), 20000, M, seed=SEED)
        self.logs = os.path.join(self.tmp, "samples")

    def serve(self, *args, repo=None, **kw):
        # loads at nice +10, not SCHED_IDLE: a busy CI machine must not starve the reloads
        return super().serve(None, "--model-repo", repo or self.repo,
                             "--load-sched-idle=false", *args, **kw)

    def online(self, export_ms=200, *extra, repo=None, **kw):
        return self.serve("--online", "--sample-log-dir", self.logs, "--online-export-ms",
                          str(export_ms), *extra, repo=repo, **kw)

    def wait_version(self, c, want, timeout=20):
        deadline = time.monotonic() + timeout
        shared, item = PROBES[0]
        while True:
            v = c.predict(M, shared, [item]).version
            if v >= want:
                return v
            self.assertLess(time.monotonic(), deadline, "version %d never went live" % want)
            time.sleep(0.02)

    def train(self, s, c, frames, first=0):
        """Sends frames, each acknowledged; waits until all are learned."""
        for k in range(first, first + frames):
            shared, samples = frame(k)
            self.assertEqual(c.train(M, shared, samples), 2)
        done = 2 * (first + frames)
        self.wait_metric(s, 'tlserve_online_samples_total{model="%s"}' % M, done)

    @staticmethod
    def scores(c):
        return [c.predict(M, sh, [it]).scores for sh, it in PROBES]

    def test_export_goes_live_and_the_trainer_learns_on(self):
        s = self.online()
        with s.client() as c:
            self.train(s, c, 60)
            self.wait_metric(s, 'tlserve_online_exports_total{model="%s"}' % M, 1)
            v = self.wait_version(c, 2)
            self.train(s, c, 60, first=60)
            self.wait_metric(s, 'tlserve_online_exports_total{model="%s"}' % M, 2)
            self.wait_version(c, v + 1)
            self.train(s, c, 5, first=120)  # learned into the export now live
        self.assertEqual(s.metric('tlserve_online_resets_total{model="%s"}' % M), 1,
                         "an own export made the trainer start over")
        self.assertGreaterEqual(s.metric('tlserve_online_version{model="%s"}' % M), v + 1)
        self.assertEqual(s.metric('tlserve_online_export_failures_total{model="%s"}' % M), 0)
        # the timer exports the last frames too (the sample-log position after frame 124)
        self.wait_metric(s, 'tlserve_online_export_position{model="%s"}' % M, 125)
        self.assertEqual(s.metric('tlserve_online_export_position{model="%s"}' % M), 125)
        self.assertGreater(s.metric('tlserve_online_export_keys_total{model="%s"}' % M), 0)
        self.assertEqual(s.metric('tlserve_online_export_version{model="%s"}' % M),
                         versions(self.repo)[-1])
        self.assertIn("relabelled", s.output())

    def test_sigterm_exports_exactly_the_live_weights(self):
        s = self.online(export_ms=60000)  # the timer never fires: SIGTERM's export alone
        with s.client() as c:
            before = self.scores(c)
            self.train(s, c, 80)
            live = self.scores(c)
        self.assertNotEqual(live, before)
        self.assertEqual(versions(self.repo), [1])
        self.assertEqual(s.stop(), 0)
        self.assertEqual(versions(self.repo), [1, 2])
        plain = self.serve()
        with plain.client() as c:
            self.assertEqual(self.wait_version(c, 2), 2)
            self.assertEqual(self.scores(c), live)

    def test_a_corrupt_state_file_is_a_warning_and_a_fresh_state(self):
        s = self.online(export_ms=60000)
        with s.client() as c:
            self.train(s, c, 20)
        self.assertEqual(s.stop(), 0)
        self.assertEqual(versions(self.repo), [1, 2])
        state = os.path.join(self.repo, M, "2", "TRAINER_STATE")
        with open(state, "r+b") as f:  # cut inside its rows
            f.truncate(os.path.getsize(state) - 13)
        b = self.online(export_ms=60000)
        with b.client() as c:
            self.assertEqual(self.wait_version(c, 2), 2)
            deadline = time.monotonic() + 20
            while "TRAINER_STATE: byte" not in b.output():  # the trainer's attach
                self.assertLess(time.monotonic(), deadline, b.output())
                time.sleep(0.05)
            for k in range(20, 25):  # serves and learns on, from a fresh state
                shared, samples = frame(k)
                self.assertEqual(c.train(M, shared, samples), 2)
        self.wait_metric(b, 'tlserve_online_samples_total{model="%s"}' % M, 10)
        self.assertRegex(b.output(), r"warn: online: model 'ctr': \S+/2/TRAINER_STATE: byte "
                                     r"\d+: checksum mismatch .*starts afresh")
        self.assertNotIn("online exports) restored", b.output())

    def test_kill_9_after_an_export_restarts_from_its_position(self):
        a = self.online()
        with a.client() as c:
            self.train(a, c, 50)
            self.wait_metric(a, 'tlserve_online_exports_total{model="%s"}' % M, 1)
            self.wait_version(c, 2)
        acked = 50 + harness.train_until_killed(a, M, frame, 50, 400, kill_at=300)
        self.assertGreater(acked, 150)
        have = versions(self.repo)
        self.assertGreaterEqual(len(have), 2)
        frozen = os.path.join(self.tmp, "frozen")  # the chain as the restart finds it
        shutil.copytree(self.repo, frozen)
        b = self.online(export_ms=60000)  # no export of its own before the comparison
        n, start, end = harness.replayed_positions(b)
        first = self.first_pos
        # frames [start - first, end - first) were learned again, on the newest export
        lo, hi = start - first, end - first
        self.assertEqual(n, 2 * (hi - lo))
        self.assertGreaterEqual(hi, acked, "an acknowledged frame is neither exported nor replayed")
        self.assertGreater(lo, 0, "the replay did not start at an export's position")
        self.assertIn("online exports) restored", b.output())
        for v in have[1:]:  # every export carries the optimizer state of its keys,
            d = os.path.join(frozen, M, str(v))  # which tlsnap (as the loader) ignores
            self.assertTrue(os.path.exists(os.path.join(d, "TRAINER_STATE")))
            r = subprocess.run([TLSNAP, "verify", d, "--threads", "1"], capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # the reference never crashed: version 1, then frames [0, hi) in order, no exports
        never = os.path.join(self.tmp, "never")
        shutil.copytree(os.path.join(frozen, M, "1"), os.path.join(never, M, "1"))
        ref = self.serve("--online", "--online-export-ms", "0", repo=never)
        with ref.client() as c:
            self.assertEqual(self.wait_version(c, 1), 1)
            for k in range(hi):
                shared, samples = frame(k)
                self.assertEqual(c.train(M, shared, samples), 2)
        self.wait_metric(ref, 'tlserve_online_samples_total{model="%s"}' % M, 2 * hi)
        with b.client() as cb, ref.client() as cr:
            self.assertEqual(cb.predict(M, *PROBES[0][:1], [PROBES[0][1]]).version, have[-1])
            self.assertEqual(self.scores(cb), self.scores(cr))

    first_pos = 0  # the sample log's first position (sample_log.h)

    def test_rollback_drops_the_online_updates(self):
        # A gate that refuses any move of the mean: the exports pass it (they serve what the
        # trainer already serves), and the rollback's reload of the version's own files must
        # not be judged against its trained copy (it would be refused, kept so across a
        # restart, and the trainer would wait for it for ever)
        s = self.online(200, "--gate-sample", "1000", "--gate-max-mean-shift", "0.000001",
                        token=TOKEN)
        with s.client() as c:
            self.train(s, c, 50)
            self.wait_metric(s, 'tlserve_online_exports_total{model="%s"}' % M, 1)
            v = self.wait_version(c, 2)
            self.train(s, c, 50, first=50)  # more, maybe not exported yet
            live = self.scores(c)
            deadline = time.monotonic() + 20
            while True:  # 409 while the load of a newer export is under way
                st, _, body = harness.http(s.admin_port, "/v1/models/%s:rollback" % M, "POST",
                                           b"", {"Authorization": "Bearer " + TOKEN}, timeout=30)
                if st != 409:
                    break
                self.assertLess(time.monotonic(), deadline, body)
                time.sleep(0.05)
            self.assertEqual(st, 200, body)
            answer = json.loads(body)
            # the kept version shares the store the trainer wrote: it is loaded again
            deadline = time.monotonic() + 20
            while True:
                m = re.search(r"load (\d+) of %s version (\d+) queued: the online trainer" % M,
                              s.output())
                if m and ("load %s: %s version %s active" % (m.group(1), M, m.group(2))
                          in s.output()):
                    break
                self.assertLess(time.monotonic(), deadline, s.output())
                time.sleep(0.05)
            back = int(m.group(2))
            self.assertEqual(back, answer["version"])
            self.assertLess(back, answer["rolled_back"])
            self.assertEqual(c.predict(M, PROBES[0][0], [PROBES[0][1]]).version, back)
            rolled = self.scores(c)
            self.assertNotEqual(rolled, live, "the rollback kept the online updates")
            self.assertNotIn(back, [r["version"] for r in
                                    json.loads(s.get("/v1/models")[2])["repository"]["refused"]])
            # learning goes on from the version rolled back to
            self.train(s, c, 10, first=100)
            self.wait_metric(s, 'tlserve_online_resets_total{model="%s"}' % M, 2)
            # and is exported on top of it, above the versions rolled back
            top = versions(self.repo)[-1]
            self.assertEqual(self.wait_version(c, top + 1), top + 1)
            self.assertIn("version %d (delta of %d" % (top + 1, back), s.output())
        ref_repo = os.path.join(self.tmp, "ref")
        shutil.copytree(self.repo, ref_repo)
        for n in versions(ref_repo):
            if n > back:
                shutil.rmtree(os.path.join(ref_repo, M, str(n)))
        plain = self.serve(repo=ref_repo)
        with plain.client() as c:
            self.assertEqual(self.wait_version(c, back), back)
            self.assertEqual(rolled, self.scores(c))

    def test_a_refused_version_of_another_producer_does_not_stop_the_exports(self):
        # a corrupt full version 9 renamed in above the exports: the exporter waits for
        # another producer's version to go live, but this one is refused and never will;
        # the next export goes above it (10, a delta of the version serving), not never
        s = self.online(1000)
        with s.client() as c:
            self.train(s, c, 20)
            self.wait_metric(s, 'tlserve_online_exports_total{model="%s"}' % M, 1)
            self.wait_version(c, 2)
            stage = os.path.join(self.tmp, "stage9")
            gen_model(stage, 20000, M, version=9, seed=SEED)
            shard = sorted(f for f in os.listdir(stage) if f.startswith("shard-"))[0]
            with open(os.path.join(stage, shard), "r+b") as f:
                f.seek(5000)
                b = f.read(1)
                f.seek(5000)
                f.write(bytes([b[0] ^ 0xff]))
            os.rename(stage, os.path.join(self.repo, M, "9"))
            deadline = time.monotonic() + 30
            while "version 9 of %s refused" % M not in s.output():
                self.assertLess(time.monotonic(), deadline, s.output())
                time.sleep(0.05)
            self.train(s, c, 20, first=20)
            self.assertEqual(self.wait_version(c, 10, timeout=30), 10)
        self.assertIn("exported as version 10 (delta of 2", s.output())

    def test_a_failed_export_is_retried(self):
        s = self.online()
        # a regular file where the export makes its temporary directory: mkdir fails
        block = os.path.join(self.repo, M, ".tmp-2-%d" % s.proc.pid)
        with open(block, "w") as f:
            f.write("in the way\n")
        with s.client() as c:
            self.train(s, c, 20)
            self.wait_metric(s, 'tlserve_online_export_failures_total{model="%s"}' % M, 1)
            self.assertEqual(s.metric('tlserve_online_exports_total{model="%s"}' % M), 0)
            self.train(s, c, 20, first=20)  # training goes on
            os.unlink(block)
            self.wait_metric(s, 'tlserve_online_exports_total{model="%s"}' % M, 1)
            self.wait_version(c, 2)
        self.assertRegex(s.output(), r"error: online: model 'ctr': the export of the online "
                                     r"updates .* failed: .*\.tmp-2-")


    def test_a_failed_export_at_sigterm_is_exit_status_1(self):
        """The shutdown's export cannot be written and no sample log keeps the samples: the
        ERROR line says they are lost and tlserve exits 1, not 0 as after a clean drain."""
        s = self.serve("--online", "--online-export-ms", "3600000")
        block = os.path.join(self.repo, M, ".tmp-2-%d" % s.proc.pid)
        with open(block, "w") as f:
            f.write("in the way\n")
        with s.client() as c:
            self.train(s, c, 5)
        s.proc.send_signal(signal.SIGTERM)
        rc = s.proc.wait(timeout=20)
        out = s.output()
        self.assertEqual(rc, 1, out)
        self.assertIn("were not exported at shutdown; no --sample-log-dir keeps their samples: "
                      "they are lost", out)
        self.assertIn("the online updates of 1 model(s) were not exported", out)
        self.assertEqual(versions(self.repo), [1])

    def test_a_repository_it_cannot_write_in_stops_the_start(self):
        """--online exporting into a --model-repo this process cannot write in is refused at
        start naming both flags (not a server whose every export fails); with
        --online-export-ms 0 it serves.  Root writes anywhere: as root the server runs as
        nobody (setpriv), else the repository is made read-only."""
        os.chmod(self.tmp, 0o755)
        prefix = []
        if os.geteuid() == 0:
            setpriv = shutil.which("setpriv")
            if not setpriv:
                harness.missing("root, and no setpriv to drop to nobody")
            prefix = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
            for root, dirs, files in os.walk(self.tmp):
                for n in dirs + files:
                    os.chmod(os.path.join(root, n), 0o755)
        else:
            os.chmod(self.repo, 0o555)
        try:
            self.refused_then_served_without_exports(prefix)
        finally:
            os.chmod(self.repo, 0o755)  # before tearDown removes it

    def refused_then_served_without_exports(self, prefix):
        argv = prefix + [TLSERVE, "--model-repo", self.repo, "--online", "--port",
                         str(harness.free_port()), "--admin-port", str(harness.free_port())]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        out = r.stdout + r.stderr
        self.assertNotEqual(r.returncode, 0, out)
        self.assertIn("--online exports into --model-repo %s every 10000 ms "
                      "(--online-export-ms), but this process cannot write in it" % self.repo,
                      out)
        p = subprocess.Popen(argv + ["--online-export-ms", "0"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        time.sleep(1.5)
        alive = p.poll() is None
        p.terminate()
        out = p.communicate(timeout=20)[0]
        self.assertTrue(alive, out)
        self.assertEqual(p.returncode, 0, out)

    def test_a_full_exports_copy_is_given_back(self):
        # a full export copies every row (200k keys, ~5 MB with their state rows) for its
        # write; the exports after it are small deltas and must not keep that copy for good
        repo = os.path.join(self.tmp, "big")
        gen_model(os.path.join(repo, M, "1"), 200_000, M, seed=SEED)
        a = self.online(150, "--online-full-every", "2", repo=repo)
        with a.client() as c:
            for r in range(4):
                self.train(a, c, 10, first=10 * r)
                self.wait_metric(a, 'tlserve_online_exports_total{model="%s"}' % M, r + 1)
        self.assertGreaterEqual(a.metric('tlserve_online_full_exports_total{model="%s"}' % M), 1)
        self.assertRegex(a.output(), r"exported as version \d+ \(full, lineage of \d+, 200\d{3} keys")
        self.assertLess(a.metric('tlserve_online_export_buffer_bytes{model="%s"}' % M), 1 << 20)
        # an export is the live store relabelled: the gate does not walk 200k keys again
        self.assertRegex(a.output(), r"gate: %s version 2 passed: 0 values checked, .*the active "
                                     r"version's weights relabelled: nothing new to check" % M)

    def test_every_third_export_is_full_and_a_restart_starts_from_it(self):
        a = self.online(150, "--online-full-every", "3")
        name = 'tlserve_online_exports_total{model="%s"}' % M
        with a.client() as c:
            for r in range(5):  # the third export is full (the first learns the chain's length)
                self.train(a, c, 10, first=10 * r)
                self.wait_metric(a, name, r + 1)
            self.wait_metric(a, 'tlserve_online_export_position{model="%s"}' % M, 50)
            self.assertEqual(a.metric('tlserve_online_export_position{model="%s"}' % M), 50)
            last = versions(self.repo)[-1]
            self.wait_version(c, last)
            served = harness.digest(a, M)
            served.pop("micros")  # the time it took
        self.assertGreaterEqual(a.metric('tlserve_online_full_exports_total{model="%s"}' % M), 1)
        self.assertRegex(a.output(), r"exported as version \d+ \(full, lineage of \d+")
        os.kill(a.proc.pid, 9)
        a.proc.wait()
        info = {}
        for v in versions(self.repo):
            r = subprocess.run([TLSNAP, "info", os.path.join(self.repo, M, str(v))],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            info[v] = r.stdout
        full = [v for v in info if v > 1 and "delta" not in info[v]]
        self.assertTrue(full, info)
        f = full[-1]
        self.assertIn("producer   tlserve-online log=", info[f])
        self.assertIn("(full)", info[f])
        self.assertTrue(os.path.exists(os.path.join(self.repo, M, str(f), "TRAINER_STATE")))
        self.assertIn("entries    20001", info[f])  # every key (and the bias), not the dirty ones
        later = [v for v in info if v > f]
        self.assertTrue(later, "no delta after the full export %d: %s" % (f, sorted(info)))
        self.assertIn("delta of %d" % f, info[later[0]])
        r = subprocess.run([TLSNAP, "verify", os.path.join(self.repo, M, str(f)), "--threads",
                            "1"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        b = self.online(60000, "--online-full-every", "3")  # no export before the comparison
        with b.client() as c:
            self.assertEqual(self.wait_version(c, last), last)
            deadline = time.monotonic() + 20
            while "online exports) restored" not in b.output():
                self.assertLess(time.monotonic(), deadline, b.output())
                time.sleep(0.05)
            again = harness.digest(b, M)
            again.pop("micros")
            self.assertEqual(again, served)
            self.assertIn("versions %d..%d (online exports) restored" % (f, last), b.output())
            for k in range(50, 70):  # learns on from the full export's state
                shared, samples = frame(k)
                self.assertEqual(c.train(M, shared, samples), 2)
        self.wait_metric(b, 'tlserve_online_samples_total{model="%s"}' % M, 40)
        never = os.path.join(self.tmp, "never")
        shutil.copytree(os.path.join(self.tmp, "repo", M, "1"), os.path.join(never, M, "1"))
        ref = self.serve("--online", "--online-export-ms", "0", repo=never)
        with ref.client() as c:
            self.assertEqual(self.wait_version(c, 1), 1)
            self.train(ref, c, 70)
        with b.client() as cb, ref.client() as cr:
            self.assertEqual(self.scores(cb), self.scores(cr))


if __name__ == "__main__":
    unittest.main()
