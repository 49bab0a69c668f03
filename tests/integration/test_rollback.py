"""Rollback, activate/pin and the versions list of tlserve --model-repo, through the admin API
and through tlctl.

A repository <tmp>/repo/rm/ holds a full version 1; version 2 appears as a delta, so the server
serves 2 with 1 kept loaded as standby (--keep-versions 1, the default).  While a client scores
in a loop (no failed request allowed), `tlctl rollback rm` makes 1 active: the first answer
naming version 1 comes within 1 s of the call, and its scores equal version 1's offline scores.
Version 2 is then listed "rolled_back" (reason "rolled back by the admin API or the guard (the log says which)") and the watcher does not
re-activate it, even when the listing changes (a corrupt version 3 appears and is refused).
`tlctl activate rm 2` loads 2 in the background and pins it; activating the kept 1 is a pointer
swap; a new version 4 is ignored while pinned and served after `activate rm latest`.  A second
rollback has nothing to roll back to (409, tlctl exit 1).  tlctl's exit codes (usage 2, no
server 3, refusals 1), --json output and tables are checked on the way.
"""

import json
import os
import shutil
import socket
import subprocess
import time
import unittest

import harness
import test_repo as tr
from harness import BUILD, TLSERVE, TLSNAP, TLSYNTH, require

TLCTL = os.path.join(BUILD, "server", "tlctl")
TOKEN = "rollback-test-token"
NAME = tr.NAME


class Rollback(unittest.TestCase):
    # test_repo's fixture and helpers (not its tests): a repository dir, full versions 1..5.
    setUp = tr.ModelRepo.setUp
    tearDown = tr.ModelRepo.tearDown
    serve = tr.ModelRepo.serve
    scores_of_full = tr.ModelRepo.scores_of_full
    wait_for = tr.ModelRepo.wait_for
    add_delta = tr.ModelRepo.add_delta

    @classmethod
    def setUpClass(cls):
        require(TLSERVE, TLSNAP, TLSYNTH, TLCTL)

    def tlctl(self, srv, *args, token=TOKEN, admin=None):
        env = dict(os.environ)
        env.pop("TLSERVE_ADMIN_TOKEN", None)
        if token:
            env["TLSERVE_ADMIN_TOKEN"] = token
        argv = [TLCTL, "--admin", admin or "127.0.0.1:%d" % srv.admin_port, *args]
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=30, env=env)

    def versions(self, srv):
        r = self.tlctl(srv, "--json", "versions", NAME)
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        return j, {v["version"]: v for v in j["versions"]}

    def digest(self, srv):
        r = self.tlctl(srv, "--json", "digest", NAME)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def active(self, srv):
        m = tr.models(srv)["models"]
        return m[0]["version"] if m else None

    def wait_active(self, srv, v, timeout=60.0):
        self.wait_for(srv, lambda m: m["models"] and m["models"][0]["version"] == v,
                      "version %d active" % v, timeout)

    def place_full(self, v):
        """Copies full version v into the repository under a temporary name, then renames."""
        stage = os.path.join(self.tmp, "stage_full_%d" % v)
        shutil.copytree(self.full[v], stage)
        os.rename(stage, os.path.join(self.mdir, str(v)))

    def test_rollback_activate_pin_and_tlctl(self):
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        want = {1: self.scores_of_full(1), 2: self.scores_of_full(2)}
        self.assertNotEqual(want[1], want[2])
        srv = self.serve("--model-repo", self.repo, token=TOKEN)
        self.wait_active(srv, 1)

        # tlctl before anything changes: usage, no server, no token.
        self.assertEqual(self.tlctl(srv, "frobnicate").returncode, 2)
        self.assertEqual(self.tlctl(srv, "versions").returncode, 2)
        self.assertEqual(self.tlctl(srv, "activate", NAME, "-3").returncode, 2)
        r = self.tlctl(srv, "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("exit codes", r.stdout)
        r = self.tlctl(srv, "status", admin="127.0.0.1:%d" % harness.free_port())
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("cannot connect", r.stderr)
        r = self.tlctl(srv, "rollback", NAME, token=None)
        self.assertEqual(r.returncode, 1)
        self.assertIn("401", r.stderr)
        r = self.tlctl(srv, "rollback", NAME, token="wrong")
        self.assertEqual(r.returncode, 1)
        self.assertIn("wrong admin token", r.stderr)
        empty = os.path.join(self.tmp, "empty_token")
        open(empty, "w").close()
        r = self.tlctl(srv, "--token-file", empty, "rollback", NAME, token=None)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("the token file %s is empty" % empty, r.stderr)

        digest1 = self.digest(srv)
        r = self.tlctl(srv, "digest", NAME)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("version 1: ", r.stdout)
        self.assertIn("digest %s" % digest1["digest"], r.stdout)

        # Version 2 (a delta) appears: served, 1 kept as standby.
        self.add_delta(1, 2)
        self.wait_active(srv, 2)
        j, vs = self.versions(srv)
        self.assertEqual(vs[2]["state"], "active")
        self.assertEqual(vs[1]["state"], "standby")
        self.assertFalse(j["pinned"])
        self.assertEqual(j["keep_versions"], 1)
        r = self.tlctl(srv, "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"MODEL\s+VERSION")
        self.assertRegex(r.stdout, r"\brm\s+2\s+\S+\s+\d+\s+1\b")
        r = self.tlctl(srv, "versions", NAME)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\n2\s+active")
        self.assertRegex(r.stdout, r"\n1\s+standby")

        # Rollback under load: 1 answers within a second of the call, with its own scores.
        watch = subprocess.Popen([TLCTL, "--admin", "127.0.0.1:%d" % srv.admin_port, "watch",
                                  NAME], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        time.sleep(1.5)
        scorer = tr.Scorer(srv.port)
        scorer.start()
        time.sleep(0.3)
        shared, items = tr.request()
        with srv.client() as c:
            self.assertEqual(c.predict(NAME, shared, items).version, 2)
            t0 = time.monotonic()
            r = self.tlctl(srv, "--json", "rollback", NAME)
            while True:
                a = c.predict(NAME, shared, items)
                if a.version == 1:
                    break
                self.assertLess(time.monotonic() - t0, 1.0, "still version 2 after 1 s")
            elapsed = time.monotonic() - t0
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual((out["version"], out["rolled_back"]), (1, 2))
        self.assertLess(out["swap_us"], 1000000)
        self.assertLess(elapsed, 1.0)
        print("rollback: first answer of version 1 after %.1f ms (swap %d us)"
              % (elapsed * 1e3, out["swap_us"]))
        self.assertEqual(list(a.scores), want[1])
        time.sleep(0.3)
        scorer.stop()
        # the rolled-back-to version (its base folded past it, seen through the fold's undo)
        # serves version 1's weights bit for bit again
        self.assertEqual(self.digest(srv)["digest"], digest1["digest"])
        self.assertEqual(scorer.failures, [])
        self.assertGreater(len(scorer.answers), 10)
        self.assertEqual(scorer.answers[-1][0], 1)
        for version, scores in scorer.answers:
            self.assertIn(version, (1, 2))
            self.assertEqual(scores, want[version], "version %d answered other scores" % version)

        j, vs = self.versions(srv)
        self.assertEqual(vs[1]["state"], "active")
        self.assertEqual(vs[2]["state"], "rolled_back")
        self.assertEqual(vs[2]["reason"], "rolled back by the admin API or the guard (the log says which)")
        # The watcher does not bring 2 back, even when the listing changes.
        self.add_delta(2, 3, corrupt=True)
        self.wait_for(srv, lambda m: any(x["version"] == 3 for x in m["repository"]["refused"]),
                      "refusal of 3")
        time.sleep(4.5)  # two rescans
        self.assertEqual(self.active(srv), 1)
        j, vs = self.versions(srv)
        self.assertEqual(vs[2]["state"], "rolled_back")
        self.assertEqual(vs[3]["state"], "refused")
        self.assertIn("/3", vs[3]["reason"])
        self.assertEqual(tr.models(srv)["repository"]["rolled_back"], [2])

        # Activate 2 (not kept: a background load), pinned.
        r = self.tlctl(srv, "activate", NAME, "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("loading", r.stdout)
        self.wait_active(srv, 2)
        j, vs = self.versions(srv)
        self.assertTrue(j["pinned"])
        self.assertEqual(j["pinned_version"], 2)
        self.assertEqual(vs[1]["state"], "standby")
        with srv.client() as c:
            self.assertEqual(list(c.predict(NAME, shared, items).scores), want[2])
        # Activate the kept 1: a pointer swap, answered when done.
        r = self.tlctl(srv, "--json", "activate", NAME, "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout),
                         {"model": NAME, "version": 1, "pinned": True, "marks_kept": True})
        self.assertEqual(self.active(srv), 1)
        # A new version 4 is not served while pinned...
        self.place_full(4)
        time.sleep(3.0)
        self.assertEqual(self.active(srv), 1)
        j, vs = self.versions(srv)
        self.assertEqual(vs[4]["state"], "retired")
        self.assertEqual(vs[2]["state"], "standby")
        self.assertEqual(j["pinned_version"], 1)
        # ...nor by an admin load behind the pin's back (a restart would serve the pin)
        st, _, body = harness.http(srv.admin_port, "/v1/models/%s:load?wait=1" % NAME, "POST",
                                   json.dumps({"path": os.path.join(self.mdir, "4"),
                                               "force": True}).encode(),
                                   {"Authorization": "Bearer " + TOKEN})
        self.assertEqual(st, 409, body)
        self.assertIn("pinned to version 1", body.decode() if isinstance(body, bytes) else body)
        self.assertEqual(self.active(srv), 1)
        # ...and is once unpinned.
        r = self.tlctl(srv, "activate", NAME, "latest")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("unpinned", r.stdout)
        self.wait_active(srv, 4)
        j, vs = self.versions(srv)
        self.assertFalse(j["pinned"])
        self.assertNotIn("pinned_version", j)

        # Unknown versions: 404 naming them.
        r = self.tlctl(srv, "activate", NAME, "99")
        self.assertEqual(r.returncode, 1)
        self.assertIn("version 99", r.stderr)
        st, _, body = harness.http(srv.admin_port, "/v1/models/rm:activate", "POST",
                                   b'{"version": "newest"}',
                                   {"Authorization": "Bearer " + TOKEN})
        self.assertEqual(st, 400, body)
        st, _, body = harness.http(srv.admin_port, "/v1/models/nope/versions")
        self.assertEqual(st, 404, body)
        st, _, body = harness.http(srv.admin_port, "/v1/models/rm:rollback")
        self.assertEqual(st, 405, body)

        # Roll back 4 to the kept 1; then nothing is left to roll back to.
        r = self.tlctl(srv, "rollback", NAME)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, "from version 4 to version 1")
        self.assertEqual(self.active(srv), 1)
        r = self.tlctl(srv, "rollback", NAME)
        self.assertEqual(r.returncode, 1)
        self.assertIn("nothing to roll back to", r.stderr)
        st, _, body = harness.http(srv.admin_port, "/v1/models/rm:rollback", "POST", b"",
                                   {"Authorization": "Bearer " + TOKEN})
        self.assertEqual(st, 409, body)
        time.sleep(2.5)
        self.assertEqual(self.active(srv), 1)

        # watch printed the changes it saw (one poll a second).
        watch.send_signal(2)
        wout, werr = watch.communicate(timeout=10)
        self.assertEqual(watch.returncode, 0, werr)
        self.assertRegex(wout, r"rm version 2: active -> rolled_back")
        self.assertRegex(wout, r"rm version 1: standby -> active")
        srv.stop()

    def test_refuse(self):
        # :refuse / tlctl refuse: the active version is rolled back and never picked again
        # (whatever rescans and new listings), a kept one is dropped, nothing kept -> 409,
        # activate lifts it; without a token 401; a bad body 400.
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        want = {1: self.scores_of_full(1), 3: self.scores_of_full(3)}
        srv = self.serve("--model-repo", self.repo, "--guard-window-ms", "0", token=TOKEN)
        self.wait_active(srv, 1)
        self.add_delta(1, 2)
        self.wait_active(srv, 2)
        r = self.tlctl(srv, "refuse", NAME, "2", token=None)
        self.assertEqual(r.returncode, 1)
        self.assertIn("401", r.stderr)
        st, _, body = harness.http(srv.admin_port, "/v1/models/rm:refuse", "POST",
                                   b'{"version": "two"}', {"Authorization": "Bearer " + TOKEN})
        self.assertEqual(st, 400, body)
        r = self.tlctl(srv, "--json", "refuse", NAME, "2", "ctr far off in the A/B")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual((out["version"], out["refused"], out["rolled_back_to"]), (2, True, 1))
        self.assertEqual(self.active(srv), 1)
        shared, items = tr.request()
        with srv.client() as c:
            self.assertEqual(list(c.predict(NAME, shared, items).scores), want[1])
        _, vs = self.versions(srv)
        self.assertEqual(vs[2]["state"], "refused")
        self.assertEqual(vs[2]["reason"], "refused by admin: ctr far off in the A/B")
        time.sleep(4.5)  # two rescans: still refused, 1 still active
        self.assertEqual(self.active(srv), 1)
        # Nothing kept to take 1's place: 409, nothing changes.
        r = self.tlctl(srv, "refuse", NAME, "1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no earlier version is kept", r.stderr)
        self.assertEqual(self.active(srv), 1)
        # A new version 3 (a delta of 2, whose chain passes through the refused 2) is served:
        # a refusal is of that version, not of its files.
        self.add_delta(2, 3)
        self.wait_active(srv, 3)
        with srv.client() as c:
            self.assertEqual(list(c.predict(NAME, shared, items).scores), want[3])
        # Activating 2 lifts the refusal.
        r = self.tlctl(srv, "activate", NAME, "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_active(srv, 2)
        _, vs = self.versions(srv)
        self.assertEqual(vs[2]["state"], "active")
        self.assertIn("refused by admin", srv.output())

    def test_admin_loads_stay_inside_the_repository(self):
        # With --model-repo an admin load names a version inside the repository: a snapshot
        # outside it (here the very same files) is refused with 403 naming the repository.
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        shutil.copytree(self.full[2], os.path.join(self.mdir, "2"))
        srv = self.serve("--model-repo", self.repo, token=TOKEN)
        self.wait_active(srv, 2)
        hdr = {"Authorization": "Bearer " + TOKEN}
        for outside in (self.full[1], os.path.join(self.mdir, "..", "..", "full", "1")):
            st, _, body = harness.http(srv.admin_port, "/v1/models/rm:load?wait=1", "POST",
                                       json.dumps({"path": outside}).encode(), hdr)
            self.assertEqual(st, 403, body)
            self.assertIn("restricted to the model repository (--model-repo) '%s'" % self.repo,
                          json.loads(body)["error"])
        self.assertEqual(self.active(srv), 2)
        st, _, body = harness.http(srv.admin_port, "/v1/models/rm:load?wait=1", "POST",
                                   json.dumps({"path": os.path.join(self.mdir, "1")}).encode(), hdr)
        self.assertEqual(st, 200, body)
        self.assertEqual(self.active(srv), 1)

    def test_delta_off_another_line_is_refused(self):
        # A delta must extend the active version's line: 4 (a delta of 2) while the full 3
        # serves is refused, naming its parent, the active version and its ancestors; an
        # explicit activation serves it anyway; then 5, a delta of 3, is refused the same way.
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        srv = self.serve("--model-repo", self.repo, token=TOKEN)
        self.wait_active(srv, 1)
        self.add_delta(1, 2)
        self.wait_active(srv, 2)
        self.place_full(3)
        self.wait_active(srv, 3)
        self.add_delta(2, 4)
        self.wait_for(srv, lambda m: any(r["version"] == 4 for r in m["repository"]["refused"]),
                      "version 4 refused")
        _, vs = self.versions(srv)
        self.assertEqual(vs[4]["state"], "refused")
        self.assertIn("delta version 4 extends version 2, which is neither the active version 3 "
                      "nor one of its ancestors (3)", vs[4]["reason"])
        self.assertEqual(self.active(srv), 3)
        r = self.tlctl(srv, "activate", NAME, "4")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_active(srv, 4)
        r = self.tlctl(srv, "activate", NAME, "latest")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.add_delta(3, 5)  # extends 3, an ancestor of nothing active now (4 serves): refused
        self.wait_for(srv, lambda m: any(r["version"] == 5 for r in m["repository"]["refused"]),
                      "version 5 refused")
        self.assertEqual(self.active(srv), 4)

    def test_delta_over_a_rolled_back_version_is_refused(self):
        # 3 rolled back (2 serves); the producer's next delta 4 extends 3.  Its chain runs
        # through the active 2, but serving it would bring 3's changes back: the watcher
        # refuses it, naming the rolled-back link; an explicit activation serves it.
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        srv = self.serve("--model-repo", self.repo, token=TOKEN)
        self.wait_active(srv, 1)
        self.add_delta(1, 2)
        self.wait_active(srv, 2)
        self.add_delta(2, 3)
        self.wait_active(srv, 3)
        r = self.tlctl(srv, "rollback", NAME)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.active(srv), 2)
        self.add_delta(3, 4)
        self.wait_for(srv, lambda m: any(r["version"] == 4 for r in m["repository"]["refused"]),
                      "version 4 refused")
        self.assertEqual(self.active(srv), 2)
        _, vs = self.versions(srv)
        self.assertEqual(vs[4]["state"], "refused")
        self.assertIn("delta version 4 is built on version 3, which was rolled back",
                      vs[4]["reason"])
        r = self.tlctl(srv, "activate", NAME, "4")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_active(srv, 4)

    def test_no_standby_without_keep(self):
        shutil.copytree(self.full[1], os.path.join(self.mdir, "1"))
        srv = self.serve("--model-repo", self.repo, "--keep-versions", "0", token=TOKEN)
        self.wait_active(srv, 1)
        self.add_delta(1, 2)
        self.wait_active(srv, 2)
        j, vs = self.versions(srv)
        self.assertEqual(vs[1]["state"], "retired")
        r = self.tlctl(srv, "rollback", NAME)
        self.assertEqual(r.returncode, 1)
        self.assertIn("nothing to roll back to", r.stderr)
        self.assertEqual(self.active(srv), 2)
        srv.stop()


class TlctlAdminFlag(unittest.TestCase):
    def test_bad_admin_port_is_a_usage_error(self):
        # glibc's getaddrinfo takes 99999 modulo 65536 and "http" as port 80: tlctl would
        # try another port and report a refused connection (exit 3) for a typo
        for admin in ("127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:http", "127.0.0.1:70x",
                      "127.0.0.1:-1"):
            r = subprocess.run([TLCTL, "--admin", admin, "status"], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 2, (admin, r.stderr))
            self.assertIn("not a number in 1..65535", r.stderr)

    def test_a_port_that_never_answers_is_named_a_timeout(self):
        """A listener that accepts (the kernel's backlog) and never answers: exit 3 after
        tlctl's 10 s, saying it sent nothing in time (not 'did not answer HTTP')."""
        with socket.socket() as ls:
            ls.bind(("127.0.0.1", 0))
            ls.listen(1)
            admin = "127.0.0.1:%d" % ls.getsockname()[1]
            r = subprocess.run([TLCTL, "--admin", admin, "status"], capture_output=True,
                               text=True, timeout=30)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("accepted the connection but sent nothing in 10 s", r.stderr)

if __name__ == "__main__":
    unittest.main()
