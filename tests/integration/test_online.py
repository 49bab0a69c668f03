"""Online learning in a real tlserve (--online): TRAIN frames learned into the served model.

tlserve serves an LR model (tlsynth) with --online.  TRAIN frames of one positive sample are
acknowledged with the samples they carry, and the PREDICT of that sample rises until it is
above where it started (the weights are written into the served store: no reload); the
progressive figures in /metrics count what was learned; a client scoring throughout never
fails.  What a client can get wrong or overdo is refused with a sentence: a TRAIN for a model
that is not served (UNKNOWN_MODEL), a label that is not 0 or 1 or a feature value beyond
--online-max-feature-value (BAD_VALUE; a FEEDBACK's joined sample holding one is skipped and
counted: a step on it could stop training), a model whose kind
does not learn online (one stored as fp16: UNKNOWN_TYPE naming the kind; FM, FFM and DNN
models learn: test_online_fm.py), more samples/s than --online-max-samples-per-s and a queue that is full
(OVERLOADED); without --online a TRAIN is UNKNOWN_TYPE.  A new version loaded through the admin API makes the trainer start over from
its weights.

FEEDBACK: a PREDICT flagged LOG is kept; a FEEDBACK for one of its items is accepted and
learned (the item's score rises), one for an item out of range, an unknown impression or an
item that has its feedback already is refused with its reason, and once the window passes the
items without feedback are learned as negatives.  A FEEDBACK with a bad label, weight or
impression id is BAD_VALUE naming the field; one past the samples/s cap is OVERLOADED after the
events that fit.

Nothing lost (--sample-log-dir): tlserve is killed (SIGKILL) while TRAIN frames stream in;
restarted on the same directories it learns its sample log again, and then scores, float for
float, as a server that learned the same frames (every acknowledged one, and any appended
after the last acknowledgement) without a crash.

Run: TL_BUILD_DIR=build python3 -m unittest tests/integration/test_online.py
"""

import os
import signal
import subprocess
import threading
import time
import unittest

import harness
import tlserve
from harness import TLSERVE, TLSYNTH, ServerCase, free_port, gen_model, model_key, require
from tlserve.errors import ServerError
from tlserve.feedback import Refusal, encode_feedback
from tlserve.wire import MsgType, encode_train

TOKEN = "online-test-token"
SEED = 31


def sample(j):
    """A shared block and one item block of the model's keys."""
    shared = sorted(model_key(i, SEED) for i in range(30))
    item = sorted(model_key(1000 + 10 * j + i, SEED) for i in range(10))
    return shared, item


class Scorer(threading.Thread):
    """Scores a request in a loop; records failures."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stopping, self.answers, self.failures = port, False, 0, []

    def run(self):
        shared, item = sample(7)
        try:
            with tlserve.Client("127.0.0.1", self.port, timeout=10) as c:
                while not self.stopping:
                    c.predict("ctr", shared, [item])
                    self.answers += 1
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            self.failures.append(repr(e))


class Online(ServerCase):
    TMP_PREFIX = "tl_online_"

    @classmethod
    def setUpClass(cls):
        require(TLSERVE, TLSYNTH)

    def setUp(self):
        super().setUp()
        self.model = os.path.join(self.tmp, "ctr", "1")
        gen_model(self.model, 20000, "ctr", seed=SEED)

    def test_train_moves_the_served_prediction(self):
        s = self.serve(self.model, "--online")
        scorer = Scorer(s.port)
        scorer.start()
        shared, item = sample(1)
        with s.client() as c:
            p0 = c.predict("ctr", shared, [item]).scores[0]
            frames = 40
            for _ in range(frames):
                self.assertEqual(c.train("ctr", shared, [(1.0, item), (1.0, item)]), 2)
            self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 2 * frames)
            p1 = c.predict("ctr", shared, [item]).scores[0]
            self.assertGreater(p1, p0, "80 positive steps did not raise the served score")
            # negatives bring it down again
            for _ in range(frames):
                c.train("ctr", shared, [(0.0, item)] * 4)
            self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 6 * frames)
            p2 = c.predict("ctr", shared, [item]).scores[0]
            self.assertLess(p2, p1)
        scorer.stopping = True
        scorer.join(10)
        self.assertEqual(scorer.failures, [])
        self.assertGreater(scorer.answers, 0)
        m = s.metrics()
        self.assertIn('tlserve_online_frames_total{model="ctr"} %d' % (2 * frames), m)
        self.assertIn('tlserve_online_positives_total{model="ctr"} %d' % (2 * frames), m)
        ll = s.metric('tlserve_online_logloss{model="ctr"}')
        self.assertTrue(0 < ll < 10, ll)
        # the window's figures: 40 positives then 160 negatives of one item, each scored before
        # it was learned: some ranking to do, a mean prediction above the mean label
        deadline = time.time() + 5  # published at most every 100 ms once the queue is empty
        while True:
            auc = s.metric('tlserve_online_window_auc{model="ctr"}')
            if auc == auc or time.time() > deadline:  # NaN until both labels were published
                break
            time.sleep(0.05)
        self.assertTrue(0 <= auc <= 1, auc)
        calib = s.metric('tlserve_online_window_calibration{model="ctr"}')
        self.assertGreater(calib, 1.0)  # the negatives came after the model had learned positives
        p50 = s.metric('tlserve_online_freshness_seconds{model="ctr",quantile="0.5"}')
        p99 = s.metric('tlserve_online_freshness_seconds{model="ctr",quantile="0.99"}')
        self.assertTrue(0 < p50 <= p99 < 10, (p50, p99))
        self.assertEqual(s.metric('tlserve_online_resets_total{model="ctr"}'), 1)
        self.assertEqual(s.metric('tlserve_online_version{model="ctr"}'), 1)

    def test_refusals(self):
        s = self.serve(self.model, "--online", "--online-max-samples-per-s", "50")
        shared, item = sample(2)
        with s.client() as c:
            with self.assertRaises(ServerError) as e:
                c.train("nope", shared, [(1.0, item)])
            self.assertEqual(e.exception.name, "UNKNOWN_MODEL")
            # a label of 0.5 (the client refuses to encode one: check=False)
            rid = c.send_frame(MsgType.TRAIN, encode_train("ctr", shared, [(0.5, item)],
                                                           check=False))
            with self.assertRaises(ServerError) as e:
                c._raise_if_error(c.wait_for(rid))
            self.assertEqual(e.exception.name, "BAD_VALUE")
            self.assertIn("label", e.exception.message)
            overloaded = None
            for _ in range(20):  # 20 x 10 samples: past a second's 50
                try:
                    c.train("ctr", shared, [(1.0, item)] * 10)
                except ServerError as ex:
                    overloaded = ex
                    break
            self.assertIsNotNone(overloaded)
            self.assertEqual(overloaded.name, "OVERLOADED")
            self.assertIn("50 samples/s", overloaded.message)
            with self.assertRaises(ServerError) as e:  # more than a second's 50: never taken
                c.train("ctr", shared, [(1.0, item)] * 51)
            self.assertEqual(e.exception.name, "TOO_MANY_ITEMS")
            self.assertIn("split it", e.exception.message)
            c.predict("ctr", shared, [item])  # the connection and PREDICT still work
        self.assertGreaterEqual(
            s.metric('tlserve_online_refused_total{model="ctr",reason="rate"}'), 1)

    def test_a_frame_larger_than_the_queue(self):
        s = self.serve(self.model, "--online", "--online-queue-bytes", "65536")
        shared, _ = sample(3)
        big = [(1.0, sorted(model_key(5000 + 100 * j + i, SEED) for i in range(100)))
               for j in range(60)]  # about 60 x 800 bytes
        with s.client() as c:
            with self.assertRaises(ServerError) as e:
                c.train("ctr", shared, big)
            self.assertEqual(e.exception.name, "TOO_MANY_ITEMS")  # never taken: not a retry
            self.assertIn("--online-queue-bytes", e.exception.message)
            self.assertIn("split it", e.exception.message)

    def test_kind_and_off(self):
        dnn = os.path.join(self.tmp, "dnn", "1")
        subprocess.run([TLSYNTH, "model", "--keys", "2000", "--kind", "dnn", "--value-floats", "5",
                        "--param", "fields=6", "--param", "dim=4", "--param", "hidden=16,8",
                        "--param", "wide=1", "--mlp", "24,16,8,1", "--dtype", "f16",
                        "--name", "dnn", "--out", dnn], check=True, stdout=subprocess.DEVNULL)
        s = self.serve(dnn, "--online")
        shared, item = sample(4)
        with s.client() as c:
            with self.assertRaises(ServerError) as e:
                c.train("dnn", shared, [(1.0, item)])
            self.assertEqual(e.exception.name, "UNKNOWN_TYPE")
            self.assertIn("dnn", e.exception.message)
            self.assertIn("fp16", e.exception.message)
            self.assertIn("LR", e.exception.message)
        off = self.serve(self.model)
        with off.client() as c:
            with self.assertRaises(ServerError) as e:
                c.train("ctr", shared, [(1.0, item)])
            self.assertEqual(e.exception.name, "UNKNOWN_TYPE")
            self.assertIn("--online", e.exception.message)

    def test_new_version_restarts_the_trainer(self):
        s = self.serve(self.model, "--online", "--model-root", self.tmp, token=TOKEN)
        v2 = os.path.join(self.tmp, "ctr", "2")
        gen_model(v2, 20000, "ctr", version=2, seed=SEED + 1)
        shared, item = sample(5)
        with s.client() as c:
            c.train("ctr", shared, [(1.0, item)])
            self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 1)
            st, _, body = harness.http(s.admin_port, "/v1/models/ctr:load?wait=1", "POST",
                                       ('{"path": "%s"}' % v2).encode(),
                                       {"Authorization": "Bearer " + TOKEN}, timeout=60)
            self.assertEqual(st, 200, body)
            deadline = time.monotonic() + 20
            while c.predict("ctr", shared, [item]).version != 2:
                self.assertLess(time.monotonic(), deadline, "version 2 never went live")
                time.sleep(0.05)
            c.train("ctr", shared, [(1.0, item)])
            self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 2)
        self.assertEqual(s.metric('tlserve_online_resets_total{model="ctr"}'), 2)
        self.assertEqual(s.metric('tlserve_online_version{model="ctr"}'), 2)

    def test_an_exploding_weight_stops_training_and_is_never_served(self):
        # the bound on feature values at its most, so that a huge one reaches the trainer
        s = self.serve(self.model, "--online", "--online-max-feature-value", "1e30")
        shared, item = sample(8)
        huge = tlserve.make_block(item, [9e29] * len(item))
        with s.client() as c:
            self.assertEqual(c.train("ctr", shared, [(1.0, item)]), 1)
            # label 0 after the positive: g = 1, g x = 9e29, and FTRL's n = (g x)^2 overflows
            self.assertEqual(c.train("ctr", shared, [(0.0, huge)]), 1)  # within the bound
            self.wait_metric(s, 'tlserve_online_halted{model="ctr"}', 1)
            for _ in range(3):
                c.train("ctr", shared, [(1.0, item)])
            self.wait_metric(s, 'tlserve_online_dropped_total{model="ctr"}', 4)
            scores = c.predict("ctr", shared, [item, huge.ids]).scores
            self.assertTrue(all(0 <= x <= 1 for x in scores), scores)  # finite, served
        self.assertIn("training stopped", s.output())

    def test_a_huge_feature_value_is_refused_not_learned(self):
        """A value beyond --online-max-feature-value (1e6) is BAD_VALUE for a TRAIN, and a
        FEEDBACK's joined sample holding one is skipped and counted: training goes on."""
        s = self.serve(self.model, "--online", "--impression-window-ms", "60000")
        shared, item = sample(8)
        huge = tlserve.make_block(item, [3e38] * len(item))
        with s.client() as c:
            with self.assertRaises(ServerError) as e:
                c.train("ctr", shared, [(1.0, item), (0.0, huge)])
            self.assertEqual(e.exception.name, "BAD_VALUE")
            self.assertIn("beyond +-1e+06 (--online-max-feature-value)", str(e.exception))
            c.predict("ctr", shared, [huge], impression_id=91)
            self.assertEqual(c.feedback("ctr", [(91, 0, 1.0)]).accepted, 1)
            self.wait_metric(s, 'tlserve_online_bad_values_total{model="ctr"}', 2)
            self.assertEqual(c.train("ctr", shared, [(1.0, item)]), 1)
            self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 1)
        self.assertEqual(s.metric('tlserve_online_halted{model="ctr"}'), 0)
        self.assertIn("a queued sample not learned", s.output())

    def test_feedback_joins_impressions_and_negatives_follow(self):
        s = self.serve(self.model, "--online", "--impression-window-ms", "700")
        shared, _ = sample(6)
        items = [sample(60 + j)[1] for j in range(4)]
        with s.client() as c:
            before = c.predict("ctr", shared, items, impression_id=77).scores
            ack = c.feedback("ctr", [(77, 1, 1.0), (77, 9, 1.0), (78, 0, 1.0), (77, 1, 1.0)])
            self.assertEqual(ack.accepted, 1)
            self.assertEqual([(r.event, r.reason) for r in ack.refused],
                             [(1, Refusal.ITEM_OUT_OF_RANGE), (2, Refusal.UNKNOWN_IMPRESSION),
                              (3, Refusal.DUPLICATE)])
            self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 1)
            after = c.predict("ctr", shared, items).scores
            self.assertGreater(after[1], before[1], "the clicked item's score did not rise")
            # the window passes: items 0, 2 and 3 become negatives
            self.wait_metric(s, "tlserve_impression_log_negatives_emitted_total", 3)
            self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 4)
            self.assertEqual(s.metric('tlserve_online_positives_total{model="ctr"}'), 1)
            late = c.feedback("ctr", [(77, 0, 1.0)])
            self.assertEqual([(r.event, r.reason) for r in late.refused],
                             [(0, Refusal.UNKNOWN_IMPRESSION)])
            with self.assertRaises(ServerError) as e:
                c.feedback("nope", [(77, 0, 1.0)])
            self.assertEqual(e.exception.name, "UNKNOWN_MODEL")
            zero = c.feedback("ctr", [(999, 0, 1.0, 0.0)])  # weight 0 is checked all the same
            self.assertEqual([(r.event, r.reason) for r in zero.refused],
                             [(0, Refusal.UNKNOWN_IMPRESSION)])
        self.assertEqual(s.metric("tlserve_impression_log_puts_total"), 1)

    def test_feedback_refusals(self):
        """A FEEDBACK a client got wrong is BAD_VALUE naming the field; one past the samples/s
        cap is OVERLOADED after the events that fit (a retry: DUPLICATE for those); the
        connection and PREDICT keep working."""
        s = self.serve(self.model, "--online", "--online-max-samples-per-s", "5")
        shared, _ = sample(8)
        items = [sample(80 + j)[1] for j in range(10)]
        with s.client() as c:
            c.predict("ctr", shared, items, impression_id=91)
            for events, field in (([(91, 0, 0.5)], "label"), ([(91, 0, 1.0, -1.0)], "weight"),
                                  ([(91, 0, 1.0, float("nan"))], "weight"),
                                  ([(0, 0, 1.0)], "impression")):
                rid = c.send_frame(MsgType.FEEDBACK, encode_feedback("ctr", events,
                                                                     check=False))
                with self.assertRaises(ServerError) as e:
                    c._raise_if_error(c.wait_for(rid))
                self.assertEqual(e.exception.name, "BAD_VALUE", events)
                self.assertIn(field, e.exception.message)
            with self.assertRaises(ServerError) as e:  # 10 clicks, a second's burst is 5
                c.feedback("ctr", [(91, j, 1.0) for j in range(10)])
            self.assertEqual(e.exception.name, "OVERLOADED")
            self.assertIn("5 samples/s", e.exception.message)
            self.assertIn("the 5 events before it were accepted", e.exception.message)
            self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 5)
            time.sleep(1.2)  # the bucket refills: the retry's first five are duplicates
            ack = c.feedback("ctr", [(91, j, 1.0) for j in range(10)])
            self.assertEqual(ack.accepted, 5)
            self.assertEqual([(r.event, r.reason) for r in ack.refused],
                             [(j, Refusal.DUPLICATE) for j in range(5)])
            self.assertEqual(len(c.predict("ctr", shared, items).scores), 10)
        self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 10)
        self.assertEqual(s.metric('tlserve_online_positives_total{model="ctr"}'), 10)
        self.assertGreaterEqual(
            s.metric('tlserve_online_refused_total{model="ctr",reason="rate"}'), 1)

    def test_a_starved_trainer_is_boosted(self):
        """The trainer at nice 19 on a core shared with two busy nice-0 processes gets a slice
        about every 70 of theirs; a sample queued past --online-boost-ms makes the worker set
        its nice to --online-boost-nice (5 here), and it goes back to 19 once its queue is
        empty."""
        if os.geteuid() != 0:
            self.skipTest("lowering a nice needs CAP_SYS_NICE")
        cpu = str(sorted(os.sched_getaffinity(0))[0])
        s = self.serve(self.model, "--online", "--online-boost-ms", "5", "--online-boost-nice",
                       "5", "--workers", "1", "--lookup-threads", "0")
        with s.client() as c:  # the trainer thread starts with the model's first sample
            c.train("ctr", *sample(99)[:1], [(1.0, sample(99)[1])])
        self.wait_metric(s, 'tlserve_online_samples_total{model="ctr"}', 1)
        for tid in os.listdir("/proc/%d/task" % s.proc.pid):
            os.sched_setaffinity(int(tid), {int(cpu)})

        def trainer_nice():
            for tid in os.listdir("/proc/%d/task" % s.proc.pid):
                with open("/proc/%d/task/%s/stat" % (s.proc.pid, tid)) as f:
                    comm, fields = f.read().split("(", 1)[1].rsplit(")", 1)
                if comm == "tl-train-0":
                    return int(fields.split()[16])  # nice, field 19 of stat
            self.fail("no tl-train-0 thread")

        self.assertEqual(trainer_nice(), 19)
        hogs = [subprocess.Popen(["taskset", "-c", cpu, "sh", "-c", "while :; do :; done"])
                for _ in range(2)]
        seen = set()
        try:
            with s.client() as c:
                for j in range(40):
                    shared, item = sample(j)
                    c.train("ctr", shared, [(1.0, item)])
                    seen.add(trainer_nice())
                    time.sleep(0.01)
                while s.metric('tlserve_online_samples_total{model="ctr"}') < 41:
                    seen.add(trainer_nice())
                    time.sleep(0.002)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
        self.assertGreaterEqual(s.metric('tlserve_online_boosts_total{model="ctr"}'), 1)
        self.assertIn("the trainer runs at nice 5 until its queue is empty", s.output())
        self.assertLessEqual(seen, {5, 19})  # never level with the workers
        deadline = time.time() + 10
        while trainer_nice() != 19 and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(trainer_nice(), 19)  # caught up: serving first again

    def test_a_full_disk_is_named_counted_and_logged(self):
        """The sample log on a 256 KiB tmpfs fills: TRAIN gets OVERLOADED naming the append's
        error, FEEDBACK names the sample log (not a full queue), the refusals are counted as
        reason="log_failed" and the server's log says so (a WARN, not only the clients'
        errors), and so does the loss of the unclicked items' negatives; PREDICT keeps
        working; once the disk has room again training goes on."""
        if os.geteuid() != 0:
            self.skipTest("mounting a tmpfs needs root")
        mnt = os.path.join(self.tmp, "mnt")
        os.mkdir(mnt)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tlserve-test", mnt],
                           capture_output=True, text=True)
        if r.returncode != 0:
            self.skipTest("cannot mount a tmpfs here: " + r.stderr.strip())
        self.addCleanup(subprocess.run, ["umount", "-l", mnt], capture_output=True)
        s = self.serve(self.model, "--online", "--sample-log-dir", os.path.join(mnt, "logs"),
                       "--sample-log-segment-kib", "64", "--impression-window-ms", "300")
        scorer = Scorer(s.port)
        scorer.start()
        full = None
        with s.client() as c:
            for j in range(5000):
                shared, item = sample(j % 50)
                try:
                    c.train("ctr", shared, [(1.0, item), (0.0, item)])
                except ServerError as e:
                    full = e
                    break
            self.assertIsNotNone(full, "5,000 frames fit in 256 KiB?")
            self.assertEqual(full.name, "OVERLOADED", full.message)
            self.assertIn("No space left on device", full.message)
            shared, _ = sample(1)
            items = [sample(10 + k)[1] for k in range(4)]
            c.predict("ctr", shared, items, impression_id=42)
            with self.assertRaises(ServerError) as e:
                c.feedback("ctr", [(42, 0, 1.0)])
            self.assertEqual(e.exception.name, "OVERLOADED")
            self.assertIn("the sample log of model 'ctr' could not take event 0",
                          e.exception.message)
            # the impression's window passes: its unclicked items find no room either
            deadline = time.time() + 10
            while "negatives not learned" not in s.output() and time.time() < deadline:
                time.sleep(0.05)
            self.assertIn("negatives not learned (the trainer's queue is full or its sample log "
                          "failed", s.output())
            self.assertGreaterEqual(
                s.metric('tlserve_online_refused_total{model="ctr",reason="log_failed"}'), 2)
            self.assertEqual(
                s.metric('tlserve_online_refused_total{model="ctr",reason="queue_full"}'), 0)
            self.assertIn("No space left on device; TRAIN and FEEDBACK are answered OVERLOADED",
                          s.output())
            subprocess.run(["mount", "-o", "remount,size=4m", mnt], check=True)
            shared, item = sample(3)
            self.assertEqual(c.train("ctr", shared, [(1.0, item)]), 1)  # room again: learned
        scorer.stopping = True
        scorer.join(10)
        self.assertEqual(scorer.failures, [])
        self.assertGreater(scorer.answers, 0)

    def test_a_log_without_trainer_state_is_learned(self):
        """A crash before the trainer's first sample leaves logged, acknowledged frames and no
        trainer.state (made here by removing it): the restart learns the whole log into the
        version active then, and scores as a server that learned those frames."""
        logs = os.path.join(self.tmp, "samples")
        args = ("--online", "--sample-log-dir", logs)
        frames = [(sample(k % 13)[0], [(float(k % 2), sample(k % 7)[1])]) for k in range(30)]
        a = self.serve(self.model, *args)
        with a.client() as c:
            for shared, samples in frames:
                c.train("ctr", shared, samples)
        self.wait_metric(a, 'tlserve_online_samples_total{model="ctr"}', 30)
        os.kill(a.proc.pid, signal.SIGKILL)
        a.proc.wait()
        os.unlink(os.path.join(logs, "ctr", "trainer.state"))
        b = self.serve(self.model, *args)
        self.wait_metric(b, 'tlserve_online_replayed_total{model="ctr"}', 30)
        self.assertIn("no trainer.state beside 30 logged records", b.output())
        ref = self.serve(self.model, "--online")
        with ref.client() as c:
            for shared, samples in frames:
                c.train("ctr", shared, samples)
        self.wait_metric(ref, 'tlserve_online_samples_total{model="ctr"}', 30)
        with b.client() as cb, ref.client() as cr:
            for j in range(13):
                shared, item = sample(j)
                self.assertEqual(cb.predict("ctr", shared, [item]).scores,
                                 cr.predict("ctr", shared, [item]).scores)
        self.assertTrue(os.path.exists(os.path.join(logs, "ctr", "trainer.state")))

    def test_a_corrupt_trainer_state_beside_records_stops_the_start(self):
        """A trainer.state that does not parse beside acknowledged records: the start is
        refused naming the file, the positions and the two ways on (not a restart that learns
        none of them); removed, the restart learns them all."""
        logs = os.path.join(self.tmp, "samples")
        args = ("--online", "--sample-log-dir", logs)
        a = self.serve(self.model, *args)
        with a.client() as c:
            for k in range(20):
                c.train("ctr", sample(k % 13)[0], [(float(k % 2), sample(k % 7)[1])])
        self.wait_metric(a, 'tlserve_online_samples_total{model="ctr"}', 20)
        os.kill(a.proc.pid, signal.SIGKILL)
        a.proc.wait()
        state = os.path.join(logs, "ctr", "trainer.state")
        with open(state, "w") as f:
            f.write("garbage")
        r = subprocess.run([TLSERVE, "--model", self.model, "--port", str(free_port()),
                            "--admin-port", str(free_port())] + list(args),
                           capture_output=True, text=True, timeout=30)
        out = r.stdout + r.stderr
        self.assertNotEqual(r.returncode, 0, out)
        self.assertIn("its trainer.state is unreadable", out)
        self.assertIn("positions 0..20: remove trainer.state", out)
        os.unlink(state)
        b = self.serve(self.model, *args)
        self.assertEqual(self.wait_metric(b, 'tlserve_online_replayed_total{model="ctr"}', 20),
                         20)

    def test_a_sample_log_dir_that_cannot_be_one_is_refused_at_start(self):
        """--sample-log-dir naming a file, or under one, or given without --online, stops the
        start with the flag and the reason (not a server that refuses every TRAIN later); so
        do --bus-servers without --online and a boost nice above --online-nice."""
        a_file = os.path.join(self.tmp, "a_file")
        with open(a_file, "w") as f:
            f.write("x")
        for args, want in ((("--online", "--sample-log-dir", a_file),
                            "--sample-log-dir %s: not a directory" % a_file),
                           (("--online", "--sample-log-dir", os.path.join(a_file, "logs")),
                            "--sample-log-dir %s/logs: cannot make it" % a_file),
                           (("--sample-log-dir", os.path.join(self.tmp, "logs")),
                            "--sample-log-dir needs --online"),
                           (("--bus-servers", "nats://127.0.0.1:1"), "--bus-servers needs --online"),
                           (("--online", "--online-nice", "0", "--online-boost-nice", "19"),
                            "--online-boost-nice 19 is above --online-nice 0")):
            r = subprocess.run([TLSERVE, "--model", self.model, "--port", str(free_port()),
                                "--admin-port", str(free_port())] + list(args),
                               capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
            if "needs --online" in want or "is above" in want:  # a usage error
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn(want, r.stdout + r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "logs")))

    def test_kill_9_loses_nothing_acknowledged(self):
        logs = os.path.join(self.tmp, "samples")
        # 4 KiB segments: the log rolls every few frames, so the kill finds rolls pending
        args = ("--online", "--sample-log-dir", logs, "--sample-log-segment-kib", "4")
        frames = []
        for k in range(400):
            shared, item = sample(k % 37)
            frames.append((shared, [(float(k % 3 == 0), item), (float(k % 5 == 0), sample(k % 11)[1])]))
        a = self.serve(self.model, *args)
        acked = 0
        try:
            with a.client() as c:
                rids = []
                for k, (shared, samples) in enumerate(frames):
                    rids.append(c.send_train("ctr", shared, samples))
                    if k == 250:
                        os.kill(a.proc.pid, signal.SIGKILL)  # frames are still arriving
                    if k % 8 == 7:
                        for rid in rids:
                            c._expect(c.wait_for(rid), MsgType.TRAIN_ACK)
                            acked += 1
                        rids = []
        except (OSError, tlserve.TlserveError):
            pass
        a.proc.wait()
        self.assertGreater(acked, 100)
        b = self.serve(self.model, *args)
        replayed = self.wait_metric(b, 'tlserve_online_replayed_total{model="ctr"}', 2 * acked)
        self.assertEqual(replayed % 2, 0)
        n = int(replayed) // 2  # frames in the log: the acknowledged ones and maybe a few more
        self.assertLessEqual(n, 251)
        ref = self.serve(self.model, "--online")
        with ref.client() as c:
            for shared, samples in frames[:n]:
                c.train("ctr", shared, samples)
        self.wait_metric(ref, 'tlserve_online_samples_total{model="ctr"}', 2 * n)
        probes = [sample(j) for j in range(40)]
        with b.client() as cb, ref.client() as cr:
            for shared, item in probes:
                got = cb.predict("ctr", shared, [item]).scores
                want = cr.predict("ctr", shared, [item]).scores
                self.assertEqual(got, want)
            moved = [cb.predict("ctr", sh, [it]).scores for sh, it in probes]
        plain = self.serve(self.model)
        with plain.client() as cp:
            untrained = [cp.predict("ctr", sh, [it]).scores for sh, it in probes]
        self.assertNotEqual(moved, untrained)  # the replay did learn


if __name__ == "__main__":
    unittest.main()
