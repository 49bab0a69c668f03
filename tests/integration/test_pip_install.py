"""The Python client installs with pip, offline, and the installed copy scores against tlserve.

    python3 tests/integration/test_pip_install.py      (exit 77 when pip is missing)

Copies codec/python to a temporary directory (so the build leaves nothing in the checkout),
runs `pip install --no-index --target SITE` on the copy with pip's default build isolation,
which is what users run (--no-index makes "offline" certain rather than a property of the
host), then, in a fresh interpreter that sees only SITE, imports tlserve, checks it came from
SITE, and scores requests against a real tlserve on a `temp_model` model: the scores must
equal those of the in-tree package, and an unknown model must raise ModelNotFoundError.
TestBuildBackend calls the in-tree backend's hooks directly: the wheel's RECORD digests and
METADATA, byte-identical rebuilds, and its TOML reader for Pythons without tomllib.
"""

import base64
import csv
import hashlib
import importlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402,F401  (puts codec/python on sys.path)
import tlserve  # noqa: E402
from harness import REPO, TLSERVE, TLSYNTH, Server, model_key, require, temp_model  # noqa: E402

SKIP = 77
MODEL = "pip_ctr"
SRC = os.path.join(REPO, "codec", "python")

# Runs in the interpreter that sees only the installed copy; prints JSON on its last line.
PROBE = r"""
import json, sys, tlserve
port, keys = int(sys.argv[1]), json.loads(sys.argv[2])
out = {"file": tlserve.__file__, "version": tlserve.__version__}
with tlserve.Client("127.0.0.1", port, timeout=10) as c:
    res = c.predict("%s", keys[:2], [[k] for k in keys[2:]])
    out["model_version"], out["scores"] = res.version, res.scores
    out["many"] = [r.scores for r in c.predict_many("%s", [(keys[:1], [[k]]) for k in keys])]
    try:
        c.predict("no_such_model", [], [[1]])
    except tlserve.ModelNotFoundError as e:
        out["error"] = [e.name, e.request_id]
print(json.dumps(out))
""" % (MODEL, MODEL)


def pip_available():
    r = subprocess.run([sys.executable, "-m", "pip", "--version"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return r.returncode == 0


class TestPipInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not pip_available():
            harness.missing("pip is not installed for %s" % sys.executable)
        require(TLSERVE, TLSYNTH)
        cls.tmp = tempfile.mkdtemp(prefix="tl_pip_")
        cls.models, model_dir = temp_model("tl_pip_model_", 5000, MODEL)
        cls.server = Server(model_dir, "--workers", "1")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.models, ignore_errors=True)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def pip_install(self, src, site):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-cache-dir",
                            "--target", site, src], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, "pip install failed:\n" + r.stdout)

    def test_install_offline_and_score(self):
        src = os.path.join(self.tmp, "src")
        shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        site = os.path.join(self.tmp, "site")
        self.pip_install(src, site)
        self.assertTrue(os.path.isfile(os.path.join(site, "tlserve", "client.py")))
        dist = [d for d in os.listdir(site) if d.endswith(".dist-info")]
        self.assertEqual(dist, ["tlserve_client-%s.dist-info" % tlserve.__version__])

        keys = [model_key(i) for i in range(6)] + [tlserve.feature_id(3, "absent")]
        env = dict(os.environ, PYTHONPATH=site)
        r = subprocess.run([sys.executable, "-c", PROBE, str(self.server.port), json.dumps(keys)],
                           env=env, cwd=self.tmp, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(os.path.dirname(os.path.dirname(got["file"])), site)
        self.assertEqual(got["version"], tlserve.__version__)

        with self.server.client() as c:
            want = c.predict(MODEL, keys[:2], [[k] for k in keys[2:]])
            many = [c.predict(MODEL, keys[:1], [[k]]).scores for k in keys]
        self.assertEqual(got["model_version"], want.version)
        self.assertEqual(got["scores"], want.scores)
        self.assertEqual(len(got["scores"]), 5)
        self.assertEqual(len(set(got["scores"][:4])), 4, "held keys should score apart")
        self.assertEqual(got["many"], many)
        self.assertEqual(got["error"][0], "UNKNOWN_MODEL")
        self.assertGreater(got["error"][1], 0)

    def test_metadata_matches_package(self):
        # the version in pyproject.toml (what pip records) is the package's __version__
        with open(os.path.join(SRC, "pyproject.toml")) as f:
            text = f.read()
        self.assertIn('version = "%s"' % tlserve.__version__, text)


class TestBuildBackend(unittest.TestCase):
    """The in-tree backend's archives, built by calling its hooks as pip does."""

    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.join(SRC, "_build_backend"))
        try:
            cls.backend = importlib.import_module("tlserve_build")
        finally:
            sys.path.pop(0)

    def build(self, hook):
        d = tempfile.mkdtemp(prefix="tl_backend_")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, getattr(self.backend, hook)(d))
        with open(path, "rb") as f:
            return path, f.read()

    def test_wheel_record(self):
        path, _ = self.build("build_wheel")
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            stem = "tlserve_client-%s" % tlserve.__version__
            self.assertEqual(os.path.basename(path), stem + "-py3-none-any.whl")
            record = stem + ".dist-info/RECORD"
            rows = list(csv.reader(io.StringIO(z.read(record).decode())))
            self.assertEqual(sorted(r[0] for r in rows), sorted(names))
            for name, digest, size in rows:
                if name == record:
                    self.assertEqual((digest, size), ("", ""))
                    continue
                data = z.read(name)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                self.assertEqual((digest, int(size)), ("sha256=" + want.decode(), len(data)),
                                 name)
            meta = z.read(stem + ".dist-info/METADATA").decode()
        for line in ("Name: tlserve-client", "Version: " + tlserve.__version__,
                     "Requires-Python: >=3.8", "License: MIT",
                     "Classifier: License :: OSI Approved :: MIT License"):
            self.assertIn(line + "\n", meta)
        self.assertIn("tlserve/client.py", names)

    def test_reproducible(self):
        for hook in ("build_wheel", "build_sdist"):
            a = self.build(hook)[1]
            self.assertEqual(self.build(hook)[1], a, hook)
        path, data = self.build("build_sdist")
        self.assertEqual(data[4:8], bytes(4), "the gzip header holds a build time")
        with tarfile.open(path) as t:
            self.assertIn("tlserve_client-%s/PKG-INFO" % tlserve.__version__, t.getnames())

    def test_parser_without_tomllib(self):
        # Python 3.8-3.10 have no tomllib: the backend's own reader must see the same table
        try:
            import tomllib
        except ImportError:
            harness.missing("no tomllib to compare with")
        with open(os.path.join(SRC, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
        self.assertEqual(self.backend._parse_project(text), tomllib.loads(text)["project"])


if __name__ == "__main__":
    if not pip_available():
        print("pip is not installed for %s: skipped" % sys.executable)
        sys.exit(SKIP)
    unittest.main()
