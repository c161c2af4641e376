"""The gopy-built extension, and the translation of its errors into Python's.

The extension (``mambago._gopy``) is built by ``pip install .``; see setup.py.
Every Go function returns ``(value, error)``; gopy raises the error as
RuntimeError, whose message starts with the exception type to raise instead.
In a process forked after the import, every function raises RuntimeError
rather than entering Go, whose runtime did not survive the fork.
"""

import functools
import gc
import os
import queue
import threading


def cpu_flags(cpuinfo="/proc/cpuinfo"):
    """This CPU's flags as the cpuinfo file lists them, or None where there is none to read."""
    try:
        with open(cpuinfo) as f:
            return set(next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), []))
    except OSError:
        return None


def _check_cpu(cpuinfo="/proc/cpuinfo"):
    """Raise ImportError when this CPU lacks what the extension was built for.

    A wheel built with GOAMD64=v3 (setup.py's pick on a CPU with AVX2) holds
    instructions an older CPU lacks, and Go's runtime stops the whole process
    when it loads there; this says why as an ImportError instead.
    """
    try:
        from ._gopy import build_info
    except ImportError:
        return  # not built yet (the import below says so), or built by hand
    flags = cpu_flags(cpuinfo)
    if not build_info.CPU_FLAGS or flags is None:
        return  # nothing needed, or no /proc here to check against
    missing = sorted(set(build_info.CPU_FLAGS) - flags)
    if missing:
        raise ImportError(
            f"mambago was built for x86-64-{build_info.GOAMD64} CPUs, and this one lacks {', '.join(missing)}: "
            "install it from its source on this machine (`pip install .` in the source tree, or its sdist), "
            "or build the wheel with GOAMD64=v1 set"
        )


_check_cpu()

try:
    from ._gopy import bindings as _b
except ImportError as exc:  # pragma: no cover - only when the build is missing
    raise ImportError(
        "mambago's Go extension is not built: install the package with `pip install .`, or "
        "`pip install -e .` in a development tree (either builds it, with Go and a C compiler from PyPI "
        "where the machine has none), rather than "
        f"importing python/mambago as it is ({exc})"
    ) from exc

# gopy registers a callback that runs a full Go GC after every Python GC pass;
# it slows Python programs 5-300x (design.md §8) and mambago keeps no Go
# objects alive through Python references, so remove it.
gc.callbacks[:] = [cb for cb in gc.callbacks if getattr(cb, "__name__", "") != "_gopy_gc_cb"]

_TYPES = {"ValueError": ValueError, "TypeError": TypeError, "RuntimeError": RuntimeError}


def call(fn, *args):
    """Call a bindings function, re-raising its Go error as the type it names."""
    try:
        return fn(*args)
    except RuntimeError as exc:
        msg = str(exc)
        kind, sep, rest = msg.partition(": ")
        if sep and kind in _TYPES:
            raise _TYPES[kind](rest) from None
        raise


# The process that imported the extension. Go's runtime threads (and a CUDA
# context) do not survive fork(): a forked child that calls into Go waits
# forever. Every call checks the pid first and raises instead.
_PID = os.getpid()

FORKED_MESSAGE = (
    "mambago cannot run in a process forked from one that had imported it: the Go runtime "
    "(and CUDA) do not survive fork(), so the call would hang. Start workers with "
    "multiprocessing's 'spawn' or 'forkserver' method (multiprocessing.set_start_method('spawn'), "
    "or DataLoader(..., multiprocessing_context='spawn')), or import mambago only inside the workers"
)


class _Bindings:
    """The extension's module, each function refusing to run in a forked child."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        fn = getattr(self._module, name)
        if not callable(fn):
            return fn

        @functools.wraps(fn)
        def guarded(*args, **kwargs):
            if os.getpid() != _PID:
                raise RuntimeError(FORKED_MESSAGE)
            return fn(*args, **kwargs)

        setattr(self, name, guarded)  # built once a name; later lookups skip __getattr__
        return guarded


bindings = _Bindings(_b)


def interruptible(fn, *args, keep=(), poll=None):
    """call(fn, *args, stop) where Ctrl-C can end it: fn's last argument is a
    stop signal (bindings.NewStop) that it checks as it goes. Python raises
    KeyboardInterrupt only between bytecodes, never inside a Go call, so on
    the main thread the call runs on a worker thread (one for the process;
    the hop measured 75-80 µs a call on 2 cores) while the main thread
    waits; a KeyboardInterrupt there raises the signal, waits for the call
    to end, and goes on up. keep holds the arrays whose addresses are in
    args: the worker keeps them alive until Go has returned, even where a
    second Ctrl-C leaves the call to end alone.

    poll, if given, is called with the signal every POLL_S while the call
    runs and once after it returns, on the calling thread (to stream what
    the call has done so far: bindings.StopProgress); an exception from it
    stops the call as Ctrl-C does. Off the main thread, which gets no
    KeyboardInterrupt, a call without poll is made in place, with no
    signal, and one with poll runs on a thread of its own."""
    main = threading.current_thread() is threading.main_thread()
    if not main and poll is None:
        return call(fn, *args, 0)
    stop = call(bindings.NewStop)  # raises in a forked child, whose worker is gone
    box = {"keep": keep}  # released by the worker, once Go has returned
    done = threading.Event()

    def work():
        try:
            box["value"] = call(fn, *args, stop)
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc
        finally:
            del box["keep"]
            done.set()

    queued = False
    try:
        if main:
            _calls().put(work)
        else:
            threading.Thread(target=work, name="mambago-call", daemon=True).start()
        queued = True
        while not done.wait(POLL_S if poll else WAKE_S):
            if poll:
                poll(stop)
        if poll and "error" not in box:
            poll(stop)
    except BaseException:  # Ctrl-C, or poll's own error
        call(bindings.Stop, stop)  # the call ends before its next step
        if queued:
            done.wait()
        raise
    finally:
        call(bindings.FreeStop, stop)  # also stops a call still running
    if "error" in box:
        raise box.pop("error")
    return box["value"]


def abandonable(fn, *args, keep=(), discard=None):
    """call(fn, *args) for a call that cannot stop part way (a load: reading
    a checkpoint, compiling the CUDA kernels), where Ctrl-C still returns at
    once. On the main thread the call runs on a thread of its own, and a
    KeyboardInterrupt goes up as soon as it comes; the call then runs to its
    end alone, keep's arrays (whose addresses are in args) alive until it
    returns, and discard, if given, receives what it returns (the handle of
    a model nobody holds). Off the main thread the call is made in place."""
    if threading.current_thread() is not threading.main_thread():
        return call(fn, *args)
    box = {"keep": keep}
    lock = threading.Lock()  # orders the result's arrival against the caller's leaving
    done = threading.Event()

    def work():
        try:
            value = call(fn, *args)
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc
        else:
            with lock:
                left = box.get("left", False)
                if not left:
                    box["value"] = value
            if left and discard:
                discard(value)
        finally:
            del box["keep"]
            done.set()

    threading.Thread(target=work, name="mambago-load", daemon=True).start()
    try:
        while not done.wait(WAKE_S):
            pass
    except BaseException:  # Ctrl-C: leave the call to finish alone
        with lock:
            box["left"] = True
            arrived = box.pop("value", None)  # handles start at 1
        if arrived is not None and discard:
            discard(arrived)
        raise
    if "error" in box:
        raise box.pop("error")
    return box["value"]


# How often interruptible calls poll while a call runs, in seconds.
POLL_S = 0.01

# How often the main thread wakes while it waits for a call, in seconds. A
# SIGINT the kernel hands to another thread (one of Go's, or the worker)
# does not wake a thread blocked on a lock: Python runs its handler, and
# raises KeyboardInterrupt, only once the main thread runs again. Waiting
# without a timeout, 5 of 60 interrupted generations under load ran to
# their end (35 s) before the KeyboardInterrupt came.
WAKE_S = 0.05


_CALLS = None
_CALLS_LOCK = threading.Lock()


def _calls():
    """The queue of the worker thread that makes the main thread's
    interruptible calls, started on first use: one thread for the process,
    since Go takes a while to adopt each new thread that calls in."""
    global _CALLS
    with _CALLS_LOCK:
        if _CALLS is None:
            jobs = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(jobs,), name="mambago-calls", daemon=True).start()
            _CALLS = jobs
    return _CALLS


def _serve(jobs):
    """Run the jobs put on jobs, one at a time, for the life of the process."""
    while True:
        jobs.get()()
