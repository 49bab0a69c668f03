"""--train-file in a real tlserve (server/online_file.c): files learned at start as TRAIN frames.

A small libffm file written here is learned at start into the served LR model (tlsynth), and the
server then scores, float for float, as a second server that was sent the same samples as TRAIN
frames (the same order, the same trainer): the file's samples take the frames' path.  Under a
small --online-max-samples-per-s a file larger than a second of the cap is learned whole (the
feeder waits, nothing dropped, no client refusal counted).  A file with a bad line K stops at
it: the K-1 samples before are learned, the log names file:K, PREDICT keeps working.  SIGTERM
while a file is read stops the server promptly.  A missing file, or --train-file without
--online, or a repository of two models without --train-file-model, is refused at start with a
sentence.  A libsvm file is told from its lines (--train-file-format auto).

Run: TL_BUILD_DIR=build python3 -B -m unittest tests/integration/test_online_file.py
"""

import os
import random
import shutil
import subprocess
import time
import unittest

from harness import (TLSERVE, TLSYNTH, ServerCase, digest, free_port, gen_model,
                     replayed_positions, require)

SEED = 53
VALUES = (1.0, 0.5, 0.25, 2.0)  # exact in text and in f32: both paths read the same floats


def ffm_samples(n, seed=7):
    """n samples (label, [(field, idx, value)]) with distinct (field, idx) per line."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        feats = {}
        for _ in range(rnd.randrange(3, 9)):
            feats[(rnd.randrange(4), rnd.randrange(40))] = rnd.choice(VALUES)
        out.append((rnd.choice((0, 1)), sorted((f, i, v) for (f, i), v in feats.items())))
    return out


def ffm_line(label, feats):
    return "%d %s\n" % (label, " ".join("%d:%d:%g" % (f, i, v) for f, i, v in feats))


def block(feats):
    """The reader's ids: (field << 56) | (idx + 1)."""
    return ([(f << 56) | (i + 1) for f, i, _ in feats], [v for _, _, v in feats])


PROBES = [block([(f, i, 1.0) for f in range(4)]) for i in range(0, 40, 3)]


class OnlineFile(ServerCase):
    TMP_PREFIX = "tl_online_file_"

    @classmethod
    def setUpClass(cls):
        require(TLSERVE, TLSYNTH)

    def setUp(self):
        super().setUp()
        self.model = os.path.join(self.tmp, "ctr", "1")
        gen_model(self.model, 2000, "ctr", seed=SEED)

    def write(self, name, samples, bad_at=None):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            for k, (label, feats) in enumerate(samples, 1):
                bad = "1 0:3:1 this-is-not-a-feature\n"
                f.write(bad if k == bad_at else ffm_line(label, feats))
        return path

    def scores(self, s):
        with s.client() as c:
            return c.predict("ctr", [], PROBES).scores

    def test_file_learns_as_train_frames_do(self):
        samples = ffm_samples(300)
        path = self.write("a.ffm", samples)
        b = self.serve(self.model, "--online")
        before = self.scores(b)
        a = self.serve(self.model, "--online", "--train-file", path)
        with b.client() as c:
            for k in range(0, len(samples), 256):
                chunk = samples[k:k + 256]
                self.assertEqual(c.train("ctr", [], [(float(y), block(f)) for y, f in chunk]),
                                 len(chunk))
        self.wait_metric(a, 'tlserve_online_file_done_total{model="ctr"}', 1)
        self.wait_metric(a, 'tlserve_online_samples_total{model="ctr"}', 300)
        self.wait_metric(b, 'tlserve_online_samples_total{model="ctr"}', 300)
        got, want = self.scores(a), self.scores(b)
        self.assertEqual(got, want, "the file's samples trained otherwise than the frames'")
        self.assertNotEqual(got, before, "300 samples did not move the served scores")
        self.assertEqual(a.metric('tlserve_online_file_samples_total{model="ctr"}'), 300)
        self.assertEqual(a.metric('tlserve_online_file_failed_total{model="ctr"}'), 0)
        self.assertEqual(a.metric('tlserve_online_file_reading{model="ctr"}'), 0)
        self.assertEqual(a.metric("tlserve_online_refused_total"), 0)
        out = a.output()
        self.assertIn("--train-file %s (libffm) done: 300 samples into model 'ctr'" % path, out)

    def test_backpressure_learns_everything(self):
        samples = ffm_samples(500, seed=9)
        path = self.write("big.ffm", samples)
        # 200 samples/s: a second's burst, then 300 more wait for tokens (about 1.5 s)
        a = self.serve(self.model, "--online", "--online-max-samples-per-s", "200",
                       "--train-file", path)
        with a.client() as c:
            self.assertEqual(len(c.predict("ctr", [], PROBES).scores), len(PROBES))
        self.wait_metric(a, 'tlserve_online_file_done_total{model="ctr"}', 1)
        self.wait_metric(a, 'tlserve_online_samples_total{model="ctr"}', 500)
        self.assertEqual(a.metric('tlserve_online_samples_total{model="ctr"}'), 500)
        self.assertEqual(a.metric('tlserve_online_file_samples_total{model="ctr"}'), 500)
        self.assertGreater(a.metric('tlserve_online_file_waits_total{model="ctr"}'), 0)
        self.assertEqual(a.metric("tlserve_online_refused_total"), 0,
                         "the feeder's waits counted as client refusals")

    def test_bad_line_stops_the_file(self):
        samples = ffm_samples(300, seed=11)
        path = self.write("bad.ffm", samples, bad_at=137)
        good = self.write("good.ffm", samples[:20])
        a = self.serve(self.model, "--online", "--train-file", path + "," + good)
        self.wait_metric(a, 'tlserve_online_file_failed_total{model="ctr"}', 1)
        self.wait_metric(a, 'tlserve_online_file_done_total{model="ctr"}', 1)
        self.wait_metric(a, 'tlserve_online_samples_total{model="ctr"}', 136 + 20)
        self.assertEqual(a.metric('tlserve_online_file_samples_total{model="ctr"}'), 136 + 20)
        self.assertEqual(a.metric('tlserve_online_samples_total{model="ctr"}'), 136 + 20)
        out = a.output()
        self.assertIn("error: online: --train-file %s stopped: %s:137:" % (path, path), out)
        self.assertIn("the 136 samples before it are learned", out)
        with a.client() as c:
            self.assertEqual(len(c.predict("ctr", [], PROBES).scores), len(PROBES))

    def test_sigterm_stops_a_file_promptly(self):
        path = self.write("slow.ffm", ffm_samples(400, seed=13))
        # 20 samples/s: the file would take 20 s
        a = self.serve(self.model, "--online", "--online-max-samples-per-s", "20",
                       "--train-file", path)
        self.wait_metric(a, 'tlserve_online_file_reading{model="ctr"}', 1)
        self.wait_metric(a, 'tlserve_online_file_waits_total{model="ctr"}', 1)
        a.proc.send_signal(15)
        a.proc.wait(timeout=10)
        out = a.output()
        self.assertEqual(a.proc.returncode, 0, out)
        self.assertIn("stopped by the shutdown", out)

    def refused(self, *args):
        """tlserve with args exits at start: (exit status, its output)."""
        r = subprocess.run([TLSERVE, "--model", self.model, "--port", str(free_port()),
                            "--admin-port", str(free_port())] + list(args),
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.returncode, r.stdout + r.stderr

    def test_refused_at_start(self):
        missing = os.path.join(self.tmp, "nope.ffm")
        rc, out = self.refused("--online", "--train-file", missing)
        self.assertEqual(rc, 2, out)
        self.assertIn("cannot read training file '%s'" % missing, out)
        path = self.write("ok.ffm", ffm_samples(5))
        rc, out = self.refused("--online", "--train-file", path + ",")
        self.assertIn("the list ends with a comma", out)
        rc, out = self.refused("--train-file", path)
        self.assertEqual(rc, 2, out)  # a usage error
        self.assertIn("--train-file needs --online", out)
        rc, out = self.refused("--online", "--train-file", path, "--train-file-model", "other")
        self.assertIn("--train-file-model 'other': the server serves model 'ctr'", out)

    def test_ambiguous_model_refused(self):
        repo = os.path.join(self.tmp, "repo")
        gen_model(os.path.join(repo, "a", "1"), 500, "a", seed=SEED)
        gen_model(os.path.join(repo, "b", "1"), 500, "b", seed=SEED)
        path = self.write("ok.ffm", ffm_samples(5))
        r = subprocess.run([TLSERVE, "--model-repo", repo, "--online", "--train-file", path,
                            "--port", str(free_port()), "--admin-port", str(free_port())],
                           capture_output=True, text=True, timeout=30)
        out = r.stdout + r.stderr
        self.assertNotEqual(r.returncode, 0, out)
        self.assertIn("--train-file: the repository %s holds 2 models" % repo, out)
        self.assertIn("name the one to train with --train-file-model", out)

    def test_libsvm_told_from_the_file(self):
        path = os.path.join(self.tmp, "a.svm")
        with open(path, "w") as f:
            for k in range(50):
                f.write("%d %d:1 %d:0.5\n" % (k % 2, k % 7, 10 + k % 5))
        a = self.serve(self.model, "--online", "--train-file", path)
        self.wait_metric(a, 'tlserve_online_file_done_total{model="ctr"}', 1)
        self.wait_metric(a, 'tlserve_online_samples_total{model="ctr"}', 50)
        self.assertIn("--train-file %s (libsvm) done: 50 samples" % path, a.output())

    def test_libffm_told_from_a_first_line_longer_than_the_head(self):
        # the first line (10,000 features, ~110 KB) runs past the 64 KiB the format is told
        # from: its first feature, whole inside the head, still tells libffm
        path = os.path.join(self.tmp, "long.ffm")
        with open(path, "w") as f:
            f.write("1 " + " ".join("%d:%d:1" % (j % 4, 1000 + j) for j in range(10000)) + "\n")
            for label, feats in ffm_samples(20, seed=17):
                f.write(ffm_line(label, feats))
        a = self.serve(self.model, "--online", "--train-file", path)
        self.wait_metric(a, 'tlserve_online_file_done_total{model="ctr"}', 1)
        self.wait_metric(a, 'tlserve_online_samples_total{model="ctr"}', 21)
        self.assertIn("--train-file %s (libffm) done: 21 samples" % path, a.output())



FILE = 'tlserve_online_file_%s{model="ctr"}'
LEARNED = 'tlserve_online_samples_total{model="ctr"}'


class OnlineFileRestart(ServerCase):
    """A restart resumes each --train-file where the samples its sample log holds end
    (online_file.c, RESTARTS): kill -9 mid-file, a file appended to, a file whose head changed.
    Each compares the model's digest with a server that learned the samples once."""
    TMP_PREFIX = "tl_online_file_restart_"
    CAP = ("--online-max-samples-per-s", "2000")  # 500-sample frames; a 3000-line file: ~1 s

    setUpClass = OnlineFile.setUpClass

    def setUp(self):
        ServerCase.setUp(self)
        self.model = os.path.join(self.tmp, "ctr", "1")
        gen_model(self.model, 2000, "ctr", seed=SEED)

    write = OnlineFile.write

    def learn_all(self, s, want):
        """Waits until the feeder is done and s learned `want` samples; returns its digest."""
        self.wait_metric(s, FILE % "done_total", 1)
        self.wait_metric(s, LEARNED, want)
        time.sleep(0.2)  # a sample learned twice would show now
        self.assertEqual(s.metric(LEARNED), want, "samples learned more than once")
        return digest(s, "ctr")["digest"]

    def kill_mid_file(self, s, n, at):
        """kill -9 once s submitted at least `at` of the file's n samples, before its end."""
        self.wait_metric(s, FILE % "samples_total", at)
        s.proc.kill()
        s.proc.wait()

    def check_resumed_mid_file(self, b, n, path):
        skipped = b.metric(FILE % "resumed_samples_total")
        self.assertGreater(skipped, 0, "the restart did not resume: " + b.output())
        self.assertLess(skipped, n, "the kill did not land mid-file")
        self.assertEqual(b.metric(FILE % "samples_total"), n - skipped)
        self.assertRegex(b.output(), r"--train-file %s resumed at byte \d+ \(line %d\), %d "
                         r"samples already learned" % (path, skipped, skipped))

    def test_kill_9_mid_file_resumes_after_the_logged_samples(self):
        n = 3000
        path = self.write("big.ffm", ffm_samples(n, seed=21))
        flags = ("--online", "--sample-log-dir", os.path.join(self.tmp, "slog"), *self.CAP,
                 "--train-file", path)
        a = self.serve(self.model, *flags)
        self.kill_mid_file(a, n, 1000)
        b = self.serve(self.model, *flags)
        got = self.learn_all(b, n)  # the log's replay and the rest of the file: each once
        self.check_resumed_mid_file(b, n, path)
        ref = self.serve(self.model, "--online", "--sample-log-dir",
                         os.path.join(self.tmp, "slog_ref"), *self.CAP, "--train-file", path)
        self.assertEqual(got, self.learn_all(ref, n), "the restarted model differs")

    def test_kill_9_after_an_export_resumes_too(self):
        # 6000 lines: past the cap's first second's burst the file takes 2 s more, so the kill
        # lands mid-file even when the first export is slow to come (a busy host)
        n = 6000
        path = self.write("big.ffm", ffm_samples(n, seed=23))
        repos = self.repos("repo", "repo_ref")

        def flags(k):
            return ("--model-repo", repos[k], "--load-sched-idle=false", "--online",
                    "--sample-log-dir", os.path.join(self.tmp, "slog%d" % k),
                    "--online-export-ms", "100", *self.CAP, "--train-file", path)
        a = self.serve(None, *flags(0))
        self.wait_metric(a, 'tlserve_online_exports_total{model="ctr"}', 1)
        self.kill_mid_file(a, n, a.metric(FILE % "samples_total") + 200)
        b = self.serve(None, *flags(0))
        replayed, start, _ = replayed_positions(b)
        self.assertGreater(start, 0, "the replay did not start at an export's position")
        self.wait_metric(b, FILE % "done_total", 1)
        skipped = b.metric(FILE % "resumed_samples_total")
        # after the export's samples: the log's records past it, then the file's rest
        got = self.learn_all(b, replayed + n - skipped)
        self.check_resumed_mid_file(b, n, path)
        ref = self.serve(None, *flags(1))
        self.wait_metric(ref, FILE % "done_total", 1)
        self.wait_metric(ref, LEARNED, n)
        time.sleep(0.2)
        self.assertEqual(got, digest(ref, "ctr")["digest"], "the restarted model differs")

    def repos(self, *names):
        out = []
        for name in names:
            out.append(os.path.join(self.tmp, name))
            gen_model(os.path.join(out[-1], "ctr", "1"), 2000, "ctr", seed=SEED)
        return out

    def test_trimmed_log_the_export_keeps_the_progress(self):
        # 4 KiB segments: a frame's record fills one, so each export trims the log behind it
        # and the first file's records are gone by the restart: only the export's
        # TRAINFILE_MARKS says that file was learned
        small, n = ffm_samples(300, seed=29), 4000
        first = self.write("first.ffm", small)
        path = self.write("big.ffm", ffm_samples(n, seed=31))
        repos = self.repos("repo", "repo_ref")

        def flags(k):
            return ("--model-repo", repos[k], "--load-sched-idle=false", "--online",
                    "--sample-log-dir", os.path.join(self.tmp, "slog%d" % k),
                    "--sample-log-segment-kib", "4", "--online-export-ms", "100", *self.CAP,
                    "--train-file", first + "," + path)
        a = self.serve(None, *flags(0))
        first_segment = os.path.join(self.tmp, "slog0", "ctr", "%020d.slog" % 0)
        self.wait_metric(a, FILE % "samples_total", len(small) + 500)
        deadline = time.monotonic() + 10
        while os.path.exists(first_segment):  # an export went live and trimmed the log
            self.assertLess(time.monotonic(), deadline, "the log was not trimmed")
            time.sleep(0.01)
        self.kill_mid_file(a, n, 0)
        b = self.serve(None, *flags(0))
        replayed, _, _ = replayed_positions(b)
        self.wait_metric(b, FILE % "done_total", 2)
        skipped = b.metric(FILE % "resumed_samples_total")
        got = self.learn_all(b, replayed + len(small) + n - skipped)
        self.assertIn("--train-file %s resumed at byte %d (line %d), %d samples already learned"
                      % (first, os.path.getsize(first), len(small), len(small)), b.output())
        self.assertGreater(skipped, len(small), "the kill did not land in the second file")
        self.assertLess(skipped, len(small) + n, "the kill did not land mid-file")
        ref = self.serve(None, *flags(1))
        self.wait_metric(ref, FILE % "done_total", 2)
        self.wait_metric(ref, LEARNED, len(small) + n)
        time.sleep(0.2)
        self.assertEqual(ref.metric(LEARNED), len(small) + n)
        self.assertEqual(got, digest(ref, "ctr")["digest"], "the restarted model differs")

    def test_without_a_sample_log_the_export_and_its_state_resume(self):
        n = 3000
        path = self.write("big.ffm", ffm_samples(n, seed=33))
        repo, = self.repos("repo")
        flags = ("--model-repo", repo, "--load-sched-idle=false", "--online",
                 "--online-export-ms", "100", *self.CAP, "--train-file", path)
        a = self.serve(None, *flags)
        self.wait_metric(a, FILE % "samples_total", 600)
        exported = a.metric('tlserve_online_exports_total{model="ctr"}')
        self.wait_metric(a, 'tlserve_online_exports_total{model="ctr"}', exported + 1)
        self.kill_mid_file(a, n, 0)
        b = self.serve(None, *flags)
        self.wait_metric(b, FILE % "done_total", 1)
        skipped = b.metric(FILE % "resumed_samples_total")
        self.assertGreater(skipped, 0, "the restart did not resume: " + b.output())
        self.assertLess(skipped, n, "the kill did not land mid-file")
        # what the active export holds is not learned again; the rest once, continuing the
        # export's optimizer state: the model a server that never crashed learns
        got = self.learn_all(b, n - skipped)
        self.assertEqual(b.metric(FILE % "samples_total"), n - skipped)
        self.assertIn("optimizer state of versions", b.output())
        ref_repo, = self.repos("repo_ref")
        ref = self.serve(None, "--model-repo", ref_repo, "--load-sched-idle=false", "--online",
                         *self.CAP, "--train-file", path)
        self.assertEqual(got, self.learn_all(ref, n), "the restarted model differs")

    def test_a_new_version_trims_the_log_the_marks_stay(self):
        # a new version attached trims the log behind it, and carries no marks: the trainer
        # sets the marks aside in the log's directory first
        small = ffm_samples(300, seed=35)
        path = self.write("first.ffm", small)
        repo, = self.repos("repo")
        slog = os.path.join(self.tmp, "slog")
        flags = ("--model-repo", repo, "--load-sched-idle=false", "--online",
                 "--sample-log-dir", slog, "--sample-log-segment-kib", "4",
                 "--sample-log-sync-ms", "5", "--online-export-ms", "0", "--train-file", path)
        a = self.serve(None, *flags)
        self.learn_all(a, len(small))
        more = [(float(y), block(f)) for y, f in small[:100]]  # about 6 KiB: a segment each
        with a.client() as c:  # records after the file's, each rolled: its segments can go
            for k in range(3):
                self.assertEqual(c.train("ctr", [], more), len(more))
                time.sleep(0.05)  # a roll commits at the next flush
        self.wait_metric(a, LEARNED, len(small) + 3 * len(more))
        staged = os.path.join(self.tmp, "v2")
        gen_model(staged, 2000, "ctr", version=2, seed=SEED + 1)
        os.rename(staged, os.path.join(repo, "ctr", "2"))
        with a.client() as c:
            deadline = time.monotonic() + 20
            while c.predict("ctr", [], PROBES[:1]).version != 2:
                self.assertLess(time.monotonic(), deadline, "version 2 never went live")
                time.sleep(0.02)
            self.assertEqual(c.train("ctr", [], more), len(more))
        self.wait_metric(a, LEARNED, len(small) + 4 * len(more))
        kept = sorted(os.listdir(os.path.join(slog, "ctr")))
        self.assertFalse(any(n.endswith(".slog") and int(n[:20]) < 2 for n in kept),
                         "the attach did not trim the file's records: %s" % kept)
        a.proc.kill()
        a.proc.wait()
        b = self.serve(None, *flags)
        self.wait_metric(b, FILE % "done_total", 1)
        self.assertEqual(b.metric(FILE % "resumed_samples_total"), len(small))
        self.assertEqual(b.metric(FILE % "samples_total"), 0, "learned again: " + b.output())

    def test_appended_file_learns_only_the_new_lines(self):
        old, new = ffm_samples(400, seed=25), ffm_samples(150, seed=26)
        path = self.write("grows.ffm", old)
        flags = ("--online", "--sample-log-dir", os.path.join(self.tmp, "slog"),
                 "--train-file", path)
        a = self.serve(self.model, *flags)
        self.learn_all(a, len(old))
        a.stop(check=True)
        with open(path, "a") as f:
            for label, feats in new:
                f.write(ffm_line(label, feats))
        b = self.serve(self.model, *flags)
        got = self.learn_all(b, len(old) + len(new))  # the replay, then the new lines
        self.assertEqual(b.metric(FILE % "samples_total"), len(new))
        self.assertEqual(b.metric(FILE % "resumed_samples_total"), len(old))
        self.assertIn("--train-file %s resumed at byte %d (line %d), %d samples already learned"
                      % (path, sum(len(ffm_line(*x)) for x in old), len(old), len(old)),
                      b.output())
        whole = self.write("whole.ffm", old + new)
        ref = self.serve(self.model, "--online", "--train-file", whole)
        self.assertEqual(got, self.learn_all(ref, len(old) + len(new)))

    def test_changed_head_is_read_again_as_new_data(self):
        old = ffm_samples(300, seed=27)
        path = self.write("edited.ffm", old)
        flags = ("--online", "--sample-log-dir", os.path.join(self.tmp, "slog"),
                 "--train-file", path)
        a = self.serve(self.model, *flags)
        self.learn_all(a, len(old))
        a.stop(check=True)
        edited = [(1 - old[0][0], old[0][1])] + old[1:]  # the first label flipped
        self.write("edited.ffm", edited)
        b = self.serve(self.model, *flags)
        self.learn_all(b, 2 * len(old))  # the replay, then the whole file again
        self.assertEqual(b.metric(FILE % "samples_total"), len(old))
        self.assertEqual(b.metric(FILE % "resumed_samples_total"), 0)
        self.assertIn("--train-file %s: the file's head changed since %d samples of its first "
                      "%d bytes were learned: read from the start as new data"
                      % (path, len(old), os.path.getsize(path)), b.output())

    def test_half_written_last_line_waits_for_its_newline(self):
        """A last line with no newline is not learned (a writer may be mid-line): once the
        writer finishes it, a restart learns it whole, once, and the lines after it."""
        old, new = ffm_samples(200, seed=35), ffm_samples(30, seed=36)
        whole_line = ffm_line(*new[0])
        path = os.path.join(self.tmp, "tail.ffm")
        with open(path, "w") as f:
            f.writelines(ffm_line(*x) for x in old)
            f.write(whole_line[:len(whole_line) // 2])  # cut mid-line, no newline
        flags = ("--online", "--sample-log-dir", os.path.join(self.tmp, "slog"),
                 "--train-file", path)
        a = self.serve(self.model, *flags)
        self.learn_all(a, len(old))
        self.assertIn("--train-file %s:%d: the last line has no newline: not learned"
                      % (path, len(old) + 1), a.output())
        a.stop(check=True)
        with open(path, "a") as f:  # the writer finishes the line, and writes more
            f.write(whole_line[len(whole_line) // 2:])
            f.writelines(ffm_line(*x) for x in new[1:])
        b = self.serve(self.model, *flags)
        got = self.learn_all(b, len(old) + len(new))
        self.assertEqual(b.metric(FILE % "samples_total"), len(new))
        whole = self.write("whole.ffm", old + new)
        ref = self.serve(self.model, "--online", "--train-file", whole)
        self.assertEqual(got, self.learn_all(ref, len(old) + len(new)))

    def test_a_value_over_the_bound_is_named_at_its_line(self):
        """A line refused by --online-max-feature-value stops the file at that line, every
        line before it learned (the feeder narrows its frame down)."""
        samples = ffm_samples(400, seed=37)
        path = os.path.join(self.tmp, "big_value.ffm")
        with open(path, "w") as f:
            f.writelines(ffm_line(*x) for x in samples[:300])
            f.write("1 0:1:1e7\n")
            f.writelines(ffm_line(*x) for x in samples[300:])
        s = self.serve(self.model, "--online", "--train-file", path)
        self.wait_metric(s, FILE % "failed_total", 1)
        self.wait_metric(s, LEARNED, 300)
        time.sleep(0.2)
        self.assertEqual(s.metric(LEARNED), 300)
        self.assertEqual(s.metric('tlserve_online_bad_values_total{model="ctr"}'), 1)
        self.assertIn("--train-file %s stopped: %s:301: TRAIN: feature %d has value 1e+07"
                      % (path, path, 2), s.output())

    def test_a_fifo_swapped_in_does_not_hang_the_shutdown(self):
        """The file checked at start is replaced by a FIFO before the feeder opens it (it waits
        for a model): the feeder refuses it and SIGTERM stops the server promptly."""
        repo = os.path.join(self.tmp, "repo")
        os.makedirs(os.path.join(repo, "ctr"))
        path = self.write("swap.ffm", ffm_samples(50, seed=39))
        s = self.serve(None, "--model-repo", repo, "--online", "--train-file", path,
                       "--train-file-model", "ctr", wait="/healthz")
        os.unlink(path)
        os.mkfifo(path)
        shutil.copytree(self.model, os.path.join(repo, "ctr", "1"))
        self.wait_metric(s, FILE % "failed_total", 1)
        self.assertIn("%s is not a regular file" % path, s.output())
        t0 = time.monotonic()
        self.assertEqual(s.stop(timeout=10, check=True), 0)
        self.assertLess(time.monotonic() - t0, 10)


if __name__ == "__main__":
    unittest.main()
