"""The kfdq package's own tests: without the shim every call is a no-op that says so; under the
shim (``KFDQ_SHIM``: the path of libkfdq_shim.so) without an agent the shim's own codes come
back through ctypes. Each case runs in a fresh interpreter with the environment it names, so
the runner's own environment (a preload or not) changes nothing. The runs next to a real agent
and a batch job on kfd-emu are shim/tests/hint.rs (``python_*`` tests).
"""

import os
import subprocess
import sys
import textwrap
import unittest

import kfdq

# Where the package under test was imported from: the child interpreters import the same.
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(kfdq.__file__)))
SHIM = os.environ.get("KFDQ_SHIM", "")


def run(script, preload=None, env=None):
    """Runs ``script`` in a fresh interpreter; returns its stdout lines (fails on an error)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("KFDQ_") and k != "LD_PRELOAD"}
    e["PYTHONPATH"] = PKG_ROOT
    if preload:
        e["LD_PRELOAD"] = preload
    e.update(env or {})
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        timeout=120,
    )
    if p.returncode != 0:
        raise AssertionError("child failed (%d): %s%s" % (p.returncode, p.stdout, p.stderr))
    return p.stdout.split("\n")


# What every case prints: the codes of the calls and of a context manager and a decorator.
PROBE = """
    import asyncio, threading, kfdq
    print("loaded", kfdq.shim_loaded())
    print("begin", int(kfdq.begin()))
    print("end", int(kfdq.end()))
    with kfdq.request() as h:
        inside = True
    print("with", int(h.status), h.end_status)

    @kfdq.request_hint
    def f(x, y=1):
        "doc of f"
        return x + y

    print("decorated", f(2, y=3), f.__name__, f.__doc__)

    @kfdq.request_hint
    async def g(x):
        return x * 2

    print("async", asyncio.run(g(21)), g.__name__)
    try:
        with kfdq.request():
            raise KeyError("boom")
    except KeyError as e:
        print("raised", e)
    codes = []
    def hammer():
        for _ in range(1000):
            codes.append(int(kfdq.begin()))
            codes.append(int(kfdq.end()))
    ts = [threading.Thread(target=hammer) for _ in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    print("threads", len(codes), sorted(set(codes)))
    print("describe", kfdq.describe(kfdq.begin()))
"""


def line(lines, tag):
    for l in lines:
        if l.startswith(tag + " "):
            return l[len(tag) + 1 :]
    raise AssertionError("no %r line in %r" % (tag, lines))


class WithoutTheShim(unittest.TestCase):
    def test_every_call_is_a_no_op_that_says_so(self):
        out = run(PROBE)
        self.assertEqual(line(out, "loaded"), "False")
        self.assertEqual(line(out, "begin"), "-1")
        self.assertEqual(line(out, "end"), "-1")
        # The block ran; no end was called for a begin not taken.
        self.assertEqual(line(out, "with"), "-1 None")
        self.assertEqual(line(out, "decorated"), "5 f doc of f")
        self.assertEqual(line(out, "async"), "42 g")
        self.assertEqual(line(out, "raised"), "'boom'")
        self.assertEqual(line(out, "threads"), "8000 [-1]")
        self.assertIn("not loaded", line(out, "describe"))

    def test_status_names_the_header_codes(self):
        self.assertEqual(
            [(s.name, int(s)) for s in kfdq.Status],
            [
                ("OK", 0),
                ("NO_SHIM", -1),
                ("NO_AGENT", -2),
                ("NOT_ALLOWED", -3),
                ("NOT_BEGUN", -4),
                ("TOO_MANY", -5),
            ],
        )
        self.assertEqual(kfdq.Status.of(-99), -99)


@unittest.skipUnless(SHIM, "KFDQ_SHIM (the path of libkfdq_shim.so) is not set")
class UnderTheShim(unittest.TestCase):
    def test_without_an_agent_the_shim_says_so(self):
        self.assertTrue(os.path.exists(SHIM), SHIM)
        out = run(PROBE, preload=SHIM)
        self.assertEqual(line(out, "loaded"), "True")
        self.assertEqual(line(out, "begin"), "-2")
        self.assertEqual(line(out, "end"), "-2")
        self.assertEqual(line(out, "with"), "-2 None")
        self.assertEqual(line(out, "decorated"), "5 f doc of f")
        self.assertEqual(line(out, "async"), "42 g")
        self.assertEqual(line(out, "threads"), "8000 [-2]")
        self.assertIn("KFDQ_SOCKET", line(out, "describe"))

    def test_an_unreachable_agent_is_no_agent(self):
        out = run(PROBE, preload=SHIM, env={"KFDQ_SOCKET": "/nonexistent/kfdq.sock"})
        self.assertEqual(line(out, "begin"), "-2")


if __name__ == "__main__":
    unittest.main()
