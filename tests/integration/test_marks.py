"""The marks of tlserve --model-repo survive a restart (server/repo_persist.c): a rollback, an
admin's refusal, a pin and the validation gate's refusal, made on a running server, still hold
when a new tlserve starts on the same repository, which would otherwise serve the newest
version.  A marks file that does not parse stops the start naming the file and the line;
--repo-marks-dir keeps the files outside the repository and must be a directory; one server
writes the marks of a place (a lock file there).
"""

import json
import os
import shutil
import subprocess
import threading
import unittest

import harness
import test_gate as tg
import test_repo as tr
from harness import TLSERVE, TLSNAP, TLSYNTH, require

TOKEN = "marks-test-token"
NAME = tr.NAME


class Marks(unittest.TestCase):
    setUp = tr.ModelRepo.setUp
    tearDown = tr.ModelRepo.tearDown
    serve = tr.ModelRepo.serve
    wait_for = tr.ModelRepo.wait_for
    add_delta = tr.ModelRepo.add_delta

    @classmethod
    def setUpClass(cls):
        require(TLSERVE, TLSNAP, TLSYNTH)

    def post(self, srv, path, body=b""):
        st, _, out = harness.http(srv.admin_port, path, "POST", body,
                                  {"Authorization": "Bearer " + TOKEN})
        return st, out

    def versions(self, srv):
        st, _, body = srv.get("/v1/models/%s/versions" % NAME)
        self.assertEqual(st, 200, body)
        j = json.loads(body)
        return j, {v["version"]: v for v in j["versions"]}

    def wait_active(self, srv, v):
        self.wait_for(srv, lambda m: m["models"] and m["models"][0]["version"] == v,
                      "version %d active" % v)

    def restart(self, srv, *args):
        srv.stop()
        return self.serve("--model-repo", self.repo, *args, token=TOKEN)

    def test_rollback_refusal_and_pin_survive_restarts(self):
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        marks = os.path.join(self.mdir, ".tlserve-marks")
        srv = self.serve("--model-repo", self.repo, "--guard-window-ms", "0", token=TOKEN)
        self.wait_active(srv, 1)
        self.assertFalse(os.path.exists(marks))  # no marks, no file
        self.add_delta(1, 2)
        self.wait_active(srv, 2)
        st, out = self.post(srv, "/v1/models/%s:rollback" % NAME)
        self.assertEqual(st, 200, out)
        self.assertTrue(os.path.exists(marks))  # on disk once answered
        shutil.copytree(self.full[3], os.path.join(self.tmp, "stage3"))  # full: not built on 2
        os.rename(os.path.join(self.tmp, "stage3"), os.path.join(self.mdir, "3"))
        self.wait_active(srv, 3)
        st, out = self.post(srv, "/v1/models/%s:refuse" % NAME,
                            b'{"version": 3, "reason": "ctr off in the A/B"}')
        self.assertEqual(st, 200, out)
        self.wait_active(srv, 1)

        # The restart serves 1, not the newest (3): 2 rolled back, 3 refused, with the reason.
        srv = self.restart(srv)
        self.wait_active(srv, 1)
        _, vs = self.versions(srv)
        self.assertEqual(vs[2]["state"], "rolled_back")
        self.assertEqual(vs[3]["state"], "refused")
        self.assertEqual(vs[3]["reason"], "refused by admin: ctr off in the A/B")
        self.assertIn("keeps its marks from %s" % marks, srv.output())

        # A pin: version 3 activated (its refusal lifted), 4 appears and is not served; the
        # restart serves 3 again.
        st, out = self.post(srv, "/v1/models/%s:activate" % NAME, b'{"version": 3}')
        self.assertIn(st, (200, 202), out)
        self.wait_active(srv, 3)
        self.add_delta(3, 4)
        srv = self.restart(srv)
        self.wait_active(srv, 3)
        j, vs = self.versions(srv)
        self.assertEqual(vs[4]["state"], "retired")
        self.assertIn("pinned to version 3 (its marks file): loading it", srv.output())
        # Unpinned: the latest policy serves 4, and so does a restart.
        st, out = self.post(srv, "/v1/models/%s:activate" % NAME, b'{"version": "latest"}')
        self.assertEqual(st, 200, out)
        self.wait_active(srv, 4)
        srv = self.restart(srv)
        self.wait_active(srv, 4)
        _, vs = self.versions(srv)
        self.assertEqual(vs[2]["state"], "rolled_back")  # still kept

        # Pinned to a version that is gone at the restart: unpinned, the latest served.
        st, out = self.post(srv, "/v1/models/%s:activate" % NAME, b'{"version": 1}')
        self.assertIn(st, (200, 202), out)
        self.wait_active(srv, 1)
        srv.stop()
        shutil.copytree(self.full[5], os.path.join(self.tmp, "stage5"))
        os.rename(os.path.join(self.tmp, "stage5"), os.path.join(self.mdir, "5"))
        for v in (4, 3, 1):  # 2 stays rolled back; 5 is full
            shutil.rmtree(os.path.join(self.mdir, str(v)))
        srv = self.serve("--model-repo", self.repo, token=TOKEN)
        self.wait_active(srv, 5)
        self.assertIn("pinned to version 1 before the restart, which is no longer", srv.output())
        self.assertEqual(srv.metric("tlserve_repo_marks_write_errors_total"), 0)

    def test_lineage_refusal_survives_a_restart(self):
        # 4, a delta of 2 while the full 3 serves, is refused for its lineage (repo_chain.c).
        # A restart has nothing active to check it against: without the refusal kept it
        # would serve 4 (1 + 2 + 4), dropping what 3 holds, where the server before served 3.
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        srv = self.serve("--model-repo", self.repo, token=TOKEN)
        self.wait_active(srv, 1)
        self.add_delta(1, 2)
        self.wait_active(srv, 2)
        stage = os.path.join(self.tmp, "stage_full_3")
        shutil.copytree(self.full[3], stage)
        os.rename(stage, os.path.join(self.mdir, "3"))
        self.wait_active(srv, 3)
        self.add_delta(2, 4)
        self.wait_for(srv, lambda m: any(r["version"] == 4 for r in m["repository"]["refused"]),
                      "version 4 refused")
        srv.stop()  # the watcher writes the marks after its next scan, at the latest now
        with open(os.path.join(self.mdir, ".tlserve-marks")) as f:
            self.assertIn("refused 4 lineage ", f.read())

        srv = self.serve("--model-repo", self.repo, token=TOKEN)
        self.wait_active(srv, 3)
        _, vs = self.versions(srv)
        self.assertEqual(vs[4]["state"], "refused")
        self.assertIn("delta version 4 extends version 2, which is neither the active version 3",
                      vs[4]["reason"])

    def test_damaged_marks_stop_the_start(self):
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        marks = os.path.join(self.mdir, ".tlserve-marks")
        with open(marks, "w") as f:
            f.write("tlserve-marks 1 %s\nrolled_back 5\nrolled_back 3\nend 2\n" % NAME)
        r = subprocess.run([TLSERVE, "--model-repo", self.repo, "--port", str(harness.free_port()),
                            "--admin-port", str(harness.free_port())],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("the marks of %s in %s are damaged: line 3: rolled-back versions not "
                      "ascending" % (NAME, marks), r.stdout)
        with open(marks, "w") as f:  # cut short
            f.write("tlserve-marks 1 %s\npinned 1\n" % NAME)
        r = subprocess.run([TLSERVE, "--model-repo", self.repo, "--port", str(harness.free_port()),
                            "--admin-port", str(harness.free_port())],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("no end line", r.stdout)

    def test_one_writer_a_marks_place(self):
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        marks = os.path.join(self.mdir, ".tlserve-marks")
        srv = self.serve("--model-repo", self.repo, token=TOKEN)
        self.wait_active(srv, 1)
        lock = os.path.join(self.repo, ".tlserve-marks.lock")
        with open(lock) as f:
            self.assertEqual(f.read().strip(), str(srv.proc.pid))
        self.add_delta(1, 2)
        self.wait_active(srv, 2)

        # A second server on the same repository (replicas sharing it) starts and serves,
        # but writes no marks while the first holds the place: its rollback would otherwise
        # overwrite the first's marks.  The WARN names the holder and the way out.
        other = self.serve("--model-repo", self.repo, token=TOKEN)
        self.wait_active(other, 2)
        self.assertIn("another process (pid %d) keeps its models' marks in %s"
                      % (srv.proc.pid, self.repo), other.output())
        self.assertIn("--repo-marks-dir of its own", other.output())
        st, out = self.post(other, "/v1/models/%s:activate" % NAME, b'{"version": 1}')
        self.assertEqual(st, 202, out)  # a load: 1 is not kept loaded
        self.assertFalse(json.loads(out)["marks_kept"])
        self.wait_active(other, 1)
        self.assertFalse(os.path.exists(marks))  # the first server's (no marks) untouched
        self.assertGreater(other.metric("tlserve_repo_marks_write_errors_total"), 0)
        self.wait_active(srv, 2)  # and the first one serves on

        # kill -9 drops the lock with the process: the second server's next write takes it.
        srv.proc.kill()
        srv.proc.wait()
        st, out = self.post(other, "/v1/models/%s:refuse" % NAME,
                            b'{"version": 2, "reason": "bad ctr"}')
        self.assertEqual(st, 200, out)
        self.assertTrue(json.loads(out)["marks_kept"])
        with open(marks) as f:
            kept = f.read()
        self.assertIn("pinned 1", kept)
        self.assertIn("bad ctr", kept)  # with the pin made while locked out
        with open(lock) as f:
            self.assertEqual(f.read().strip(), str(other.proc.pid))
        self.assertIn("took the marks lock %s" % lock, other.output())

    def test_marks_dir(self):
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        afile = os.path.join(self.tmp, "a_file")
        open(afile, "w").close()
        r = subprocess.run([TLSERVE, "--model-repo", self.repo, "--repo-marks-dir", afile,
                            "--port", str(harness.free_port()),
                            "--admin-port", str(harness.free_port())],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("--repo-marks-dir %s cannot hold" % afile, r.stdout)
        r = subprocess.run([TLSERVE, "--repo-marks-dir", afile, "--model", self.full[1]],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("--repo-marks-dir '%s' needs --model-repo" % afile, r.stdout)
        mdir = os.path.join(self.tmp, "marks")  # made when missing
        srv = self.serve("--model-repo", self.repo, "--repo-marks-dir", mdir, token=TOKEN)
        self.wait_active(srv, 1)
        self.add_delta(1, 2)
        self.wait_active(srv, 2)
        st, out = self.post(srv, "/v1/models/%s:rollback" % NAME)
        self.assertEqual(st, 200, out)
        self.assertTrue(json.loads(out)["marks_kept"])
        self.assertTrue(os.path.exists(os.path.join(mdir, NAME + ".marks")))
        self.assertFalse(os.path.exists(os.path.join(self.mdir, ".tlserve-marks")))
        srv = self.restart(srv, "--repo-marks-dir", mdir)
        self.wait_active(srv, 1)

        # Marks that cannot be written (a directory where the file goes): the answer says
        # so, tlctl warns, the metric counts; the mark itself holds in memory.
        os.remove(os.path.join(mdir, NAME + ".marks"))
        os.mkdir(os.path.join(mdir, NAME + ".marks"))
        tlctl = os.path.join(harness.BUILD, "server", "tlctl")
        r = subprocess.run([tlctl, "--admin", "127.0.0.1:%d" % srv.admin_port, "activate", NAME,
                            "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=30, env=dict(os.environ, TLSERVE_ADMIN_TOKEN=TOKEN))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("could not write the marks of %s" % NAME, r.stderr)
        self.wait_active(srv, 2)
        st, _, body = srv.get("/v1/models/%s/versions" % NAME)
        self.assertFalse(json.loads(body)["marks_kept"])
        self.assertTrue(json.loads(body)["pinned"])
        self.assertGreater(srv.metric("tlserve_repo_marks_write_errors_total"), 0)
        self.assertIn("cannot keep the marks of %s" % NAME, srv.output())


@harness.needs(all(os.access(p, os.X_OK) for p in (TLSERVE, TLSYNTH, tg.GATE_SNAP)),
               "needs tlserve, tlsynth and gate_snap (set TL_BUILD_DIR)")
class GateMarks(unittest.TestCase):
    def test_gate_refusal_survives_a_restart(self):
        # A version the shadow scoring refused (x10 weights) stays refused after a restart,
        # whose gate has no traffic to compare with and would pass it (sanity only), also
        # when an older version that is not a link of its chain was deleted meanwhile
        # (retention): a kept refusal is signed by its own chain.
        tmp = self.enterContext(tg.tempfile.TemporaryDirectory(prefix="tl_marks_gate_"))
        repo = os.path.join(tmp, "repo")
        v1 = os.path.join(repo, "gm", "1")
        harness.gen_model(v1, tg.KEYS, "gm", 1, shards=4)
        tg.gate_snap(v1, os.path.join(repo, "gm", "2"), 2, 1)  # the same weights, version 2
        stage = os.path.join(tmp, "stage3")
        tg.gate_snap(v1, stage, 3, 10)
        srv = harness.Server(None, "--model-repo", repo, "--workers", "1", token=TOKEN)
        self.addCleanup(srv.stop, timeout=60.0)
        traffic = tg.Traffic(srv)
        traffic.start()
        self.addCleanup(traffic.stop)
        while traffic.ok < 300:  # the gate's sample fills
            self.assertEqual(traffic.failed, [])
            threading.Event().wait(0.01)
        os.rename(stage, os.path.join(repo, "gm", "3"))
        for _ in range(600):
            if "repo: version 3 of gm refused" in srv.output():
                break
            threading.Event().wait(0.05)
        self.assertIn("refused by the gate: shadow scoring", srv.output())
        traffic.stop()
        self.assertEqual(traffic.failed, [])
        srv.stop()
        with open(os.path.join(repo, "gm", ".tlserve-marks")) as f:
            self.assertIn("refused 3 gate ", f.read())
        shutil.rmtree(v1)  # retention: 1 is no link of 3's chain

        srv = harness.Server(None, "--model-repo", repo, "--workers", "1", token=TOKEN)
        self.addCleanup(srv.stop, timeout=60.0)
        st, _, body = srv.get("/v1/models/gm/versions")
        self.assertEqual(st, 200, body)
        vs = {v["version"]: v for v in json.loads(body)["versions"]}
        self.assertEqual(vs[2]["state"], "active")
        self.assertEqual(vs[3]["state"], "refused")
        self.assertIn("refused by the gate: shadow scoring", vs[3]["reason"])
        with srv.client() as c:
            shared, items = tg.Traffic(srv).request()
            self.assertEqual(c.predict("gm", shared, items).version, 2)

        # Activated by the admin (pinned), 3 meets the gate again and is refused again; the
        # restart then unpins it (the version served meanwhile is not known) and serves 2.
        traffic = tg.Traffic(srv)
        traffic.start()
        self.addCleanup(traffic.stop)
        while traffic.ok < 300:
            self.assertEqual(traffic.failed, [])
            threading.Event().wait(0.01)
        st, _, body = harness.http(srv.admin_port, "/v1/models/gm:activate", "POST",
                                   b'{"version": 3}', {"Authorization": "Bearer " + TOKEN})
        self.assertEqual(st, 202, body)
        for _ in range(600):
            if srv.output().count("repo: version 3 of gm refused") >= 1:
                break
            threading.Event().wait(0.05)
        traffic.stop()
        self.assertEqual(traffic.failed, [])
        body = json.loads(srv.get("/v1/models/gm/versions")[2])
        self.assertEqual((body["pinned"], body["pinned_version"]), (True, 3))
        srv.stop()
        srv = harness.Server(None, "--model-repo", repo, "--workers", "1", token=TOKEN)
        self.addCleanup(srv.stop, timeout=60.0)
        self.assertIn("pinned to version 3 before the restart, which is refused in", srv.output())
        body = json.loads(srv.get("/v1/models/gm/versions")[2])
        self.assertFalse(body["pinned"])
        self.assertEqual({v["version"]: v["state"] for v in body["versions"]},
                         {2: "active", 3: "refused"})

        # Ops overrule the gate: activated with "force", 3 loads without it and serves.
        st, _, body = harness.http(srv.admin_port, "/v1/models/gm:activate", "POST",
                                   b'{"version": 3, "force": 1}',
                                   {"Authorization": "Bearer " + TOKEN})
        self.assertEqual(st, 400, body)  # force is a JSON boolean
        st, _, body = harness.http(srv.admin_port, "/v1/models/gm:activate", "POST",
                                   b'{"version": 3, "version": 2}',
                                   {"Authorization": "Bearer " + TOKEN})
        self.assertEqual(st, 400, body)  # which was meant is not knowable
        self.assertIn("duplicate", body.decode() if isinstance(body, bytes) else body)
        st, _, body = harness.http(srv.admin_port, "/v1/models/gm:activate", "POST",
                                   b'{"version": 3, "force": true}',
                                   {"Authorization": "Bearer " + TOKEN})
        self.assertEqual(st, 202, body)
        for _ in range(600):
            body = json.loads(srv.get("/v1/models/gm/versions")[2])
            if any(v["version"] == 3 and v["state"] == "active" for v in body["versions"]):
                break
            threading.Event().wait(0.05)
        self.assertEqual({v["version"]: v["state"] for v in body["versions"]}[3], "active")
        self.assertIn("forced: no validation gate", srv.output())

if __name__ == "__main__":
    unittest.main()
