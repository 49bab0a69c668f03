"""Online learning of FM, FFM and DNN models in a real tlserve (--online).

For each kind, tlserve serves a tlsynth model (FM k = 4, FFM 4 fields x k = 2, both with
instance normalisation; a Wide & Deep DNN of 4 fields x dim 4, one hidden layer, whose MLP
stays frozen) and learns TRAIN frames into it (model/train_fm.c, train_ffm.c, train_dnn.c:
LIVE):
- the oracle is determinism: a second fresh tlserve sent the same frames scores every probe
  float for float as the first (the trainer starts from the served rows, new ids from a hash
  of the seed: nothing depends on timing), and the scores moved toward the labels (the
  clicked item's score rose, the negative's fell) from the model's original ones; ids new to
  the model are learned (an item of new ids scores other than the bias alone);
- FEEDBACK joins a PREDICT flagged LOG of an FM model: accepted, and the item's score rises;
- with --model-repo, SIGTERM exports the online updates as a delta (rows of 1 + k, 1 + F k,
  1 + dim floats; the DNN's MLP, unchanged, stays the full version's) and a plain tlserve on the repository (the chain) scores float for float as the
  online server did;
- kill -9 in the middle of training (frames still arriving, after timed exports), restart on
  the same repository and sample log: the server loads the chain and learns its log again from
  the position the newest export covers, as for LR (test_online_export.py).  What was
  acknowledged counts: every acknowledged frame is exported or learned again; the newest
  export scores float for float as a server that learned the frames before its position without
  a crash (an own export keeps the optimizer state: the exports hold exactly the live rows),
  and the restarted server, which restored the optimizer state the exports carry (Adagrad's
  sums, FM's occurrence counts: TRAINER_STATE), float for float as that server that never
  crashed once it has learned the rest of the logged frames in the same order.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_online_fm.py
"""

import os
import shutil
import subprocess
import time
import unittest

import harness
from harness import TLSERVE, TLSYNTH, ServerCase, model_key, require

SEED = 53
KEYS = 3000
KINDS = {
    "fm": ["--kind", "fm", "--value-floats", "5", "--param", "norm=1"],
    "ffm": ["--kind", "ffm", "--value-floats", "9", "--param", "fields=4", "--param", "k=2",
            "--param", "norm=1"],
    "dnn": ["--kind", "dnn", "--value-floats", "5", "--param", "fields=4", "--param", "dim=4",
            "--param", "hidden=8", "--param", "wide=1", "--mlp", "16,8,1"],
}
FRAMES = 30


def gen(out, name, args):
    r = subprocess.run([TLSYNTH, "model", "--keys", str(KEYS), "--out", out, "--name", name,
                        "--seed", str(SEED), "--shards", "4", *args],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("tlsynth model exited with %d: %s" % (r.returncode, r.stderr))


def shared_block():
    return sorted(model_key(i, SEED) for i in range(12))


def item(j):
    """Item j: 6 of the model's keys; odd j adds 2 ids new to the model."""
    ids = [model_key(200 + 10 * j + i, SEED) for i in range(6)]
    if j % 2:
        ids += [model_key(10 ** 6 + 10 * j + i, SEED) for i in range(2)]
    return sorted(ids)


# Frame k: the shared block with item 1 clicked and item 2 not (and item 3 + k % 4 either way).
def frame(k):
    return shared_block(), [(1.0, item(1)), (0.0, item(2)), (float(k % 2), item(3 + k % 4))]


PROBES = [item(j) for j in range(8)]


class OnlineFmFfm(ServerCase):
    TMP_PREFIX = "tl_online_fm_"

    @classmethod
    def setUpClass(cls):
        require(TLSERVE, TLSYNTH)

    def train(self, s, c, name):
        for k in range(FRAMES):
            shared, samples = frame(k)
            self.assertEqual(c.train(name, shared, samples), 3)
        self.wait_metric(s, 'tlserve_online_samples_total{model="%s"}' % name, 3 * FRAMES)

    @staticmethod
    def scores(c, name):
        return c.predict(name, shared_block(), PROBES).scores

    def test_learns_deterministically_toward_the_labels(self):
        for kind, args in KINDS.items():
            with self.subTest(kind=kind):
                model = os.path.join(self.tmp, kind, "1")
                gen(model, kind, args)
                a, b = self.serve(model, "--online"), self.serve(model, "--online")
                with a.client() as ca, b.client() as cb:
                    before = self.scores(ca, kind)
                    self.assertEqual(self.scores(cb, kind), before)
                    self.train(a, ca, kind)
                    self.train(b, cb, kind)
                    after_a, after_b = self.scores(ca, kind), self.scores(cb, kind)
                self.assertEqual(after_a, after_b, "two servers learned the same frames apart")
                self.assertNotEqual(after_a, before)
                self.assertGreater(after_a[1], before[1], "the clicked item's score did not rise")
                self.assertLess(after_a[2], before[2], "the negative item's score did not fall")
                self.assertIn("learns into version 1 (%s" % kind, a.output())
                self.assertEqual(a.metric('tlserve_online_resets_total{model="%s"}' % kind), 1)

    def test_settings_a_kind_does_not_use_are_named(self):
        """A --online-* setting given that the kind does not use is named in a warning."""
        for kind, args, want in (
                ("ffm", ["--online-optimizer", "adagrad", "--online-l1", "1"],
                 "FFM uses --online-l1 with ftrl only: not used"),
                ("dnn", ["--online-optimizer", "sgd", "--online-beta", "2"],
                 "learn with adagrad (--online-alpha and --online-l2 apply): "
                 "--online-optimizer sgd --online-beta not used")):
            with self.subTest(kind=kind):
                model = os.path.join(self.tmp, "opt_" + kind, "1")
                gen(model, kind, KINDS[kind])
                s = self.serve(model, "--online", *args)
                with s.client() as c:
                    self.train(s, c, kind)
                out = s.output()
                self.assertIn("warn: online: model '%s': " % kind, out)
                self.assertIn(want, out)
                self.assertIn("learns into version 1 (%s" % kind, out)
        model = os.path.join(self.tmp, "opt_ffm_default", "1")
        gen(model, "ffm", KINDS["ffm"])
        s = self.serve(model, "--online")  # ftrl, the default: FFM learns with it, no warning
        with s.client() as c:
            self.train(s, c, "ffm")
        self.assertNotIn("warn: online: model", s.output())
        self.assertIn("learns into version 1 (ffm/ftrl ", s.output())

    def test_feedback_on_an_fm_model(self):
        model = os.path.join(self.tmp, "fm", "1")
        gen(model, "fm", KINDS["fm"])
        s = self.serve(model, "--online", "--impression-window-ms", "60000")
        with s.client() as c:
            before = c.predict("fm", shared_block(), PROBES[:3], impression_id=91).scores
            ack = c.feedback("fm", [(91, 1, 1.0)])
            self.assertEqual(ack.accepted, 1)
            self.assertEqual(ack.refused, [])
            self.wait_metric(s, 'tlserve_online_samples_total{model="fm"}', 1)
            after = c.predict("fm", shared_block(), PROBES[:3]).scores
        self.assertGreater(after[1], before[1], "the clicked item's score did not rise")
        self.assertEqual(s.metric("tlserve_impression_log_puts_total"), 1)

    def test_sigterm_exports_exactly_the_live_rows(self):
        for kind, args in KINDS.items():
            with self.subTest(kind=kind):
                repo = os.path.join(self.tmp, "repo_" + kind)
                gen(os.path.join(repo, kind, "1"), kind, args)
                flags = ["--model-repo", repo, "--load-sched-idle=false"]
                s = self.serve(None, *flags, "--online", "--online-export-ms", "60000")
                with s.client() as c:
                    self.wait_version(c, kind, 1)
                    before = self.scores(c, kind)
                    self.train(s, c, kind)
                    live = self.scores(c, kind)
                self.assertNotEqual(live, before)
                self.assertEqual(s.stop(), 0)
                self.assertEqual(sorted(os.listdir(os.path.join(repo, kind))), ["1", "2"])
                plain = self.serve(None, *flags)
                with plain.client() as c:
                    self.wait_version(c, kind, 2)
                    self.assertEqual(self.scores(c, kind), live)

    def test_kill_9_in_training_restarts_from_the_newest_export(self):
        for kind, args in KINDS.items():
            with self.subTest(kind=kind):
                self.kill_9_and_restart(kind, args)

    def kill_9_and_restart(self, kind, args):
        repo = os.path.join(self.tmp, "kill_" + kind)
        gen(os.path.join(repo, kind, "1"), kind, args)
        flags = ["--model-repo", repo, "--load-sched-idle=false"]
        online = flags + ["--online", "--sample-log-dir", os.path.join(self.tmp, "log_" + kind)]
        a = self.serve(None, *online, "--online-export-ms", "100")
        with a.client() as c:
            self.wait_version(c, kind, 1)
            self.train(a, c, kind)
            self.wait_metric(a, 'tlserve_online_exports_total{model="%s"}' % kind, 1)
            self.wait_version(c, kind, 2)
        acked = FRAMES + harness.train_until_killed(a, kind, frame, FRAMES, 200, kill_at=150)
        self.assertGreater(acked, 100)
        have = sorted(int(v) for v in os.listdir(os.path.join(repo, kind)) if v.isdigit())
        self.assertGreaterEqual(len(have), 2)
        frozen = os.path.join(self.tmp, "frozen_" + kind)  # the chain as the restart finds it
        shutil.copytree(repo, frozen)
        b = self.serve(None, *online, "--online-export-ms", "60000")  # no export of its own
        n, lo, hi = harness.replayed_positions(b)  # frame k is the sample log's position k
        self.assertEqual(n, 3 * (hi - lo))
        self.assertGreaterEqual(hi, acked, "an acknowledged frame is neither exported nor replayed")
        self.assertGreater(lo, 0, "the replay did not start at an export's position")
        self.assertIn("online exports) restored", b.output())
        # the newest export: frames [0, lo) learned without a crash, from version 1
        whole = self.serve(os.path.join(frozen, kind, "1"), "--online")
        ref = self.serve(None, "--model-repo", frozen, "--load-sched-idle=false", "--online",
                         "--online-export-ms", "0")
        with whole.client() as cw, ref.client() as cr:
            for k in range(lo):
                shared, samples = frame(k)
                self.assertEqual(cw.train(kind, shared, samples), 3)
            self.wait_metric(whole, 'tlserve_online_samples_total{model="%s"}' % kind, 3 * lo)
            self.assertEqual(self.wait_version(cr, kind, have[-1]), have[-1])
            self.assertEqual(self.scores(cr, kind), self.scores(cw, kind),
                             "the newest export is not the rows learned up to its position")
            # and the restart: the server that never crashed, after frames [lo, hi) too
            for k in range(lo, hi):
                shared, samples = frame(k)
                self.assertEqual(cw.train(kind, shared, samples), 3)
            self.wait_metric(whole, 'tlserve_online_samples_total{model="%s"}' % kind, 3 * hi)
            with b.client() as cb:
                self.assertEqual(cb.predict(kind, shared_block(), PROBES[:1]).version, have[-1])
                self.assertEqual(self.scores(cb, kind), self.scores(cw, kind))
        for s in (b, whole, ref):  # an ASan/UBSan build reports here
            self.assertNotIn("runtime error", s.output())

    def wait_version(self, c, name, want, timeout=20):
        deadline = time.monotonic() + timeout
        while True:
            try:
                v = c.predict(name, shared_block(), PROBES[:1]).version
                if v >= want:
                    return v
            except Exception:  # noqa: BLE001 - not loaded yet
                pass
            self.assertLess(time.monotonic(), deadline, "version %d never went live" % want)
            time.sleep(0.02)


if __name__ == "__main__":
    unittest.main()
