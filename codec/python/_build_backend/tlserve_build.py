"""tlserve_build: the PEP 517 build backend of tlserve-client, standard library only.

Why a backend of its own: pip builds a package in an isolated environment into which it first
installs the backend named in pyproject.toml, from the package index.  Hosts without access to
an index (CI, production machines) then cannot `pip install ./codec/python` with setuptools
or flit as the backend, short of `--no-build-isolation` and a matching setuptools (and, before
setuptools 70.1, the `wheel` package) already installed.  This backend ships in the source
tree (pyproject.toml: backend-path), needs nothing installed (`requires = []`), so the plain
command works offline with any pip >= 21.3 and Python >= 3.8.

It does the little a pure-Python package needs: a wheel (py3-none-any) holding tlserve/*.py
and the .dist-info (METADATA from pyproject.toml's [project] table, WHEEL, RECORD with
sha256 digests), an editable wheel (PEP 660: a .pth file naming this directory), and an
sdist.  Builds are reproducible: entries are sorted and dated 1980-01-01.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "tlserve"
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _project() -> dict:
    """pyproject.toml's [project] table (tomllib where there is one, 3.11+; else
    _parse_project, which reads the subset of TOML this file uses)."""
    path = os.path.join(ROOT, "pyproject.toml")
    try:
        import tomllib
    except ImportError:
        with open(path, encoding="utf-8") as f:
            return _parse_project(f.read())
    with open(path, "rb") as f:
        return tomllib.load(f)["project"]


def _parse_project(text: str) -> dict:
    """The [project] table of a pyproject.toml whose values there are strings (`k = "v"`),
    inline tables of strings (`k = {text = "v"}`) or arrays of strings, one line or many."""
    out, section, array = {}, None, None
    for line in text.splitlines():
        line = line.strip()
        if array is not None:                     # inside a multi-line array
            array += re.findall(r'"([^"]*)"', line)
            if line.endswith("]"):
                array = None
            continue
        m = re.match(r"^\[([^\]]+)\]$", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"^([A-Za-z0-9_-]+)\s*=\s*(.*)$", line) if section == "project" else None
        if not m:
            continue
        key, v = m.groups()
        if v.startswith('"'):
            out[key] = re.match(r'"([^"]*)"', v).group(1)
        elif v.startswith("{"):
            out[key] = dict(re.findall(r'([A-Za-z0-9_-]+)\s*=\s*"([^"]*)"', v))
        elif v.startswith("["):
            out[key] = re.findall(r'"([^"]*)"', v)
            if not v.endswith("]"):
                array = out[key]
    return out


def _names():
    p = _project()
    dist = re.sub(r"[-_.]+", "_", p["name"]).lower()
    return p, dist, "%s-%s" % (dist, p["version"])


def _metadata() -> bytes:
    p, _, _ = _names()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if "description" in p:
        lines.append("Summary: " + p["description"])
    if "requires-python" in p:
        lines.append("Requires-Python: " + p["requires-python"])
    lic = p.get("license")
    if isinstance(lic, dict) and "text" in lic:
        lines.append("License: " + lic["text"])
    for c in p.get("classifiers", []):
        lines.append("Classifier: " + c)
    body = ""
    readme = p.get("readme")
    if isinstance(readme, str):
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
        lines.append("Description-Content-Type: text/markdown")
    return ("\n".join(lines) + "\n\n" + body).encode("utf-8")


def _sources():
    """(archive name, bytes) of every module of the package, sorted."""
    out = []
    pkg = os.path.join(ROOT, PACKAGE)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") or name == "py.typed":
            with open(os.path.join(pkg, name), "rb") as f:
                out.append(("%s/%s" % (PACKAGE, name), f.read()))
    return out


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _dist_info(stem: str):
    wheel = ("Wheel-Version: 1.0\nGenerator: tlserve_build\nRoot-Is-Purelib: true\n"
             "Tag: py3-none-any\n").encode()
    return [("%s.dist-info/METADATA" % stem, _metadata()),
            ("%s.dist-info/WHEEL" % stem, wheel),
            ("%s.dist-info/top_level.txt" % stem, (PACKAGE + "\n").encode())]


def _write_wheel(wheel_directory: str, files) -> str:
    _, _, stem = _names()
    name = stem + "-py3-none-any.whl"
    files = list(files) + _dist_info(stem)
    record = "%s.dist-info/RECORD" % stem
    lines = [_record_line(n, d) for n, d in files] + [record + ",,"]
    files.append((record, ("\n".join(lines) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for n, d in files:
            info = zipfile.ZipInfo(n, _EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    return name


# -- PEP 517 hooks ----------------------------------------------------------------------------
def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _, _, stem = _names()
    d = os.path.join(metadata_directory, stem + ".dist-info")
    os.makedirs(d, exist_ok=True)
    for n, data in _dist_info(stem):
        with open(os.path.join(metadata_directory, n), "wb") as f:
            f.write(data)
    return stem + ".dist-info"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """Write <dist>-<version>-py3-none-any.whl into wheel_directory; return its name."""
    return _write_wheel(wheel_directory, _sources())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a wheel whose .pth puts this source directory on sys.path."""
    _, dist, _ = _names()
    return _write_wheel(wheel_directory, [("_%s_editable.pth" % dist, (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    """Write <dist>-<version>.tar.gz (sources, this backend, PKG-INFO); return its name."""
    _, _, stem = _names()
    files = [("PKG-INFO", _metadata())]
    for rel in ("pyproject.toml", "README.md", "_build_backend/tlserve_build.py"):
        with open(os.path.join(ROOT, rel), "rb") as f:
            files.append((rel, f.read()))
    files += _sources()
    name = stem + ".tar.gz"
    # the gzip header's time and file name fixed too (tarfile's "w:gz" writes the clock's)
    with open(os.path.join(sdist_directory, name), "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as t:
        for n, d in sorted(files):
            info = tarfile.TarInfo("%s/%s" % (stem, n))
            info.size, info.mode, info.mtime = len(d), 0o644, 315532800
            t.addfile(info, io.BytesIO(d))
    return name
