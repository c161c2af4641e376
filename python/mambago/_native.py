"""The gopy-built extension, and the translation of its errors into Python's.

The extension (``mambago._gopy``) is built by ``pip install .``; see setup.py.
Every Go function returns ``(value, error)``; gopy raises the error as
RuntimeError, whose message starts with the exception type to raise instead.
"""

import gc

try:
    from ._gopy import bindings as _b
except ImportError as exc:  # pragma: no cover - only when the build is missing
    raise ImportError(
        "mambago's Go extension is not built: install the package with `pip install .` "
        f"(needs Go ≥ 1.26 on PATH) rather than importing it from the source tree ({exc})"
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


bindings = _b
