"""Online exports in partitioned bus mode (--bus-mode partitioned with --model-repo and
--online-export-ms; server/online_sync_export.c) over a real 3-node NATS JetStream cluster.

Two LR-FTRL replicas, each with its own repository and sample log, learn half of a TRAIN stream
each and exchange their (dz, dn) as 1-bit messages; each exports its values on a 150 ms timer
with SYNC_STATE beside them (per peer the last sequence applied into the values, its own last
sequence and its accumulators' residual).  Replica b is killed (-9) while both are training,
after several exports, and started again on the same repository, sample log and node name.

- test_restart_resumes_from_export: b2 loads its last export, learns only the sample log after
  the export's position (tlserve_online_replayed_total below what b had learned), resumes each
  peer's updates after the recorded sequence (its log line) and skips what the export holds
  (tlserve_sync_resume_skipped_total > 0).  Once settled the two replicas' PREDICT scores agree
  within 1e-5 (the same z, n summed in another order: float rounding).  With a piece disabled
  they never agree (measured, first probes): the peers' positions ignored (their updates counted
  twice) 0.16 apart, the residual not put back 0.06, own messages up to the recorded sequence
  subtracted again 0.3.  A control pair that gets the same frames and never crashes is not
  equal to them: a replica's dz uses its own weights at the time of the step, which depend on
  when its peer's messages arrived, and the restarted b relearned its last records on another
  interleaving.  Measured max |crashed pair - control pair| over 30 probes: 0.005-0.036 in ten
  runs (two pairs that never crash differ by 0-0.055 on a similar stream: message timing alone),
  while the control moves 0.26 from the snapshot.  Asserted: <= CONTROL_DELTA and under a third
  of how far the control moved.  Then b2, sent more frames, exits 0 on SIGTERM with everything
  exported (the shutdown's export takes its cut after the last turns).
- test_full_exports_carry_it: with --online-full-every 2 every export, full or delta, carries
  SYNC_STATE, and the restart resumes and agrees the same way.
- test_fm_restart_resumes_from_export, test_ffm_restart_resumes_from_export: an FM and an FFM
  model (the rows' (dx, dG) exchange): the same restart from an export, the same agreement
  within 1e-5.
- test_dnn_restart_resumes_from_export: a DNN, whose MLP is exchanged as DENSE messages (1-bit
  Adam): the export's SYNC_STATE also holds the trainer's MLP and its 1-bit Adam state (moments,
  frozen variance, step counts, pending delta, error vector); the restart restores them, learns
  only the sample log after the export's position (exactly those samples), skips what the
  export holds and agrees with a within 1e-5; a full export's MLP arrays are the learned MLP.
  Each piece disabled in turn (the MLP not restored; only the MLP, not its 1-bit Adam state;
  own DENSE messages up to the recorded sequence subtracted again; peers' DENSE messages up to
  their positions applied again) never agrees within 1e-5 (60 s; measured once each).
- test_peer_message_first: b's model first seen in a's update message (the consumer creates it
  and attaches its trainer, maybe before the trainer thread set up its exports): b's exports
  still name version 1 as their parent and are written; SIGTERM exits 0.  Without the fix every
  export of b failed ("another producer's") and the shutdown exited 1 (2 of 2 runs).
- test_bad_sync_state_falls_back: SYNC_STATE of b's newest export cut short before the restart:
  a WARN names the file, b's online exports are set aside (void-*), version 1 loads, the whole
  sample log is learned again and the stream read from its start (its own earlier messages
  subtracted, as without exports), and the replicas agree within 1e-5 again.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_online_sync_export.py
"""

import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import natscluster  # noqa: E402
from harness import (TLSERVE, TLSYNTH, Server, gen_model, replica_frame,  # noqa: E402
                     replica_sample, require)
import test_online_fm as fmt  # noqa: E402

SEED = 43
M = "ctr"
INTERVAL_MS = 50
# |crashed pair - control pair| over 30 probes: measured 0.005-0.036 (see the docstring)
CONTROL_DELTA = 0.12
_cluster = None


def setUpModule():
    global _cluster
    require(TLSERVE, TLSYNTH)
    _cluster = natscluster.start("tl_osync_export_")


def tearDownModule():
    _cluster.stop()


class PartitionedExports(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tl_osexp_")
        self.model = os.path.join(self.tmp, "m", M, "1")
        gen_model(self.model, 20000, M, seed=SEED)
        self.servers = []

    def tearDown(self):
        """Every server still running exits 0 on SIGTERM (the last exact turns, the shutdown's
        export and its cut), with no sanitizer report in its output."""
        problems = harness.sigterm_all(self.servers)
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.assertEqual(problems, [])

    def replica(self, name, stream, export=True, extra=(), model=None, mname=M):
        repo = os.path.join(self.tmp, "repo_" + name)
        if not os.path.isdir(repo):
            shutil.copytree(model or self.model, os.path.join(repo, mname, "1"))
        extra = (("--online-export-ms", "150") if export else ()) + tuple(extra)
        s = Server(None, "--model-repo", repo, "--load-sched-idle=false", *extra, "--online",
                   "--sample-log-dir", os.path.join(self.tmp, "log_" + name),
                   "--bus-servers", _cluster.urls, "--bus-stream", stream, "--bus-node", name,
                   "--bus-subject-prefix", stream.lower(), "--bus-mode", "partitioned",
                   "--sync-interval-ms", str(INTERVAL_MS), "--sync-topk", "0.25",
                   "--gate-sample", "0", "--guard-window-ms", "0")
        self.servers.append(s)
        # the stream checked or created and read to its end (a new stream's leader election can
        # take seconds on a busy host): before that a replica learns alone and, not having read
        # the stream, neither publishes nor takes an export's cut
        self.wait("the stream read", lambda: s.metric("tlserve_sync_caught_up") == 1, s,
                  timeout=60)
        return s

    def learned(self, s):
        return s.metric('tlserve_online_samples_total{model="%s"}' % M)

    def wait(self, what, cond, s, timeout=30):
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                self.fail("%s never happened: %s\n%s" % (what, s.metrics()[-2500:],
                                                         s.output()[-3000:]))
            time.sleep(0.05)

    def send(self, s, ks):
        with s.client() as c:
            for k in ks:
                shared, samples = replica_frame(k, SEED)
                self.assertEqual(c.train(M, shared, samples), len(samples))

    def scores(self, s, probes=30):
        out = []
        with s.client() as c:
            for j in range(probes):
                shared, item = replica_sample(j, SEED)
                out.append(c.predict(M, shared, [item]).scores[0])
        return out

    def exports(self, s):
        return s.metric('tlserve_online_exports_total{model="%s"}' % M)

    def train_and_crash(self, a, b):
        """Three rounds split between a and b, each exported by both; then frames to b (acked,
        maybe not yet published or exported) and, while a learns more, b is killed -9.
        Returns the frames each got: (a's, b's)."""
        fa, fb = [], []
        for r in range(3):
            ks = range(r * 40, (r + 1) * 40)
            fa += ks[0::2]
            fb += ks[1::2]
            self.send(a, ks[0::2])
            self.send(b, ks[1::2])
            self.wait("round %d learned" % r, lambda: self.learned(a) >= (r + 1) * 40 and
                      self.learned(b) >= (r + 1) * 40, b)
            harness.sync_settled(a, b, INTERVAL_MS)
            self.wait("an export of round %d" % r, lambda: b.metric(
                'tlserve_online_export_position{model="%s"}' % M) >= 20 * (r + 1), b)
        sender = threading.Thread(target=self.send_slowly, args=(a, range(140, 160)))
        sender.start()
        self.send_slowly(b, range(120, 140))
        fb += range(120, 140)
        os.kill(b.proc.pid, signal.SIGKILL)
        b.proc.wait()
        sender.join()
        fa += range(140, 160)
        return fa, fb

    def send_slowly(self, s, ks):
        """Frames spread over about 20 turns and 3 export ticks: exports cut mid-exchange."""
        with s.client() as c:
            for k in ks:
                shared, samples = replica_frame(k, SEED)
                self.assertEqual(c.train(M, shared, samples), len(samples))
                time.sleep(0.025)

    def finish(self, a, b2):
        self.send(b2, range(160, 170))
        self.send(a, range(170, 180))
        self.wait("a learned", lambda: self.learned(a) >= 2 * (60 + 20 + 10), a)
        try:
            return harness.sync_agree(a, b2, self.scores, INTERVAL_MS)
        except AssertionError:
            if os.environ.get("TL_DEBUG"):
                print("A:\n" + a.output() + "\nB2:\n" + b2.output(), file=sys.stderr)
            raise

    def control(self, fa, fb):
        """A pair on its own stream given the same frames, never crashed: its scores."""
        stream = "C%d" % random.randrange(1 << 30)
        c, d = self.replica("c", stream, export=False), self.replica("d", stream, export=False)
        for r in range(3):
            ks = range(r * 40, (r + 1) * 40)
            self.send(c, ks[0::2])
            self.send(d, ks[1::2])
            self.wait("control round %d" % r, lambda: self.learned(c) >= (r + 1) * 40 and
                      self.learned(d) >= (r + 1) * 40, d)
            harness.sync_settled(c, d, INTERVAL_MS)
        sender = threading.Thread(target=self.send_slowly, args=(c, range(140, 160)))
        sender.start()
        self.send_slowly(d, range(120, 140))
        sender.join()
        self.send(d, range(160, 170))
        self.send(c, range(170, 180))
        self.wait("control learned", lambda: self.learned(c) >= 180 and self.learned(d) >= 180, d)
        return harness.sync_agree(c, d, self.scores, INTERVAL_MS)

    def test_restart_resumes_from_export(self):
        stream = "X%d" % random.randrange(1 << 30)
        a, b = self.replica("a", stream), self.replica("b", stream)
        before = self.scores(a)
        fa, fb = self.train_and_crash(a, b)
        b_log = 2 * len(fb)  # samples in b's sample log (every frame was acknowledged)
        b2 = self.replica("b", stream)
        self.wait("b2's replay", lambda: "learned again from the sample log" in b2.output(), b2)
        sa = self.finish(a, b2)
        out = b2.output()
        replayed = b2.metric('tlserve_online_replayed_total{model="%s"}' % M)
        self.assertIn("is an online export covering the sample log below", out)
        self.assertRegex(out, r"resumes the update exchange of export \d+ \(lineage of version 1\): "
                         r"[1-9]\d* residual keys back in its accumulators, its own messages "
                         r"after sequence [1-9]")
        self.assertRegex(out, r"producer [0-9a-f]{16} resumes after sequence [1-9]")
        self.assertLess(replayed, b_log - 60, "b2 learned its whole sample log again")
        self.assertGreater(b2.metric("tlserve_sync_resume_skipped_total"), 0)
        self.assertEqual(a.metric("tlserve_sync_gap_total"), 0)
        self.assertEqual(b2.metric("tlserve_sync_refused_version_total"), 0)
        self.assertEqual(a.metric("tlserve_sync_refused_version_total"), 0)
        sc = self.control(fa, fb)
        far = max(abs(x - y) for x, y in zip(sa, sc))
        moved = max(abs(x - y) for x, y in zip(sc, before))
        print("\npartitioned exports: replayed %d of %d, max |crashed pair - control| %.5f, "
              "the control moved by %.5f" % (replayed, b_log, far, moved), file=sys.stderr)
        self.assertLessEqual(far, CONTROL_DELTA)
        self.assertLess(far, moved / 3)
        self.send(b2, range(190, 200))  # learned, maybe not yet exported: the shutdown does
        b2.proc.send_signal(signal.SIGTERM)  # the last turns, then the last export (its cut)
        self.assertEqual(b2.proc.wait(timeout=20), 0, b2.output())
        out = b2.output()
        self.assertNotIn("not exported at shutdown", out)
        self.assertRegex(out, r"exported as version \d+ \(delta of \d+, \d+ keys, sample log below "
                         r"position %d\)" % (len(fb) + 20))

    def test_full_exports_carry_it(self):
        """--online-full-every 2: every other export is a FULL version, with the same
        SYNC_STATE; the restart's chain starts at one."""
        stream = "Z%d" % random.randrange(1 << 30)
        full = ("--online-full-every", "2")
        a, b = self.replica("a", stream, extra=full), self.replica("b", stream, extra=full)
        self.train_and_crash(a, b)
        b2 = self.replica("b", stream, extra=full)
        self.wait("b2's replay", lambda: "learned again from the sample log" in b2.output(), b2)
        self.finish(a, b2)
        out = b2.output()
        self.assertIn("resumes the update exchange of export", out)
        self.assertGreater(b2.metric("tlserve_sync_resume_skipped_total"), 0)
        self.assertIn("(full, lineage", b.output())  # b wrote full versions before the kill
        mdir = os.path.join(self.tmp, "repo_b", M)
        exported = [v for v in os.listdir(mdir) if v.isdigit() and int(v) > 1]
        self.assertGreaterEqual(len(exported), 3)
        for v in exported:  # full and delta versions alike
            self.assertTrue(os.path.exists(os.path.join(mdir, v, "SYNC_STATE")), v)

    def test_fm_restart_resumes_from_export(self):
        """The rows' exchange (FM: (dx, dG) of each row) is exported and resumed the same way."""
        self.rows_restart("fm")

    def test_ffm_restart_resumes_from_export(self):
        """FFM's rows (1 + fields x k floats) the same way."""
        self.rows_restart("ffm")

    def rows_restart(self, kind, extra=()):
        """Two replicas of kind exporting, b killed -9 mid-training and restarted from its
        last export; both agree within 1e-5 once settled.  Returns (a, b, b2)."""
        model = os.path.join(self.tmp, kind, "1")
        fmt.gen(model, kind, fmt.KINDS[kind])
        stream = "F%d" % random.randrange(1 << 30)
        a = self.replica("a", stream, model=model, mname=kind, extra=extra)
        b = self.replica("b", stream, model=model, mname=kind, extra=extra)

        def send(s, ks, pause=0.0):
            with s.client() as c:
                for k in ks:
                    shared, samples = fmt.frame(k)
                    self.assertEqual(c.train(kind, shared, samples), len(samples))
                    time.sleep(pause)

        def learned(s):
            return s.metric('tlserve_online_samples_total{model="%s"}' % kind)

        for r in range(3):
            send(a, range(10 * r, 10 * r + 10, 2))
            send(b, range(10 * r + 1, 10 * r + 10, 2))
            self.wait("%s round %d" % (kind, r), lambda: learned(a) >= 15 * (r + 1) and
                      learned(b) >= 15 * (r + 1), b)
            harness.sync_settled(a, b, INTERVAL_MS)
            self.wait("%s export %d" % (kind, r), lambda: b.metric(
                'tlserve_online_export_position{model="%s"}' % kind) >= 5 * (r + 1), b)
        sender = threading.Thread(target=send, args=(a, range(40, 60), 0.025))
        sender.start()
        send(b, range(30, 40), 0.05)
        os.kill(b.proc.pid, signal.SIGKILL)
        b.proc.wait()
        sender.join()
        b2 = self.replica("b", stream, model=model, mname=kind, extra=extra)
        self.wait("b2's replay", lambda: "learned again from the sample log" in b2.output(), b2)
        send(b2, range(60, 65))
        self.wait("a learned", lambda: learned(a) >= 3 * 15 + 60, a)
        def scores(s):
            with s.client() as c:
                return c.predict(kind, fmt.shared_block(), fmt.PROBES).scores

        harness.sync_agree(a, b2, scores, INTERVAL_MS)
        self.assertIn("resumes the update exchange of export", b2.output())
        self.assertGreater(b2.metric("tlserve_sync_resume_skipped_total"), 0)
        replayed = b2.metric('tlserve_online_replayed_total{model="%s"}' % kind)
        self.assertLess(replayed, 3 * 15 + 30)
        return a, b, b2

    def test_dnn_restart_resumes_from_export(self):
        """A DNN: its rows as FM's, and its MLP (DENSE messages, 1-bit Adam, past its warm-up
        of 10 local steps before the kill) exported in SYNC_STATE's MLP section: b2 restores
        the trainer's MLP and its 1-bit Adam state from the export, learns only its sample log
        after the export's position, skips the messages the export holds, and agrees with a
        within 1e-5 (as the others).  Every other export is full (--online-full-every 2): its
        MLP arrays are the learned MLP, not the snapshot's."""
        dnn = ("--sync-dnn-warmup", "10", "--sync-dnn-lr", "0.01", "--online-full-every", "2")
        a, b, b2 = self.rows_restart("dnn", dnn)
        out = b2.output()
        self.assertRegex(out, r"model 'dnn': resumes its MLP of [1-9]\d* parameters and its "
                         r"1-bit Adam after [1-9]\d* local steps from export \d+")
        self.assertNotIn("no exports in the partitioned bus mode", out)
        # the replay: from the export's position P > 0 to the log's end (b's 25 frames), only
        pos = re.search(r"covering the sample log below (\d+): replayed from there", out)
        self.assertIsNotNone(pos, out[-3000:])
        p = int(pos.group(1))
        self.assertGreater(p, 0)
        self.assertRegex(out, r"%d samples of positions %d\.\.25 learned again" % (
            3 * (25 - p), p))
        self.assertEqual(b2.metric('tlserve_online_replayed_total{model="dnn"}'), 3 * (25 - p))
        for s in (a, b2):
            self.assertGreater(s.metric("tlserve_sync_dnn_applied_total"), 0)
            self.assertEqual(s.metric("tlserve_sync_dnn_refused_total"), 0)
            self.assertEqual(s.metric("tlserve_sync_refused_version_total"), 0)
            self.assertEqual(s.metric("tlserve_sync_gap_total"), 0)
            self.assertEqual(s.metric("tlserve_sync_dnn_warmup_over"), 1)
        # a full export of b, loaded alone, serves an MLP other than the snapshot's
        fulls = re.findall(r"model 'dnn': online updates exported as version (\d+) \(full, "
                           r"lineage", b.output())
        self.assertTrue(fulls, b.output()[-3000:])
        snap = Server(os.path.join(self.tmp, "dnn", "1"), "--gate-sample", "0")
        full = Server(os.path.join(self.tmp, "repo_b", "dnn", fulls[-1]), "--gate-sample", "0")
        self.servers += [snap, full]
        self.assertNotEqual(harness.digest(full, "dnn")["mlp"], harness.digest(snap, "dnn")["mlp"])

    def test_peer_message_first(self):
        """b's model is first seen in a peer's message: the consumer creates it (and its
        trainer thread) and attaches the trainer itself, maybe before that thread set up its
        exports.  b's exports still name version 1 as their parent: they are written (none
        refused as "another producer's"), and SIGTERM exits 0."""
        stream = "P%d" % random.randrange(1 << 30)
        a, b = self.replica("a", stream), self.replica("b", stream)
        self.send(a, range(0, 20))
        self.wait("a's messages applied by b", lambda: b.metric(
            "tlserve_sync_applied_total") > 0, b)
        self.send(b, range(20, 40))
        self.wait("b learned", lambda: self.learned(b) >= 40, b)
        self.wait("an export of b", lambda: self.exports(b) >= 1, b)
        self.assertNotIn("another producer's", b.output())
        cut = 'tlserve_sync_cut%s{model="%s"}'  # each export's cut: its hold is measured
        self.assertGreaterEqual(b.metric(cut % ("s_total", M)), 1)
        self.assertGreater(b.metric(cut % ("_seconds_total", M)), 0)
        self.assertGreater(b.metric(cut % ("_max_seconds", M)), 0)
        self.assertRegex(b.output(), r"the update exchange's cut 0\.\d{4} s of it, copying \d+ "
                         r"residual keys")
        b.proc.send_signal(signal.SIGTERM)
        self.assertEqual(b.proc.wait(timeout=20), 0, b.output()[-3000:])

    def test_bad_sync_state_falls_back(self):
        stream = "Y%d" % random.randrange(1 << 30)
        a, b = self.replica("a", stream), self.replica("b", stream)
        _, fb = self.train_and_crash(a, b)
        mdir = os.path.join(self.tmp, "repo_b", M)
        top = max(int(v) for v in os.listdir(mdir) if v.isdigit())
        self.assertGreater(top, 1)
        path = os.path.join(mdir, str(top), "SYNC_STATE")
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        b2 = self.replica("b", stream)
        self.wait("b2's replay", lambda: "learned again from the sample log" in b2.output(), b2)
        self.finish(a, b2)
        out = b2.output()
        self.assertIn(path, out)
        self.assertIn("set aside", out)
        self.assertTrue([v for v in os.listdir(mdir) if v.startswith("void-%d-" % top)])
        self.assertEqual(b2.metric('tlserve_online_replayed_total{model="%s"}' % M), 2 * len(fb))
        self.assertGreater(b2.metric("tlserve_sync_own_subtracted_total"), 0)
        self.assertEqual(b2.metric("tlserve_sync_resume_skipped_total"), 0)


if __name__ == "__main__":
    unittest.main()
