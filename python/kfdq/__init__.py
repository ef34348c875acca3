"""Request hints for kfdq (docs/shim.md, "Request hints"; docs/operations.md).

A latency-critical service under ``libkfdq_shim.so`` says that a request is starting before its
first GPU launch, and that it is done after its last, so the node agent (kfdqd) preempts the
batch jobs on its GPU before the first kernel arrives instead of after::

    import kfdq

    with kfdq.request():          # one line per request
        x = preprocess(payload)   # host work: the batch job is being preempted meanwhile
        y = model(x.cuda())
        torch.cuda.synchronize()

    @kfdq.request_hint            # or as a decorator (plain and ``async def`` functions)
    def infer(payload): ...

The shim's entry points ``kfdq_request_begin`` / ``kfdq_request_end`` are found in the running
process with ctypes (``ctypes.CDLL(None)``: the program and what it preloaded); nothing is
compiled. Without the shim every call is a no-op returning :attr:`Status.NO_SHIM`, and
:func:`describe` says why. Calls are safe from any thread and never block; hints nest (N
requests in flight: N begins, N ends).
"""

import contextlib
import ctypes
import enum
import functools
import inspect
import threading

__all__ = [
    "Status",
    "begin",
    "end",
    "request",
    "request_hint",
    "shim_loaded",
    "describe",
]


class Status(enum.IntEnum):
    """What a hint call returned (``enum kfdq_status`` of shim/include/kfdq.h)."""

    OK = 0
    """Taken."""
    NO_SHIM = -1
    """libkfdq_shim.so is not loaded in this process: nothing happens."""
    NO_AGENT = -2
    """No agent session (KFDQ_SOCKET unset or unreachable, or no HIP call yet): nothing to preempt."""
    NOT_ALLOWED = -3
    """The agent does not let this process's class hint (it preempts nobody)."""
    NOT_BEGUN = -4
    """An end without an open hint (never begun, ended already, or expired)."""
    TOO_MANY = -5
    """65536 hints open already."""

    @classmethod
    def of(cls, code):
        try:
            return cls(code)
        except ValueError:
            return code


_WHY = {
    Status.OK: "ok",
    Status.NO_SHIM: "libkfdq_shim.so is not loaded in this process: hints are no-ops "
    "(start it with `kfdq run --class latency -- ...` or LD_PRELOAD=libkfdq_shim.so)",
    Status.NO_AGENT: "the shim has no agent session: set KFDQ_SOCKET to kfdqd's socket "
    "(hints need an agent; before the process's first HIP call there is none yet)",
    Status.NOT_ALLOWED: "the agent does not let this class hint: only a class that preempts "
    "others can (see the class's level in /etc/kfdq/kfdq.toml)",
    Status.NOT_BEGUN: "no hint was open: ended twice, or it expired (no GPU work within the "
    "class's hint_timeout_ms)",
    Status.TOO_MANY: "65536 hints are open already (each begin needs its end)",
}

_lock = threading.Lock()
_fns = None  # (begin, end) or () once looked up


def _lookup():
    """The shim's two functions in this process, or ``()``; looked up once."""
    global _fns
    if _fns is not None:
        return _fns
    with _lock:
        if _fns is None:
            found = ()
            try:
                proc = ctypes.CDLL(None)
                b = proc.kfdq_request_begin
                e = proc.kfdq_request_end
                for f in (b, e):
                    f.argtypes = []
                    f.restype = ctypes.c_int
                found = (b, e)
            except (OSError, AttributeError):
                pass
            _fns = found
    return _fns


def shim_loaded():
    """Whether libkfdq_shim.so is loaded in this process (its hint functions were found)."""
    return bool(_lookup())


def begin():
    """``kfdq_request_begin()``: a request is starting. Returns a :class:`Status`."""
    fns = _lookup()
    return Status.of(fns[0]()) if fns else Status.NO_SHIM


def end():
    """``kfdq_request_end()``: a request begun earlier is done. Returns a :class:`Status`."""
    fns = _lookup()
    return Status.of(fns[1]()) if fns else Status.NO_SHIM


def describe(status=None):
    """A status in words (default: what :func:`begin` would meet now, without calling it)."""
    if status is None:
        status = Status.OK if shim_loaded() else Status.NO_SHIM
    return _WHY.get(status, "unknown status %r" % (status,))


class Hint:
    """One request's hint (what ``with kfdq.request() as h`` gives): ``h.status`` is what
    :func:`begin` returned, ``h.end_status`` what :func:`end` returned (``None`` until it
    ran; never called when the begin was not taken)."""

    __slots__ = ("status", "end_status")

    def __init__(self, status):
        self.status = status
        self.end_status = None

    def __repr__(self):
        return "Hint(status=%r, end_status=%r)" % (self.status, self.end_status)


@contextlib.contextmanager
def request():
    """Context manager: the hint spans the block; ended even when the block raises."""
    h = Hint(begin())
    try:
        yield h
    finally:
        if h.status == Status.OK:
            h.end_status = end()


def request_hint(fn):
    """Decorator: every call of ``fn`` (a function or an ``async def``) is one request."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args, **kwargs):
            with request():
                return await fn(*args, **kwargs)

        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with request():
            return fn(*args, **kwargs)

    return wrapper
