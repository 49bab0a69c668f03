"""The online-learning bus (server/bus.c) against a real 3-node NATS JetStream cluster.

The cluster is deploy/nats-cluster.sh's, started in a temporary directory on free loopback
ports for this module and stopped in tearDownModule (and by an atexit hook, should the module
die before it): nothing is left running. bus_probe (tests/server/bus_probe.c) does the
publishing and the checking in C; this file starts it, kills and restarts nodes under it, and
asserts on its exit status and report.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BUILD, require  # noqa: E402
import natscluster  # noqa: E402

PROBE = os.path.join(BUILD, "tests", "bus_probe")

_cluster = None


def setUpModule():
    global _cluster
    require(PROBE)
    _cluster = natscluster.start("tlbus-")


def tearDownModule():
    _cluster.stop()


def cluster(*args, check=True):
    return _cluster.run(*args, check=check)


def probe(*args, timeout=300):
    return subprocess.run([PROBE, args[0], _cluster.urls] + [str(a) for a in args[1:]],
                          capture_output=True, text=True, timeout=timeout)


def stream_leader(stream):
    """The node leading stream, as any node's /jsz reports it (None while there is none)."""
    for n in (1, 2, 3):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/jsz?accounts=true&streams=true"
                                        % (_cluster.base + 200 + n - 1), timeout=2) as r:
                j = json.load(r)
        except OSError:
            continue
        for acc in j.get("account_details", []):
            for sd in acc.get("stream_detail", []):
                if sd.get("name") == stream and sd.get("cluster", {}).get("leader"):
                    return sd["cluster"]["leader"]
    return None


class BusTest(unittest.TestCase):
    def assert_ok(self, r, what):
        self.assertEqual(r.returncode, 0, "%s failed:\n%s%s" % (what, r.stdout[-3000:], r.stderr[-3000:]))

    def test_batched_20000_read_back(self):
        r = probe("publish", "BATCHED", 20000, 256, 1024)
        self.assert_ok(r, "batched publish of 20,000")
        self.assertIn("ok published 20000", r.stdout)
        r = probe("read", "BATCHED", 10001, 20000)
        self.assert_ok(r, "read from the middle")
        self.assertIn("ok read 10001..20000", r.stdout)
        r = probe("read", "BATCHED", 1, 20000)
        self.assert_ok(r, "read from 1")

    def test_sync_publish(self):
        r = probe("publish", "SYNC", 1000, 1, 512)
        self.assert_ok(r, "synchronous publish of 1,000")
        self.assertIn("ok published 1000 ", r.stdout)

    def test_dedup(self):
        r = probe("dedup", "DEDUP")
        self.assert_ok(r, "dedup")

    def test_other_settings_refused(self):
        self.assert_ok(probe("dedup", "OTHER"), "creating the stream")
        r = probe("mismatch", "OTHER")
        self.assert_ok(r, "mismatch")
        self.assertRegex(r.stdout, r"refused: stream OTHER exists with replicas 3, this bus wants 1")
        self.assertIn("max age", r.stdout)
        self.assertIn("subjects", r.stdout)

    def spawn(self, *args):
        """The probe with stdout piped (read line by line) and stderr to a file (a full pipe
        nobody reads would block it)."""
        errf = tempfile.TemporaryFile(mode="w+")
        self.addCleanup(errf.close)
        p = subprocess.Popen([PROBE, args[0], _cluster.urls] + [str(a) for a in args[1:]],
                             stdout=subprocess.PIPE, stderr=errf, text=True)
        p.errf = errf
        self.watchdog(p)
        return p

    def stderr_of(self, p):
        p.errf.seek(0)
        return p.errf.read()

    def watchdog(self, p, seconds=300):
        """Kills p after seconds, so a stuck probe fails the test instead of hanging it."""
        t = threading.Timer(seconds, p.kill)
        t.daemon = True
        t.start()
        self.addCleanup(t.cancel)

    def _kill_while_publishing(self, stream, batch, pick):
        n = 20000 if batch > 1 else 3000
        p = self.spawn("publish", stream, n, batch, 1024)
        killed = None     # the node killed, "n1".."n3"
        restarted = False
        kill_at = 0
        report = ""
        try:
            for line in p.stdout:
                m = re.match(r"progress (\d+)", line)
                done = int(m.group(1)) if m else 0
                if m and killed is None and done >= n * 3 // 10:
                    killed = pick(stream)
                    self.assertIsNotNone(killed, "no node to kill")
                    cluster("kill", killed[1:])
                    kill_at = done
                elif m and killed and not restarted and done >= n * 6 // 10 and done > kill_at:
                    cluster("restart", killed[1:])
                    restarted = True
                elif line.startswith("ok "):
                    report = line
                    break
            p.communicate(timeout=300)
            err = self.stderr_of(p)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            if killed and not restarted:
                cluster("restart", killed[1:], check=False)
        self.assertEqual(p.returncode, 0, "publisher with a node killed:\n%s" % err[-4000:])
        self.assertTrue(killed and restarted, "the node was not killed and restarted mid-run")
        self.assertIn("ok published %d" % n, report)
        # every node up again sees the whole stream: read it back through each in turn
        r = probe("read", stream, 1, n)
        self.assert_ok(r, "read back after the restart")
        return report, err

    def test_leader_killed_while_publishing_batches(self):
        # kill -9 the stream's leader at 30%, restart it at 60%: the probe retries what was not
        # acknowledged (same ids) and then checks 1..N gapless, each index once, at its ack
        report, err = self._kill_while_publishing("KILLB", 256, stream_leader)
        print("\n  " + report.strip() + ("\n  " + err.strip().splitlines()[0] if err.strip() else ""))

    def test_follower_killed_while_publishing_sync(self):
        def follower(stream):
            leader = stream_leader(stream)
            return next(n for n in ("n1", "n2", "n3") if n != leader)
        report, err = self._kill_while_publishing("KILLS", 1, follower)
        print("\n  " + report.strip())

    def test_leader_killed_while_reading(self):
        # the ordered consumer lives on the stream's leader: kill it -9 under a reader at 30%,
        # restart it at 60%; nats.c re-creates the consumer from the last sequence delivered,
        # and the probe fails on any gap, repeat or stall
        self.assert_ok(probe("publish", "FOLLOW", 5000, 500, 256), "filling the stream")
        p = self.spawn("read", "FOLLOW", 1, 5000, 100)
        killed, restarted, report = None, False, ""
        try:
            for line in p.stdout:
                m = re.match(r"progress (\d+)", line)
                done = int(m.group(1)) if m else 0
                if m and killed is None and done >= 1500:
                    killed = stream_leader("FOLLOW")
                    self.assertIsNotNone(killed, "no leader to kill")
                    cluster("kill", killed[1:])
                elif m and killed and not restarted and done >= 3000:
                    cluster("restart", killed[1:])
                    restarted = True
                elif line.startswith("ok "):
                    report = line
            p.communicate(timeout=300)
            err = self.stderr_of(p)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            if killed and not restarted:
                cluster("restart", killed[1:], check=False)
        self.assertEqual(p.returncode, 0, "reader with the leader killed:\n%s" % err[-4000:])
        self.assertTrue(killed and restarted, "the leader was not killed and restarted mid-read")
        self.assertIn("ok read 1..5000 delivered 5000 gaps 0", report)
        print("\n  " + report.strip())


if __name__ == "__main__":
    unittest.main()
