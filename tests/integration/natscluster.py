"""A real 3-node NATS JetStream cluster for a test module: deploy/nats-cluster.sh in a temporary
directory on free loopback ports, stopped by stop() (tearDownModule), at exit, on SIGTERM, and by
the script's watchdog once this process is gone however it ended (a ctest timeout's SIGKILL), so
that nothing is left running.

    c = natscluster.start("tlbus-")   # raises when nats-server is missing or does not start
    c.urls, c.base                     # client URLs; ports base.. (clients), base+200.. (HTTP)
    c.run("kill", 1); c.run("restart", 1)
    c.stop()
"""
import atexit
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile

from harness import REPO

SCRIPT = os.path.join(REPO, "deploy", "nats-cluster.sh")


def _ports_free(base):
    for off in (0, 1, 2, 100, 101, 102, 200, 201, 202):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", base + off))
            except OSError:
                return False
    return True


class Cluster:
    def __init__(self, prefix):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.base = None
        self.urls = None

    def run(self, *args, check=True):
        """nats-cluster.sh CMD DIR ARGS...: the CompletedProcess (raises on failure with check)."""
        env = dict(os.environ, NATS_CLUSTER_OWNER=str(os.getpid()))
        return subprocess.run(["bash", SCRIPT, args[0], self.dir] + [str(a) for a in args[1:]],
                              capture_output=True, text=True, timeout=120, check=check, env=env)

    def stop(self):
        if self.dir:
            subprocess.run(["bash", SCRIPT, "stop", self.dir], capture_output=True, timeout=60)
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def start(prefix):
    if not shutil.which("nats-server"):
        raise RuntimeError("nats-server is not installed: run deploy/install-deps.sh")
    c = Cluster(prefix)
    atexit.register(c.stop)
    signal.signal(signal.SIGTERM, lambda *_: (c.stop(), os._exit(143)))
    for _ in range(50):
        c.base = random.randrange(21000, 32000)  # below the ephemeral range (32768 up)
        if _ports_free(c.base):
            break
    r = c.run("start", c.base, check=False)
    if r.returncode != 0:
        log = "".join(open(os.path.join(c.dir, "n%d.log" % n)).read()[-2000:] for n in (1, 2, 3)
                      if os.path.exists(os.path.join(c.dir, "n%d.log" % n)))
        c.stop()
        raise RuntimeError("nats-cluster.sh start failed: %s%s\n%s" % (r.stdout, r.stderr, log))
    c.urls = c.run("urls").stdout.strip()
    return c
