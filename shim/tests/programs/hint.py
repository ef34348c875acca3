"""hint.py LIB KERNELS WG_US WGS: programs/hint.c's steps in Python, through the kfdq package
(python/, on PYTHONPATH) and ctypes. LIB is programs/hintops.c built as a library linking
fakehip, loaded RTLD_LOCAL. Steps, each after its checkpoint (the protocol of common.h):
  warm-up, then "symbols <loaded 0/1> <loaded 0/1>"
  "ready":   `with kfdq.request()` entered        -> "begin <status>"
  "work":    the request's launches, synchronised -> "worked"
  "end":     the block left; kfdq.end() once more -> "end <end status>", "end2 <status>"
  "threads": 8 threads x 1000 `with kfdq.request()` -> "threads <begins ok> <ends ok>",
             kfdq.end()                            -> "after <status>"
  "done":    exit.
With HINT_WAIT_AGENT set, the begin is tried again every ms while the shim says no agent or
not allowed (the agent's allowance may be on its way), up to 60 s.
"""

import ctypes
import os
import sys
import threading
import time

import kfdq


def checkpoint(tag):
    print("CHECKPOINT %s %d" % (tag, os.getpid()), flush=True)
    go = os.environ.get("KFDQ_TEST_GO")
    if not go:
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(go) or os.path.exists(go + "-" + tag):
            return
        time.sleep(0.005)


def main():
    lib, kernels, wg_us, wgs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    ops = ctypes.CDLL(lib)
    ops.hint_request.argtypes = [ctypes.c_int, ctypes.c_double, ctypes.c_int]
    assert ops.hint_warmup() == 0
    loaded = int(kfdq.shim_loaded())
    print("symbols %d %d" % (loaded, loaded), flush=True)

    checkpoint("ready")
    cm = kfdq.request()
    h = cm.__enter__()
    waiting = (kfdq.Status.NO_AGENT, kfdq.Status.NOT_ALLOWED)
    deadline = time.monotonic() + 60
    while os.environ.get("HINT_WAIT_AGENT") and h.status in waiting and time.monotonic() < deadline:
        cm.__exit__(None, None, None)
        time.sleep(0.001)
        cm = kfdq.request()
        h = cm.__enter__()
    print("begin %d" % h.status, flush=True)

    checkpoint("work")
    assert ops.hint_request(kernels, wg_us, wgs) == 0
    print("worked", flush=True)

    checkpoint("end")
    cm.__exit__(None, None, None)
    end = h.end_status if h.end_status is not None else kfdq.end()
    print("end %d" % end)
    print("end2 %d" % kfdq.end(), flush=True)

    checkpoint("threads")
    counts = [[0, 0] for _ in range(8)]

    def hinter(c):
        for _ in range(1000):
            with kfdq.request() as x:
                c[0] += x.status == kfdq.Status.OK
            c[1] += x.end_status == kfdq.Status.OK

    ts = [threading.Thread(target=hinter, args=(c,)) for c in counts]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print("threads %d %d" % (sum(c[0] for c in counts), sum(c[1] for c in counts)))
    print("after %d" % kfdq.end(), flush=True)

    checkpoint("done")


main()
