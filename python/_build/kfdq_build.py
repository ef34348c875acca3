"""The package's build backend (PEP 517), in the tree: it needs nothing to be downloaded, so
``pip install ./python`` works offline and in pip's isolated build environment on a fresh
Debian 12 (whose venvs have pip and setuptools but not ``wheel``, which setuptools before 70.1
needs to build a wheel). The package is pure Python: a wheel is its ``kfdq/`` files plus the
three metadata files the wheel format (PEP 427) requires.
"""

import base64
import hashlib
import os
import tarfile
import zipfile

NAME = "kfdq"
VERSION = "0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"

METADATA = """Metadata-Version: 2.1
Name: {name}
Version: {version}
Summary: Request hints for kfdq: tell the node agent a latency-critical GPU request is starting before its first kernel
License: MIT OR Apache-2.0
Requires-Python: >=3.8
""".format(name=NAME, version=VERSION)

WHEEL = """Wheel-Version: 1.0
Generator: kfdq_build
Root-Is-Purelib: true
Tag: {tag}
""".format(tag=TAG)


def _package_files():
    """The package's files, as (path in the wheel, path on disk), sorted."""
    out = []
    for d, dirs, files in os.walk(os.path.join(ROOT, NAME)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(d, f)
                out.append((os.path.relpath(p, ROOT).replace(os.sep, "/"), p))
    return out


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "{},sha256={},{}".format(arcname, digest, len(data))


def _dist_info():
    return "{}-{}.dist-info".format(NAME, VERSION)


def _write_metadata(directory):
    info = os.path.join(directory, _dist_info())
    os.makedirs(info, exist_ok=True)
    for name, text in (("METADATA", METADATA), ("WHEEL", WHEEL)):
        with open(os.path.join(info, name), "w") as f:
            f.write(text)
    return _dist_info()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _write_metadata(metadata_directory)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = "{}-{}-{}.whl".format(NAME, VERSION, TAG)
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        entries = [(arc, open(p, "rb").read()) for arc, p in _package_files()]
        info = _dist_info()
        entries.append((info + "/METADATA", METADATA.encode()))
        entries.append((info + "/WHEEL", WHEEL.encode()))
        for arc, data in entries:
            z.writestr(arc, data)
            records.append(_record_line(arc, data))
        records.append(info + "/RECORD,,")
        z.writestr(info + "/RECORD", "\n".join(records) + "\n")
    return name


def build_sdist(sdist_directory, config_settings=None):
    base = "{}-{}".format(NAME, VERSION)
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/kfdq_build.py"]:
            t.add(os.path.join(ROOT, rel), arcname=base + "/" + rel)
        for arc, p in _package_files():
            t.add(p, arcname=base + "/" + arc)
        pkg_info = os.path.join(sdist_directory, "PKG-INFO.tmp")
        with open(pkg_info, "w") as f:
            f.write(METADATA)
        t.add(pkg_info, arcname=base + "/PKG-INFO")
        os.remove(pkg_info)
    return name
