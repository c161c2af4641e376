"""The Python face of mambago: Model and State over numpy arrays.

Contract of every entry:

* integer inputs (token ids) may be any integer dtype in any memory layout
  (slices such as ids[:, -1] included), lists too; they are passed to the
  engine as a C-contiguous int64 copy where they are not one already;
* float inputs (inputs_embeds, features, hidden, states) must be float32 numpy
  arrays (or objects numpy can view as such without a copy, e.g. CPU torch
  tensors), C-contiguous;
* outputs are new float32 (or int64) numpy arrays, filled with NaN before the
  engine writes them;
* bad input raises TypeError (wrong dtype or type) or ValueError (wrong rank,
  shape, batch size, non-contiguous float memory, out-of-range ids, NaN/inf), naming
  the argument. Nothing crashes the interpreter.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import sys
import _thread
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields

import numpy as np

from . import _cudalibs
from ._native import abandonable as _abandonable
from ._native import bindings as _b
from ._native import call as _call
from ._native import interruptible as _interruptible

_OUTPUTS = ("last", "all", "sum", "mean")


@dataclass(frozen=True)
class Config:
    """A model's dimensions, as read from its config.json."""

    model_type: str
    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    state_size: int
    conv_kernel: int
    time_step_rank: int
    vocab_size: int
    use_bias: bool
    use_conv_bias: bool
    layer_norm_epsilon: float
    tie_word_embeddings: bool
    input_dim: int
    eos_token_id: int | None
    pad_token_id: int | None
    more_eos_token_ids: tuple[int, ...] = ()  # a list of eos ids in config.json: those past the first
    _commit_hash = None  # not a field: transformers' pipeline() (5.17) reads a model config's Hub revision

    @classmethod
    def _from_go(cls, raw: dict) -> "Config":
        c = dict(raw)
        for name in ("eos_token_id", "pad_token_id"):  # -1: the config names none
            c[name] = None if c.get(name, -1) < 0 else c[name]
        c["more_eos_token_ids"] = tuple(c.get("more_eos_token_ids") or ())
        return cls(**{f.name: c[f.name] for f in fields(cls)})


def _as_array(name, x, kind):
    """Return x as a C-contiguous numpy array of the kind asked for, or raise.

    kind "int" accepts any integer dtype in any layout (copied to C-contiguous
    int64 where needed: token ids are small); kind "float32" accepts
    C-contiguous float32 only, so that a large array is never copied behind
    the caller's back.
    """
    if x is None:
        raise TypeError(f"{name} is required")
    if isinstance(x, (list, tuple)):
        try:
            x = np.asarray(x, dtype=np.int64 if kind == "int" else np.float32)
        except (ValueError, TypeError, OverflowError) as exc:
            raise TypeError(f"{name}: cannot convert the list to an array ({exc})") from None
    elif not isinstance(x, np.ndarray):
        if hasattr(x, "__array__") or hasattr(x, "__array_interface__"):
            if getattr(x, "is_cuda", False):
                raise TypeError(f"{name} is a CUDA tensor; the numpy entries take host memory (call .cpu())")
            x = np.asarray(x)
        else:
            raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    if kind == "int":
        if x.dtype == np.bool_ or not np.issubdtype(x.dtype, np.integer):
            raise TypeError(f"{name} must hold integers, got dtype {x.dtype}")
    elif x.dtype != np.float32:
        raise TypeError(f"{name} must be float32, got dtype {x.dtype} (use .astype(np.float32))")
    if kind == "int":
        if x.dtype == np.uint64 and x.size and x.max() > np.iinfo(np.int64).max:
            # astype would wrap such an id to a negative one, and the error would name that
            raise ValueError(f"{name} holds token id {x.max()}, outside the int64 range of token ids")
        return x.astype(np.int64, order="C", copy=False)  # keeps a 0-d array 0-d, for the rank check
    if not x.flags.c_contiguous:
        raise ValueError(f"{name} is not C-contiguous (use np.ascontiguousarray)")
    return x


def _token_column(token_ids):
    """A step's token_ids as int64: [B] as given, or a [B, 1] column as its B
    ids (a view, contiguous like the column)."""
    ids = _as_array("token_ids", token_ids, "int")
    return ids[:, 0] if ids.ndim == 2 and ids.shape[1] == 1 else ids


def _spans(mask, B, T):
    """An attention_mask [B, T] ([T] for one row): 1 (or True) at a token, 0 at
    padding, each row's tokens one run. Returns each row's (first token,
    token count) as int64 [B, 2], or None when nothing is padded."""
    if mask is None:
        return None
    if getattr(mask, "is_cuda", False):
        raise TypeError("attention_mask is a CUDA tensor; the numpy entries take host memory (call .cpu())")
    m = np.asarray(mask)
    if m.dtype != np.bool_ and not np.issubdtype(m.dtype, np.number):
        raise TypeError(f"attention_mask must hold numbers or booleans, got dtype {m.dtype}")
    m = _batched("attention_mask", m, 2)
    if m.shape != (B, T):
        raise ValueError(f"attention_mask has shape {m.shape}, the prompt has {(B, T)}")
    if np.any((m != 0) & (m != 1)):
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (token)")
    m = m.astype(np.int64)
    count = m.sum(axis=1)
    if np.any(count == 0):
        raise ValueError(f"attention_mask row {int(np.argmin(count))} has no tokens")
    if np.all(count == T):
        return None
    first = np.argmax(m, axis=1)
    pos = np.arange(T)
    run = (pos >= first[:, None]) & (pos < (first + count)[:, None])
    if not np.array_equal(m, run):
        b = int(np.argmax(np.any(m != run, axis=1)))
        raise ValueError(f"attention_mask row {b} has padding between its tokens; "
                         f"padding may only come before them (left) or after them (right)")
    return np.ascontiguousarray(np.stack([first, count], axis=1), dtype=np.int64)


def _left_padding(mask, B, T):
    """The positions of padding that open each row of a left-padded
    attention_mask [B, T] (a CUDA tensor is copied to the host), as int64 [B]."""
    if getattr(mask, "is_cuda", False):
        mask = mask.cpu()
    spans = _spans(mask, B, T)
    if spans is None:
        return np.zeros(B, np.int64)
    first, count = spans[:, 0], spans[:, 1]
    if np.any(first + count != T):
        b = int(np.argmax(first + count != T))
        raise ValueError(f"attention_mask row {b} is padded on the right; prefill_ptr takes left padding only "
                         f"(each row's tokens end at the last position), or use prefill on host arrays")
    return np.ascontiguousarray(first, dtype=np.int64)


def _span_args(spans):
    """The (address, row count) pair the bindings take for spans; (0, 0) for none."""
    return (0, 0) if spans is None else (_addr(spans), spans.shape[0])


def _check_ids(name, ids, vocab):
    """Raise ValueError for a token id outside [0, vocab)."""
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        bad = ids[(ids < 0) | (ids >= vocab)].flat[0]
        raise ValueError(f"{name} holds token id {bad}, outside the vocabulary [0, {vocab})")


def _batched(name, x, rank):
    """Add a batch axis to an unbatched input; check the rank."""
    given = x.shape
    if x.ndim == rank - 1:
        x = x[None]
    if x.ndim != rank:
        raise ValueError(f"{name} must have {rank} dimensions (or {rank - 1} without the batch), got shape {given}")
    if 0 in x.shape:
        raise ValueError(f"{name} has an empty dimension: shape {given}")
    return x


_BUFFER_DTYPES = ("float32", "bfloat16", "float16")


def _buffer_dtype(name, dtype):
    """The name of a device buffer's float type; torch dtypes and numpy names work."""
    s = str(dtype).replace("torch.", "")
    if s not in _BUFFER_DTYPES:
        raise ValueError(f"{name} must be one of {_BUFFER_DTYPES}, got {dtype!r}")
    return s


def _int(name: str, v, what: str = "an int") -> int:
    """v as a Python int: a TypeError naming it unless it is an int (a bool is
    not), and a ValueError where it is outside int64, the engine's integers."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be {what}, got {type(v).__name__}")
    v = int(v)
    if not -2**63 <= v < 2**63:
        raise ValueError(f"{name} = {v} is outside the engine's int64 range")
    return v


def _check_device_args(stream, **pointers):
    """Raise unless stream (a CUDA stream handle) and each of pointers
    (device addresses, by name) is a non-negative int and no pointer is
    null."""
    for name, v in (*pointers.items(), ("stream", stream)):
        if _int(name, v, "an int (a device address or handle)") < 0:
            raise ValueError(f"{name} must be non-negative, got {v}")
    if any(v == 0 for v in pointers.values()):
        raise ValueError(f"{' and '.join(pointers)} must be non-null device addresses")


def _nan(shape, dtype=np.float32):
    out = np.empty(shape, dtype=dtype)
    out.fill(np.nan)
    return out


def _new_tokens(rows: int, max_new_tokens: int, dtype=np.int64) -> np.ndarray:
    """An unfilled [rows, max_new_tokens] output buffer. A size numpy cannot
    hold is a ValueError, and one the machine cannot reserve a MemoryError,
    each naming max_new_tokens."""
    try:
        return np.empty((rows, max_new_tokens), dtype=dtype)
    except (ValueError, MemoryError) as e:
        kind = MemoryError if isinstance(e, MemoryError) else ValueError
        raise kind(f"max_new_tokens = {max_new_tokens} is too large for {rows} output rows "
                   f"of {np.dtype(dtype).name}: {e}") from None


def _addr(a: np.ndarray) -> int:
    return a.ctypes.data


def cuda_is_available() -> bool:
    """Whether the CUDA engine can run here: a driver, a GPU of compute
    capability 8.0 or newer, and cuBLAS, cuBLASLt and NVRTC (from a CUDA
    toolkit or NVIDIA's pip wheels, such as PyTorch's)."""
    return cuda_unavailable_reason() == ""


def set_num_threads(n: int) -> None:
    """Run the CPU engine's work on n threads at once, as torch.set_num_threads
    does for torch: its goroutines, and the OpenBLAS calls they make one
    thread each where the model's GEMMs run in OpenBLAS. It applies to the
    whole process, from the next call on. The default is the CPUs the
    process may use; the GOMAXPROCS environment variable, set before
    mambago is imported, sets it too. n may be at most 1024, or the
    machine's CPU count where that is larger (ValueError past it). An OpenBLAS
    without per-call thread control (openblas_set_num_threads_local) runs
    on threads of its own, which OPENBLAS_NUM_THREADS sets."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"set_num_threads takes an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"the thread count must be at least 1, got {n}")
    if n >= 2**63:  # past what the binding's int carries; Go names the bound for the rest
        raise ValueError(f"the thread count must be at most 1024 or the machine's CPU count, got {n}")
    _call(_b.NumThreads, int(n))


def get_num_threads() -> int:
    """How many threads the CPU engine's work runs on at once (set_num_threads)."""
    return _call(_b.NumThreads, 0)


def cuda_unavailable_reason() -> str:
    """Why the CUDA engine cannot run here, or "" when it can."""
    _cudalibs.preload()
    return _call(_b.GPUStatus)


def _device_name(device) -> str:
    """device as the Go loaders read it: a str as given ("auto", "cpu",
    "cuda", "cuda:1"), a torch.device as its str, an int N as "cuda:N" (as
    torch reads one)."""
    if isinstance(device, str):
        return device
    if isinstance(device, int) and not isinstance(device, bool):
        return f"cuda:{device}"
    if type(device).__name__ == "device" and hasattr(device, "type"):  # torch.device
        return str(device)
    raise TypeError(f"device must be a str (\"auto\", \"cpu\", \"cuda\", \"cuda:1\"), a torch.device or a GPU "
                    f"index, got {type(device).__name__}")


def _engine_args(device, dtype, blas):
    """Checks from_pretrained's and from_state_dict's engine arguments and
    returns (device, dtype, blas_path) as the Go loaders take them."""
    device = _device_name(device)
    if dtype is not None and not isinstance(dtype, str):
        dtype = str(dtype).replace("torch.", "")
    if not isinstance(blas, str):
        raise TypeError(f"blas must be a str, got {type(blas).__name__}")
    blas_path = {"auto": None, "go": ""}.get(blas, blas)
    if blas_path is None:  # "auto": the engine's own GEMMs where they are the faster
        blas_path = "" if _call(_b.PreferOwnGEMM) else numpy_blas()
    if device.lower() != "cpu":
        _cudalibs.preload()  # the CUDA libraries of NVIDIA's pip wheels, where the loader does not find them
    return device, dtype or "", blas_path


def _config_dict(config) -> dict:
    """A model configuration as config.json's dict, from a dict, a
    transformers config (to_dict()), or a config.json path or its folder."""
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        try:
            with open(path) as f:
                config = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"config: cannot read {path!r}: {e}") from None
    elif hasattr(config, "to_dict") and callable(config.to_dict):
        config = config.to_dict()
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict, a transformers config or a config.json path, "
                        f"got {type(config).__name__}")
    return dict(config)


def _json_value(x):
    """A config value json cannot write itself: a numpy or torch scalar as its
    Python number, anything else as its text (which the loader then refuses
    by name if the field wants a number)."""
    item = getattr(x, "item", None)
    if callable(item) and getattr(x, "ndim", None) == 0:
        return item()
    return str(x)


def _is_torch_tensor(x) -> bool:
    """Whether x is a torch tensor (without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _state_dict_array(name, value) -> tuple[np.ndarray, str]:
    """A state_dict entry as a C-contiguous numpy array and the type of its
    values: bfloat16 and float16 tensors (torch's, numpy's float16 and
    ml_dtypes' bfloat16) as their 16-bit bits, which Go widens or keeps as
    the engine needs; any other float tensor as float32. Torch tensors on a
    GPU are copied to the CPU."""
    if _is_torch_tensor(value):
        import torch

        if not value.is_floating_point():
            raise TypeError(f"state_dict[{name!r}]: want a float tensor, got {value.dtype}")
        if value.is_meta:  # a model built on the meta device (accelerate's init_empty_weights) holds no values
            raise ValueError(f"state_dict[{name!r}] is on the meta device and holds no values: "
                             "load the model's weights before passing its state_dict")
        t = value.detach().to(device="cpu")
        if t.dtype in (torch.bfloat16, torch.float16):
            return t.contiguous().view(torch.int16).numpy(), str(t.dtype).replace("torch.", "")
        value = t.to(dtype=torch.float32).contiguous().numpy()
    a = np.asarray(value)
    if a.dtype.kind != "f" and "float" not in a.dtype.name:  # ml_dtypes' bfloat16 is kind "V"
        raise TypeError(f"state_dict[{name!r}]: want a float tensor, got dtype {a.dtype}")
    if a.dtype.name in ("bfloat16", "float16") and a.dtype.itemsize == 2:
        return np.ascontiguousarray(a).view(np.uint16), a.dtype.name
    return np.ascontiguousarray(a, dtype=np.float32), "float32"


@contextlib.contextmanager
def _announce(path, device):
    """Around a load that takes a while (a checkpoint of a GB or more, or
    the first load on a machine, which compiles the CUDA kernels; see
    mambago.LoadNotice in Go), a line on stderr before it and its time
    after: stderr shows in a notebook's cell."""
    notice = _call(_b.LoadNotice, path, device)
    if notice:
        print(notice, file=sys.stderr, flush=True)
    start = time.perf_counter()
    yield
    if notice:
        print(f"mambago: loaded in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)


def _load_state_dict(state_dict, config, device, dtype, blas_path) -> int:
    """Hands state_dict's tensors (as float32 numpy arrays, or 16-bit ones
    as their bits, kept alive for the call) and config to Go; returns the
    model handle."""
    arrays, listing = [], []
    tied = _tied_head(state_dict)
    for name, value in state_dict.items():
        if not isinstance(name, str):
            raise TypeError(f"state_dict keys must be str, got {type(name).__name__}")
        if name == "lm_head.weight" and tied:
            continue  # the embeddings' own storage: the model ties them instead of holding a copy
        a, values = _state_dict_array(name, value)
        arrays.append(a)  # alive until Go has copied it
        listing.append({"name": name, "shape": list(a.shape), "addr": _addr(a) if a.size else 0, "dtype": values})
    return _abandonable(_b.LoadStateDict, json.dumps(config, default=_json_value), json.dumps(listing), device, dtype,
                        blas_path, keep=arrays, discard=_free_model)


def _free_model(handle: int) -> None:
    """Free the model handle of a load that Ctrl-C left to finish alone."""
    _call(_b.FreeModel, handle)


def _tied_head(state_dict) -> bool:
    """Whether the state_dict's lm_head.weight is the embedding tensor
    itself, as a tied PyTorch model's state_dict() lists it twice."""
    head = state_dict.get("lm_head.weight")
    for key in ("backbone.embeddings.weight", "backbone.embedding.weight", "embeddings.weight"):
        emb = state_dict.get(key)
        if head is None or emb is None:
            continue
        if head is emb:
            return True
        if hasattr(head, "data_ptr") and hasattr(emb, "data_ptr"):
            return head.data_ptr() == emb.data_ptr() and tuple(head.shape) == tuple(emb.shape) \
                and head.stride() == emb.stride() and head.dtype == emb.dtype
    return False


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

# What a Hub download fetches: the config and the safetensors weights, or
# failing those the pickled ones.
_HUB_FILES = (["config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json"],
              ["config.json", "generation_config.json", "pytorch_model*.bin", "pytorch_model.bin.index.json"])


def _hub_options(revision=None, cache_dir=None, token=None, local_files_only=False, force_download=False) -> dict:
    """snapshot_download's options that a call sets, as transformers names
    them: those left at their defaults are not passed."""
    hub = {name: value for name, value in (("revision", revision), ("cache_dir", cache_dir), ("token", token))
           if value is not None}
    hub.update({name: True for name, on in (("local_files_only", local_files_only),
                                             ("force_download", force_download)) if on})
    return hub


def _checkpoint_folder(path, hub: dict | None = None) -> str:
    """path itself where it is a folder; a Hugging Face Hub id ("org/name")
    that is not a path here is downloaded through huggingface_hub into its
    cache (hub: snapshot_download's options), and that folder returned."""
    if os.path.isdir(path):
        return path
    for patterns in _HUB_FILES:
        folder = _hub_snapshot(path, patterns, hub)
        if any(f.endswith((".safetensors", ".bin")) for f in os.listdir(folder)):
            return folder
    raise ValueError(f"{path!r} on the Hugging Face Hub has no safetensors or pytorch_model.bin weights")


def _hub_snapshot(path, patterns, hub: dict | None = None) -> str:
    """The folder of huggingface_hub's cached snapshot of the Hub id path,
    holding the files that match patterns (hub: more of snapshot_download's
    options, such as revision); ValueError where path is no Hub id,
    huggingface_hub is not installed, or the download fails."""
    if os.path.exists(path) or not _HUB_ID.match(path):
        raise ValueError(f"path {path!r} is not a checkpoint folder")
    try:
        import huggingface_hub
    except ImportError:
        raise ValueError(f"path {path!r} is not a checkpoint folder here; to download it from the Hugging Face Hub, "
                         "install huggingface_hub") from None
    try:
        return huggingface_hub.snapshot_download(path, allow_patterns=patterns, **(hub or {}))
    except Exception as e:  # the Hub's errors: network, unknown repo, gated model
        raise ValueError(f"path {path!r} is not a checkpoint folder here, and downloading it from the Hugging Face "
                         f"Hub failed: {e}") from None


def _pickled_checkpoint(path) -> list:
    """The pytorch_model.bin files of a folder that has no safetensors
    checkpoint (the shards of pytorch_model.bin.index.json, or the one
    file); [] where it has safetensors or neither."""
    if any(os.path.exists(os.path.join(path, f)) for f in ("model.safetensors", "model.safetensors.index.json")):
        return []
    index = os.path.join(path, "pytorch_model.bin.index.json")
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f).get("weight_map", {}).values()))
        return [os.path.join(path, s) for s in shards]
    single = os.path.join(path, "pytorch_model.bin")
    return [single] if os.path.exists(single) else []


def _torch_load(paths) -> dict:
    """Every tensor of PyTorch's pickled checkpoint files, through
    torch.load with weights_only=True (no code in the files runs)."""
    try:
        import torch
    except ImportError:
        raise ValueError(f"{paths[0]} is a pickled PyTorch checkpoint, which needs torch to read: install torch, "
                         "or save the model with save_pretrained(..., safe_serialization=True)") from None
    state = {}
    for p in paths:
        state.update(torch.load(p, map_location="cpu", weights_only=True))
    return state


def numpy_blas() -> str:
    """The path of the OpenBLAS library numpy loaded, or "" if there is none.

    mambago's CPU engine runs its GEMMs through it (numpy's wheels bundle an
    OpenBLAS with kernels for the running CPU); without one it uses its own
    SGEMM (Go and assembly).
    """
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if "openblas" in os.path.basename(path).lower() and ".so" in path and os.path.exists(path):
                    return path
    except OSError:
        pass
    import glob

    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    found = sorted(glob.glob(os.path.join(libs, "*openblas*.so*")))
    return found[0] if found else ""


class _Owner:
    """An object that owns an engine handle (a Model, State or Graph): it
    frees it on close(), at the end of a with block, or at garbage
    collection, and refuses copies and pickles, saying what to do instead
    (_instead): a copy holding the same handle would free the original's
    memory when either is closed, and a pickled handle names nothing (or
    another object) in another process."""

    _h = None  # the handle; None once closed
    _kind = ""  # what a closed one's errors name: "model", "state", "graph"
    _free = ""  # the bindings function that frees the handle
    _instead = ""

    def _handle(self):
        if self._h is None:
            raise ValueError(f"{self._kind} is closed")
        return self._h

    def close(self) -> None:
        """Release its memory (device memory included) now rather than at garbage collection."""
        if self._h is not None:
            h, self._h = self._h, None
            try:
                getattr(_b, self._free)(h)
            except Exception:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except KeyboardInterrupt:
            # Python prints an exception leaving __del__ and drops it, so a
            # Ctrl-C landing during a collection would be lost. Deliver it to
            # the main thread again from a new thread: that one waits for the
            # GIL, which this thread keeps until __del__ has returned (raised
            # here, inside __del__, it would be dropped again).
            _thread.start_new_thread(_thread.interrupt_main, ())

    def __reduce_ex__(self, protocol):
        raise TypeError(f"a mambago.{type(self).__name__} owns engine memory in this process and cannot be copied or "
                        f"pickled; {self._instead}")


class State(_Owner):
    """The carried state of B sequences: per layer, a conv window [B, E, K]
    and an SSM state [B, E, N] (float32). Prefill and step update it in place.
    Make one with Model.new_state."""

    _kind, _free = "state", "FreeState"
    _instead = "copy it with state.copy(), or send its arrays (conv_state, ssm_state) to the process that needs them"

    def __init__(self, model: "Model", handle: int, batch_size: int):
        self._model = model
        self._h = handle
        self.batch_size = batch_size
        cfg = model.config
        self._shapes = {
            "conv": (batch_size, cfg.intermediate_size, cfg.conv_kernel),
            "ssm": (batch_size, cfg.intermediate_size, cfg.state_size),
        }

    def _get(self, which, layer):
        layer = self._layer(layer)
        out = _nan(self._shapes[which])
        _call(_b.CopyState, self._handle(), which, layer, _addr(out), out.size, False)
        return out

    def _set(self, which, layer, value, name):
        layer = self._layer(layer)
        v = _as_array(name, value, "float32")
        if v.shape != self._shapes[which]:
            raise ValueError(f"{name} must have shape {self._shapes[which]}, got {v.shape}")
        _call(_b.CopyState, self._handle(), which, layer, _addr(v), v.size, True)

    def _layer(self, layer):
        return _int("layer", layer)

    def conv_state(self, layer: int) -> np.ndarray:
        """A copy of layer's conv window, float32 [B, E, K] (the last K conv inputs, newest last)."""
        return self._get("conv", layer)

    def ssm_state(self, layer: int) -> np.ndarray:
        """A copy of layer's SSM state, float32 [B, E, N]."""
        return self._get("ssm", layer)

    def set_conv_state(self, layer: int, value: np.ndarray) -> None:
        """Overwrite layer's conv window with value, float32 [B, E, K]."""
        self._set("conv", layer, value, "value")

    def set_ssm_state(self, layer: int, value: np.ndarray) -> None:
        """Overwrite layer's SSM state with value, float32 [B, E, N]."""
        self._set("ssm", layer, value, "value")

    def reset(self) -> None:
        """Zero the state, as for fresh sequences."""
        _call(_b.ResetState, self._handle())

    def copy(self) -> "State":
        """A new state of the same model holding this one's values: the same
        sequences, to continue two ways or to come back to. copy.copy and
        copy.deepcopy give the same."""
        return State(self._model, _call(_b.CloneState, self._handle()), self.batch_size)

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def __repr__(self):
        return f"mambago.State(batch_size={self.batch_size}, layers={self._model.config.num_hidden_layers})"


class Model(_Owner):
    """A Mamba-1 model loaded from a PyTorch-trained checkpoint."""

    _kind, _free = "model", "FreeModel"
    _instead = ("load the model again where it is needed (Model.from_pretrained or Model.from_state_dict), "
                "in each process that needs it")

    def __init__(self, handle: int):
        """Wrap an engine handle, as the loaders (from_pretrained,
        from_state_dict) do. A path or any other non-integer is a
        TypeError that says to call from_pretrained."""
        self._h = None  # what close (and __del__) see if this raises
        self._folder = None  # the checkpoint folder it was loaded from, if any
        self._blas = "auto"  # the blas it was loaded with, for a load again (mambago.hf's .to())
        if isinstance(handle, bool) or not isinstance(handle, int):
            raise TypeError(f"mambago.Model({handle!r}): Model takes an engine handle; to load a checkpoint, "
                            f"call mambago.Model.from_pretrained(path)")
        self._h = handle
        info = json.loads(_call(_b.ModelInfo, handle))
        self.config = Config._from_go(info["config"])
        self.device = info["device"]
        self.device_index = info["device_index"] if info["device_index"] >= 0 else None
        self.dtype = info["dtype"]
        self.backend = info["backend"]

    @classmethod
    def from_pretrained(cls, path, device: str = "auto", dtype: str | None = None, blas: str = "auto", *,
                        revision: str | None = None, cache_dir=None, token=None, local_files_only: bool = False,
                        force_download: bool = False) -> "Model":
        """Load a checkpoint folder as Hugging Face save_pretrained writes it:
        config.json plus model.safetensors, or shards with
        model.safetensors.index.json. A folder with PyTorch's pickled
        pytorch_model.bin (or its shards) instead loads through torch.load
        (weights_only=True), which needs torch installed. A Hugging Face Hub
        id ("state-spaces/mamba-130m-hf") that is not a folder here is
        downloaded through huggingface_hub, where that is installed (its
        config and weights only, into its cache). revision (a branch, tag
        or commit), cache_dir, token, local_files_only and force_download
        go to that download, as transformers passes them; a folder here
        ignores them.

        device is "auto" (GPU 0 when it is usable, else the CPU), "cpu",
        "cuda" (GPU 0) or "cuda:N" (GPU N; a torch.device or an int N work
        too). .device is then "cpu" or "cuda", and .device_index the GPU's
        number (None on the CPU). The device-pointer entries take memory on
        that GPU only. The CUDA engine needs compute capability 8.0 or newer (A100,
        A10, L4, RTX 30 and 40 series, H100): on an older GPU, such as a T4,
        "auto" runs on the CPU and says so on stderr, and "cuda" raises. dtype is None or "float32" (the default), "bfloat16" or
        "float16" (torch dtypes work too). On the CUDA engine the 16-bit
        types are mixed precision: the big GEMMs take weights and inputs in
        that type and accumulate in float32, and the residual stream, the
        scan and the carried state stay float32. On the CPU engine they are
        how the weight matrices are kept: rounded to that type and widened
        exactly as they are read, the engine computing in float32, so a
        bf16 checkpoint gives the bits its float32 load gives in half the
        memory, and a decode step of one sequence takes about half the time.
        Weights load from f32, bf16 or f16 checkpoints into the dtype asked
        for. dtype "auto" (transformers' torch_dtype="auto") is the type the
        checkpoint's config names, and float32 where it names none. Inputs
        and outputs stay float32 in every dtype.

        blas chooses the CPU engine's GEMM library: "auto" (the engine's own
        on a CPU with AVX2, where they are the faster; else numpy's
        OpenBLAS when numpy has one, else Go), "go" (the engine's own SGEMM,
        in Go and assembly; gonum's on a CPU without AVX2) or the path of a
        CBLAS shared library.

        A load of a GB or more, or a first load on a GPU (which compiles the
        kernels), says so on stderr. Ctrl-C during a load raises
        KeyboardInterrupt at once; the load, which cannot stop part way,
        finishes on its own thread and its model is freed.
        """
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        device, dtype, blas_path = _engine_args(device, dtype, blas)  # before any download
        hub = _hub_options(revision, cache_dir, token, local_files_only, force_download)
        path = _checkpoint_folder(os.fspath(path), hub)
        with _announce(path, device):
            bins = _pickled_checkpoint(path)
            if bins:
                m = cls(_load_state_dict(_torch_load(bins), _config_dict(path), device, dtype, blas_path))
            else:
                m = cls(_abandonable(_b.LoadModel, path, device, dtype, blas_path, discard=_free_model))
        m._folder = path  # for what else the checkpoint holds (mambago.hf: generation_config.json)
        m._blas = blas
        return m

    @classmethod
    def from_state_dict(cls, state_dict, config, device: str = "auto", dtype: str | None = None,
                        blas: str = "auto") -> "Model":
        """Run weights already in memory: a PyTorch model's state_dict()
        (MambaForCausalLM, MambaModel, or the state-spaces naming) with its
        config, so a script that trained or loaded a model in PyTorch hands
        it over without saving it first.

        state_dict maps each tensor's name to a torch tensor (any float
        dtype, on any device; bf16 and f16 ones pass as their bits, others
        as float32, through the CPU) or a numpy float array. config is the model's configuration: a transformers config
        (anything with to_dict()), a dict as config.json holds it, or the path
        of a config.json or of the folder holding it. device, dtype and blas
        are as for from_pretrained, and so is Ctrl-C. The weights are
        copied: later changes to the tensors do not reach the model.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}")
        config = _config_dict(config)
        device, dtype, blas_path = _engine_args(device, dtype, blas)
        with _announce("", device):
            m = cls(_load_state_dict(state_dict, config, device, dtype, blas_path))
        m._blas = blas
        return m

    def __repr__(self):
        c = self.config
        return (f"mambago.Model({c.model_type}, d={c.hidden_size}, layers={c.num_hidden_layers}, "
                f"d_state={c.state_size}, vocab={c.vocab_size}, device={self._where()!r}, dtype={self.dtype!r}, "
                f"backend={self.backend!r})")

    def _where(self) -> str:
        """The device as torch names it: "cpu" or "cuda:N"."""
        return "cpu" if self.device_index is None else f"cuda:{self.device_index}"

    def new_state(self, batch_size: int) -> State:
        """A zeroed carried state for batch_size sequences."""
        batch_size = _int("batch_size", batch_size)
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        return State(self, _call(_b.NewState, self._handle(), batch_size), batch_size)

    def _check_state(self, state, B):
        if not isinstance(state, State):
            raise TypeError(f"state must be a mambago.State, got {type(state).__name__}")
        if state._model is not self:
            raise ValueError("state was made by another model")
        if state.batch_size != B:
            raise ValueError(f"state holds {state.batch_size} sequences, but the input has batch size {B}")
        return state

    def _prompt(self, input_ids, inputs_embeds, features):
        """Check a prompt given as exactly one of the three inputs; return (array, kind)."""
        given = [n for n, v in (("input_ids", input_ids), ("inputs_embeds", inputs_embeds),
                                ("features", features)) if v is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of input_ids, inputs_embeds or features (got {given or 'none'})")
        cfg = self.config
        name = given[0]
        if name == "input_ids":
            x = _batched(name, _as_array(name, input_ids, "int"), 2)
            _check_ids(name, x, cfg.vocab_size)
            return x, "ids"
        x = _batched(name, _as_array(name, inputs_embeds if name == "inputs_embeds" else features, "float32"), 3)
        kind = "embeds" if name == "inputs_embeds" else "features"
        width = cfg.hidden_size if kind == "embeds" else cfg.input_dim
        if kind == "features" and width == 0:
            raise ValueError("features given, but the checkpoint has no input_proj.weight")
        if x.shape[2] != width:
            what = "hidden_size" if kind == "embeds" else "input_proj's input dim"
            raise ValueError(f"{name} has last dimension {x.shape[2]}, the model's {what} is {width}")
        return x, kind

    def prefill(self, input_ids=None, *, inputs_embeds=None, features=None, state: State | None = None,
                output: str = "last", attention_mask=None) -> np.ndarray:
        """Run whole prompts through the model in one pass.

        Give exactly one input: input_ids [B, T] (integers), inputs_embeds
        [B, T, d] (float32) or features [B, T, F] (float32, through the
        checkpoint's input_proj). The batch axis may be left out.

        state, if given, is continued from and left holding the final state;
        without it the prompts start fresh. output chooses what is returned,
        always after the final norm: "last" [B, d], "all" [B, T, d], "sum" or
        "mean" over T [B, d].

        attention_mask [B, T] (1 at tokens, 0 at padding, on the left or the
        right of each row's tokens) runs a padded batch: each row gets what
        its tokens alone would give, and its state too. "last" is then the
        row's last token, "sum" and "mean" run over its tokens, and "all" is
        zero at the padding. On the CUDA engine the batch runs as one prefill
        as long as its longest row; the CPU engine takes a prefill a row
        length, skipping the padding's work.

        Ctrl-C (KeyboardInterrupt) stops a CPU prefill of 1024 positions
        (B·T) or more, called from the main thread, before its next layer,
        and leaves state as it was.
        """
        return self._prefill(input_ids, inputs_embeds, features, state, state is None, output, attention_mask)

    def prefill_layers(self, input_ids=None, *, inputs_embeds=None, features=None, state: State | None = None,
                       attention_mask=None) -> tuple[np.ndarray, np.ndarray]:
        """prefill with every position's output that also returns the
        residual stream after each layer, as transformers' hidden_states
        gives them before the final norm: (states [B, T, d] after the final
        norm, layers [L, B, T, d]), float32. Inputs, state and
        attention_mask as prefill's; every layer is zero at the padding.
        The CUDA engine copies the layers through a device buffer of their
        size (L·B·T·d floats) and the host."""
        return self._prefill(input_ids, inputs_embeds, features, state, state is None, "all", attention_mask,
                             layers=True)

    def _prefill(self, input_ids, inputs_embeds, features, state, fresh, output, attention_mask, layers=False):
        """prefill into state (made here where None), where fresh says the
        prompts are new sequences: state is zero, so the engine need not
        keep a copy of it for Ctrl-C, or copy it between a padded batch's
        row lengths. With layers (and output "all"), prefill_layers: (out,
        each layer's residual stream)."""
        x, kind = self._prompt(input_ids, inputs_embeds, features)
        if not isinstance(output, str) or output not in _OUTPUTS:
            raise ValueError(f"output must be one of {_OUTPUTS}, got {output!r}")
        cfg = self.config
        B, T = x.shape[0], x.shape[1]
        own = state is None
        if own:
            state = self.new_state(B)
        self._check_state(state, B)
        spans = _spans(attention_mask, B, T)
        out = _nan((B, T, cfg.hidden_size) if output == "all" else (B, cfg.hidden_size))
        if layers:
            taps = _nan((cfg.num_hidden_layers, B, T, cfg.hidden_size))
            args = (_b.PrefillLayers, self._handle(), state._handle(), kind, _addr(x), x.size, B, T, _addr(out),
                    out.size, _addr(taps), taps.size, *_span_args(spans), fresh)
        else:
            taps = None
            args = (_b.Prefill, self._handle(), state._handle(), kind, _addr(x), x.size, B, T, output, _addr(out),
                    out.size, *_span_args(spans), fresh)
        if self.device == "cpu" and B * T >= _STOPPABLE_ROWS:
            _interruptible(*args, keep=(x, out, taps, spans, state))
        else:
            _call(*args, 0)
        if own:  # freed here, where a Ctrl-C raises, not in a collection (after a Ctrl-C the call may still hold it)
            state.close()
        return out if taps is None else (out, taps)

    def prefill_ptr(self, input_ptr: int, shape, *, out_ptr: int, kind: str = "ids", state: State | None = None,
                    output: str = "last", stream: int = 0, input_dtype=None, out_dtype="float32",
                    attention_mask=None, logits: bool = False, layers_ptr: int = 0) -> None:
        """Prefill from and into caller-owned GPU memory, with no copy through the host (CUDA engine).

        input_ptr is the device address of the input (e.g. tensor.data_ptr()):
        int64 [B, T] token ids (kind="ids"), or [B, T, d] embeddings
        ("embeds") or [B, T, F] features ("features") of input_dtype
        ("float32", the default, "bfloat16" or "float16"; torch dtypes work
        too), C-contiguous; shape is its shape. out_ptr receives [B, d]
        ("last", "sum", "mean") or [B, T, d] ("all") of out_dtype (the same
        three). The buffer types are independent of the model's dtype:
        bf16/f16 inputs widen to f32 exactly, and the output is computed in
        f32 and rounded to out_dtype. With logits=True, out_ptr receives the
        LM head's logits of those states instead (computed on the device, in
        f32, rounded to out_dtype): [B, V] for "last", [B, T, V] for "all";
        "sum" and "mean" are a ValueError. layers_ptr, where not 0 (output
        "all" only), receives transformers' hidden_states as float32
        [L + 1, B, T, d]: the residual stream after each of the L layers,
        then the final norm's output (the states "all" gives), each zero at
        the padding; such a call runs eagerly, never as a cached graph. The work is queued on stream, a CUDA stream handle
        (torch.cuda.current_stream().cuda_stream; 0, the default, is the
        legacy default stream, where PyTorch works unless told otherwise),
        after what that stream already holds, and the call returns at once,
        like any CUDA launch: synchronize the stream before reading out on the
        host. Both buffers must stay alive until the work is done. Before
        anything is queued, each buffer is asked of the driver: host memory
        (a CPU tensor's or numpy's address, pinned or not), another GPU's
        memory, and a buffer that runs past its allocation are a ValueError
        (a kernel would fault, and with it the CUDA context torch shares).
        Token ids are not range-checked here (that would need a copy): the
        kernel clamps them into the vocabulary. Without state the prompts
        start fresh.

        attention_mask [B, T] (1 at tokens, 0 at padding) runs a left-padded
        batch (each row's tokens end at the last position, as
        tokenizer(..., padding_side="left") gives): each row continues from
        its row of state (new sequences without one) as its tokens alone
        would. The padding reaches neither a state nor an output:
        "last" is each row's last token, "sum" and "mean" run over its tokens,
        and "all" is zero at the padding. The mask is read on the host (a CUDA
        tensor is copied there, which waits for its stream), and the batch
        runs as one eager prefill, never a cached graph.
        """
        _check_device_args(stream, input_ptr=input_ptr, out_ptr=out_ptr)
        if _int("layers_ptr", layers_ptr, "an int (a device address, 0 for none)") < 0:
            raise ValueError(f"layers_ptr must be non-negative, got {layers_ptr}")
        if layers_ptr and output != "all":
            raise ValueError(f"layers_ptr takes output 'all': the layers' hidden states of every position, not {output!r}")
        if kind not in ("ids", "embeds", "features"):
            raise ValueError(f"kind must be 'ids', 'embeds' or 'features', got {kind!r}")
        if not isinstance(output, str) or output not in _OUTPUTS:
            raise ValueError(f"output must be one of {_OUTPUTS}, got {output!r}")
        if not isinstance(logits, (bool, np.bool_)):
            raise TypeError(f"logits must be a bool, got {type(logits).__name__}")
        if logits and output not in ("last", "all"):
            raise ValueError(f"logits=True takes output 'last' or 'all': the logits of a pooled {output!r} mean nothing")
        shape = tuple(int(x) for x in shape)
        want_rank = 2 if kind == "ids" else 3
        if len(shape) != want_rank or min(shape) < 1:
            raise ValueError(f"shape must be {want_rank} positive dimensions for kind={kind!r}, got {shape}")
        if kind != "ids":
            width = self.config.hidden_size if kind == "embeds" else self.config.input_dim
            if shape[2] != width:
                raise ValueError(f"shape {shape}: the last dimension must be {width} for kind={kind!r}")
        if kind == "ids":
            if input_dtype is not None and str(input_dtype).replace("torch.", "") != "int64":
                raise ValueError(f"token ids are int64; input_dtype applies to embeds and features, got {input_dtype!r}")
            in_type = "float32"  # the Go side's "no float type"
        else:
            in_type = _buffer_dtype("input_dtype", "float32" if input_dtype is None else input_dtype)
        out_type = _buffer_dtype("out_dtype", out_dtype)
        B, T = shape[0], shape[1]
        pad = None if attention_mask is None else _left_padding(attention_mask, B, T)
        if state is None:
            state = self.new_state(B)
        self._check_state(state, B)
        _call(_b.PrefillDevice, self._handle(), state._handle(), kind, int(input_ptr), in_type, B, T, output,
              int(out_ptr), out_type, bool(logits), int(layers_ptr), int(stream),
              *((0, 0) if pad is None else (_addr(pad), B)))

    def step(self, token_ids, state: State) -> np.ndarray:
        """Feed one token per sequence (token_ids [B]) after a prefill; returns logits [B, V]."""
        ids = _token_column(token_ids)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError(f"token_ids must have shape [B] (one token per sequence), got {ids.shape}")
        _check_ids("token_ids", ids, self.config.vocab_size)
        self._check_state(state, ids.shape[0])
        out = _nan((ids.shape[0], self.config.vocab_size))
        _call(_b.Step, self._handle(), state._handle(), _addr(ids), ids.shape[0], _addr(out), out.size)
        return out

    def step_ptr(self, ids_ptr: int, state: State, *, logits_ptr: int, stream: int = 0) -> None:
        """step on caller-owned GPU memory, with no copy through the host
        (CUDA engine): int64 token ids [B] at ids_ptr in (B = state's batch
        size; e.g. tensor.data_ptr()), float32 logits [B, V] to logits_ptr,
        queued on stream (torch.cuda.current_stream().cuda_stream; 0 is the
        legacy default stream) without waiting, like prefill_ptr, whose checks
        of the buffers apply. Ids are clamped into the vocabulary on the
        device, not checked. Once 8 steps have been asked of state (the
        engine's StepDeviceGraphSteps; generate's steps count too) they
        replay a step graph kept with it, as generate's do; the logits are
        step's either way."""
        _check_device_args(stream, ids_ptr=ids_ptr, logits_ptr=logits_ptr)
        self._check_state(state, getattr(state, "batch_size", None))
        _call(_b.StepDevice, self._handle(), state._handle(), int(ids_ptr), int(logits_ptr), int(stream))

    def reserve(self, batch_size: int, seq_len: int) -> None:
        """Size the CUDA engine's device workspace up front for prefills of up to
        batch_size sequences of seq_len positions and steps of up to batch_size
        sequences, so that those calls allocate no device memory. Without it
        the workspace grows on the first call at a larger shape (which also
        makes graphs captured before refuse to replay). A no-op on the CPU."""
        for name, v in (("batch_size", batch_size), ("seq_len", seq_len)):
            if _int(name, v) < 1:
                raise ValueError(f"{name} must be at least 1, got {v}")
        _call(_b.Reserve, self._handle(), int(batch_size), int(seq_len))

    def set_tf32(self, on: bool) -> None:
        """Run the CUDA engine's GEMMs on TF32 tensor cores (on=True) or in true
        FP32 (False, the default). TF32 is faster and less exact (about 1e-3
        relative); model.backend names the mode in force. Graphs captured in
        the other mode refuse to replay."""
        if not isinstance(on, (bool, np.bool_)):
            raise TypeError(f"on must be a bool, got {type(on).__name__}")
        _call(_b.SetTF32, self._handle(), bool(on))
        self.backend = json.loads(_call(_b.ModelInfo, self._handle()))["backend"]

    def set_gemm(self, algo: str) -> None:
        """Pick how the CUDA engine's bf16/f16 GEMMs run: "cublas"
        (cublasGemmEx), "cublaslt" (cuBLASLt, its heuristic's first algorithm)
        or "cublaslt-tuned" (the fastest of cuBLASLt's first algorithms, timed
        once per shape; the default). cublas and cublaslt give the same bits
        every run; the tuned choice can differ from one process to the next.
        model.backend names the one in force. Graphs captured before keep
        theirs."""
        if not isinstance(algo, str):
            raise TypeError(f"algo must be a str, got {type(algo).__name__}")
        _call(_b.SetGemm, self._handle(), algo)
        self.backend = json.loads(_call(_b.ModelInfo, self._handle()))["backend"]

    def set_prefill_graphs(self, n: int) -> None:
        """Make prefill_ptr replay a CUDA graph of the whole prefill (CUDA engine).

        Each distinct (state, kind, shape, output) is captured on its first
        call and replayed after that, bit for bit what the eager call gives;
        the n most recently used graphs are kept (0, the default, turns this
        off and frees them). A graph is captured again when the workspace
        has grown or the GEMM mode has changed. Prompts of more than 16384
        rows (B * T) run eagerly. Do not call prefill_ptr inside a CUDA
        graph capture of your own while this is on: a first call captures.
        """
        n = _int("n", n)
        if n < 0:
            raise ValueError(f"n must be 0 or more, got {n}")
        _call(_b.SetPrefillGraphs, self._handle(), n)

    def capture_step(self, state: State) -> "Graph":
        """Capture the decode step of state's batch as a CUDA graph (CUDA engine).

        graph.step(token_ids) then does what step(token_ids, state) does, with
        one graph launch instead of one launch per kernel, bit for bit the
        same. Reserve or run the shapes you need first: a later workspace
        growth makes the graph refuse to replay (capture again then).
        """
        self._check_state(state, state.batch_size)
        h = _call(_b.CaptureStep, self._handle(), state._handle())
        return Graph(self, state, h, "step", "ids", 1, "last")

    def capture_prefill(self, state: State, seq_len: int, *, kind: str = "ids", output: str = "last") -> "Graph":
        """Capture a prefill of state's batch of seq_len positions as a CUDA graph (CUDA engine).

        kind is the input the replays take: "ids" (input_ids), "embeds"
        (inputs_embeds) or "features"; output is as for prefill. Each
        graph.prefill(x) continues from and updates state, as
        prefill(x, state=state) does, bit for bit the same. B * seq_len must
        fit one pass of the engine (16384 rows).
        """
        self._check_state(state, state.batch_size)
        seq_len = _int("seq_len", seq_len)
        if kind not in ("ids", "embeds", "features"):
            raise ValueError(f"kind must be 'ids', 'embeds' or 'features', got {kind!r}")
        if not isinstance(output, str) or output not in _OUTPUTS:
            raise ValueError(f"output must be one of {_OUTPUTS}, got {output!r}")
        h = _call(_b.CapturePrefill, self._handle(), state._handle(), kind, int(seq_len), output)
        return Graph(self, state, h, "prefill", kind, int(seq_len), output)

    def logits(self, hidden) -> np.ndarray:
        """Logits from hidden states: hidden [..., d] (float32) -> [..., V].

        No rows ([0, d], say) give no rows of logits ([0, V]), as torch's
        matmul does.
        """
        h = _as_array("hidden", hidden, "float32")
        d = self.config.hidden_size
        if h.ndim < 1 or h.shape[-1] != d:
            raise ValueError(f"hidden must have shape [..., {d}], got {h.shape}")
        rows = h.size // d
        out = _nan(h.shape[:-1] + (self.config.vocab_size,))
        if rows == 0:
            return out
        _call(_b.Logits, self._handle(), _addr(h), rows, h.size, _addr(out), out.size)
        return out

    def generate(self, input_ids, max_new_tokens: int, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int | None = None, eos_token_id: int | list[int] | None = None, *,
                 attention_mask=None, streamer=None, repetition_penalty: float = 1.0,
                 min_new_tokens: int = 0, min_p: float = 0.0, no_repeat_ngram_size: int = 0,
                 sequence_bias=None, bad_words_ids=None, suppress_tokens=None, begin_suppress_tokens=None,
                 forced_eos_token_id=None, max_time: float | None = None, typical_p: float = 1.0,
                 epsilon_cutoff: float = 0.0, eta_cutoff: float = 0.0, forced_bos_token_id=None,
                 exponential_decay_length_penalty=None, stop_strings=None, tokenizer=None) -> np.ndarray:
        """Continue prompts input_ids [B, T] by up to max_new_tokens tokens; returns int64 [B, n].

        temperature must be finite and ≥ 0: 0 is greedy (the lowest id among
        equal logits); otherwise (at least 2.9e-39, whose reciprocal is a
        float32) tokens are sampled after top_k and top_p
        filtering, reproducibly for a given seed (any int: its low 63 bits are
        used, so seeds 2**63 apart draw the same tokens; None draws a random
        one). The loop runs in the engine: on the CUDA engine greedy
        tokens are picked on the GPU, a top_k draw (top_k up to 1024) is
        made there in the host sampler's own operations (the same logits and
        seed give the same tokens; a larger top_k ranks its candidates
        there, and only they come back), a draw without top_k is made there
        (at the same odds, but other tokens for a seed than the host's),
        once the calls on one state have asked for 32 tokens in all each
        step replays a CUDA graph, and greedy, top_k and top_p steps run one
        step ahead of the host, fed the tokens of the step before on the GPU. A row that emits
        eos_token_id stops and is padded with it; generation ends when every
        row has stopped, so n may be below max_new_tokens. eos_token_id may
        also be a list of ids, as transformers takes it: each stops a row,
        which is then padded with the first. repetition_penalty (finite,
        > 0) is transformers' own: before each draw, the logit of every
        token already in the row (its prompt's, without the padding, as
        transformers 5.25 counts them, and the tokens generated) is divided by
        it where ≥ 0 and multiplied by it where < 0, so above 1 repeats are
        less likely. min_p (in [0, 1]), as transformers', keeps of the
        tokens top_k and top_p leave those at least min_p times as likely as
        the best, when sampling. min_new_tokens (≥ 0), as transformers', keeps a row
        from ending before that many new tokens: until then the eos ids'
        logits are -inf. no_repeat_ngram_size n (≥ 0), as transformers',
        keeps a row from repeating any n-gram of its tokens (prompt, without
        the padding, and new tokens).

        The further processors are transformers', applied in its order
        (sequence_bias, repetition_penalty, no_repeat_ngram_size,
        bad_words_ids, min_new_tokens, forced_eos_token_id,
        suppress_tokens, begin_suppress_tokens). sequence_bias maps token
        sequences to a bias added to the logit of a sequence's last token
        wherever the row's tokens end with the rest ({(id, ...): bias} or
        [[[id, ...], bias], ...]; a bias of -inf bans the sequence).
        bad_words_ids lists sequences a row may never complete.
        suppress_tokens are never drawn, begin_suppress_tokens not as the
        first new token. forced_eos_token_id (an id or a list) makes the
        max_new_tokens-th token one of them, and forced_bos_token_id the
        first after a one-token prompt. exponential_decay_length_penalty
        (start_index, decay_factor) raises the eos ids' logits s by
        |s|·(decay_factor^k - 1) at the k-th new token past start_index.
        max_time (seconds) ends the
        call once a token is taken after that long, returning the tokens so
        far. stop_strings (a str or a list of them), as transformers' with
        the model's tokenizer (transformers' or a tokenizers.Tokenizer),
        end a row with the token that completes one in its text (the
        tokens' texts one after another, the prompt's included; a string
        that ends within the last token), as an eos id does: it is padded
        with the first eos id after it, or, with no eos id, goes on while
        other rows have not ended. They change no logits. Every id must be
        in the vocabulary.

        When sampling, typical_p (in (0, 1); 1 for none), epsilon_cutoff
        and eta_cutoff (in (0, 1); 0 for none) are transformers' warpers:
        with any of them a token is drawn on the host, from the logits that
        every warper (temperature, top_k, top_p, min_p, then these) has cut
        in transformers' order. With a top_k the CUDA engine ranks each
        row's top_k on the device (after the processors below) and only
        those come back (a row whose top_k-th logit ties with another
        token's may draw differently: transformers keeps every tied token).

        On the CUDA engine the processors (the penalty, min_new_tokens,
        no_repeat_ngram_size, sequence_bias, bad_words_ids, suppress_tokens,
        begin_suppress_tokens, forced_eos_token_id, the length decay) run on
        the device before each queued step's pick or draw, the first
        token's on the host, and so does a draw from the top_k (≤ 1024) best,
        min_p included; with the warpers above, or a top_k above 1024, the
        device ranks the processed logits' top_k for the host's draw (with
        the warpers and no top_k, each step's logits come to the host and
        are processed and drawn from there instead). The engine keeps
        the last call's state (and CUDA step graph) for the next call of the
        same batch size, until close(). attention_mask
        marks padding as prefill's does: each row continues from its own last
        token. Ctrl-C (KeyboardInterrupt) stops a call on the main thread
        before its next token (on the CPU engine, within the prompt's
        prefill too).

        streamer, as transformers' generate takes it (TextStreamer,
        TextIteratorStreamer, or any object with put and end), receives the
        tokens as they come: put(input_ids [B, T]) first, then put(tokens
        [B]) for each new token (eos for a row that has stopped), within
        about 10 ms of its step, then end(). An exception from it stops the
        generation and is raised.
        """
        ids = _batched("input_ids", _as_array("input_ids", input_ids, "int"), 2)
        _check_ids("input_ids", ids, self.config.vocab_size)
        spans = _spans(attention_mask, *ids.shape)
        for name, v in (("max_new_tokens", max_new_tokens), ("top_k", top_k), ("min_new_tokens", min_new_tokens),
                        ("no_repeat_ngram_size", no_repeat_ngram_size)):
            _int(name, v)
        for name, v in (("max_new_tokens", max_new_tokens), ("min_new_tokens", min_new_tokens),
                        ("no_repeat_ngram_size", no_repeat_ngram_size)):
            if v < 0:
                raise ValueError(f"{name} must be ≥ 0, got {v}")
        for name, v in (("temperature", temperature), ("top_p", top_p), ("repetition_penalty", repetition_penalty),
                        ("min_p", min_p)):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
                raise TypeError(f"{name} must be a number, got {type(v).__name__}")
        if not 0 < repetition_penalty < math.inf:
            raise ValueError(f"repetition_penalty must be finite and > 0 (1 for none), got {repetition_penalty}")
        if not 0 <= min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1] (0 for none), got {min_p}")
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little") >> 1
        elif isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
        eos_ids = _eos_ids(eos_token_id, self.config.vocab_size)
        eos = eos_ids[0] if eos_ids else -1
        more = np.array(eos_ids[1:], dtype=np.int64)
        stop, vocab = _stop_settings(stop_strings, tokenizer)
        procs = _processors(self.config.vocab_size, sequence_bias, bad_words_ids, suppress_tokens,
                            begin_suppress_tokens, forced_eos_token_id, max_time, typical_p, epsilon_cutoff,
                            eta_cutoff, None, forced_bos_token_id, exponential_decay_length_penalty, stop)
        B, T = ids.shape
        # Generate writes every column it takes, so out's pages past them are
        # never touched: a large max_new_tokens with an early eos costs no memory.
        out = _new_tokens(B, int(max_new_tokens))
        if streamer is None:
            poll = None
        else:
            streamer.put(ids.copy())
            sent = 0

            def poll(stop):
                nonlocal sent
                n = _call(_b.StopProgress, stop)
                for i in range(sent, n):
                    streamer.put(out[:, i].copy())
                sent = n

        if max_new_tokens > 0:
            n = _interruptible(_b.Generate, self._handle(), _addr(ids), B, T, int(max_new_tokens),
                               float(temperature), int(top_k), float(top_p), float(min_p), float(repetition_penalty),
                               int(min_new_tokens), int(no_repeat_ngram_size), int(seed) & (2**63 - 1), eos,
                               _addr(more), more.size, _addr(out), out.size, *_span_args(spans), procs,
                               keep=(ids, out, spans, more, vocab), poll=poll)
        else:
            n = 0
        if streamer is not None:
            streamer.end()
        return out[:, :n].copy()


    def beam_search(self, input_ids, max_new_tokens: int, num_beams: int, *, num_return_sequences: int = 1,
                    length_penalty: float = 1.0, early_stopping: bool | str = False,
                    eos_token_id: int | list[int] | None = None, pad_token_id: int | None = None,
                    attention_mask=None, repetition_penalty: float = 1.0, min_new_tokens: int = 0,
                    no_repeat_ngram_size: int = 0, output_scores: bool = False,
                    output_logits: bool = False, sequence_bias=None, bad_words_ids=None, suppress_tokens=None,
                    begin_suppress_tokens=None, forced_eos_token_id=None, max_time: float | None = None,
                    do_sample: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                    min_p: float = 0.0, typical_p: float = 1.0, epsilon_cutoff: float = 0.0,
                    eta_cutoff: float = 0.0, seed: int | None = None, forced_bos_token_id=None,
                    exponential_decay_length_penalty=None, stop_strings=None, tokenizer=None,
                    renormalize_logits: bool = False) -> "BeamSearchOutput":
        """Continue prompts input_ids [B, T] by beam search of up to
        max_new_tokens tokens, as transformers' generate does with num_beams
        and do_sample=False, and return the num_return_sequences best
        finished beams of each prompt, best first (a BeamSearchOutput).

        Each step scores every beam's continuations by their summed log
        probabilities (after the logits processors, as generate applies
        them: repetition_penalty, min_new_tokens, no_repeat_ngram_size,
        sequence_bias, bad_words_ids, suppress_tokens,
        begin_suppress_tokens, forced_bos_token_id, forced_eos_token_id,
        exponential_decay_length_penalty), keeps the
        num_beams best that have not ended, and ranks those that end at an
        eos_token_id (an id or a list of them) or at max_new_tokens by that
        sum over their length to the power length_penalty. early_stopping
        is transformers': False stops a prompt's search once no running beam
        can beat its worst finished one at the current length, True once
        num_beams beams have finished, "never" as False but scoring a running
        beam at the longest length when length_penalty > 0. A row past its
        end holds pad_token_id (by default the first eos id, else -1), and
        its beam_indices -1. The model runs B·num_beams sequences a step; the
        states are reordered as the beams are, on the device for the CUDA
        engine, which also processes and ranks each row's log probabilities
        there, so that only each row's best candidates come back (but with
        output_scores or output_logits). Past max_time seconds every beam ends at the step under way,
        as at max_new_tokens. stop_strings (with tokenizer) end a beam as
        an eos id does, as generate's do. renormalize_logits, as
        transformers', log-softmaxes each beam's processed (and warped)
        log probabilities once more before the search. Ctrl-C stops a call on the main thread before
        its next step.

        do_sample=True is transformers' beam sampling: each beam's
        processed log probabilities are cut by the warpers (temperature,
        top_k, top_p, min_p, typical_p, epsilon_cutoff, eta_cutoff, as
        generate's, each keeping at least max(2, 1 + the eos ids) tokens),
        and each step draws its candidates without replacement from all of
        a prompt's continuations, with probability ∝ exp(summed score),
        reproducibly for a seed (None: a random one). The draw runs on the
        host. With a top_k (and neither output_scores nor output_logits),
        the CUDA engine ranks
        each row's top_k on the device (after the processors) and only those
        come back, with the same draws as from whole rows; else each step's
        logits come back.
        """
        ids = _batched("input_ids", _as_array("input_ids", input_ids, "int"), 2)
        _check_ids("input_ids", ids, self.config.vocab_size)
        spans = _spans(attention_mask, *ids.shape)
        for name, v in (("max_new_tokens", max_new_tokens), ("num_beams", num_beams),
                        ("num_return_sequences", num_return_sequences), ("min_new_tokens", min_new_tokens),
                        ("no_repeat_ngram_size", no_repeat_ngram_size)):
            _int(name, v)
        for name, v in (("length_penalty", length_penalty), ("repetition_penalty", repetition_penalty)):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
                raise TypeError(f"{name} must be a number, got {type(v).__name__}")
        for name, v in (("max_new_tokens", max_new_tokens), ("min_new_tokens", min_new_tokens),
                        ("no_repeat_ngram_size", no_repeat_ngram_size)):
            if v < 0:
                raise ValueError(f"{name} must be ≥ 0, got {v}")
        if num_beams < 1:
            raise ValueError(f"num_beams must be ≥ 1, got {num_beams}")
        if not 0 < repetition_penalty < math.inf:
            raise ValueError(f"repetition_penalty must be finite and > 0 (1 for none), got {repetition_penalty}")
        if early_stopping not in (False, True, "never"):
            raise ValueError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")
        if not 1 <= num_return_sequences <= num_beams:
            raise ValueError(f"num_return_sequences ({num_return_sequences}) must be in [1, num_beams = {num_beams}]")
        eos_ids = _eos_ids(eos_token_id, self.config.vocab_size)
        more = np.array(eos_ids[1:], dtype=np.int64)
        sample = None
        if do_sample:
            for name, v in (("temperature", temperature), ("top_p", top_p), ("min_p", min_p)):
                if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
                    raise TypeError(f"{name} must be a number, got {type(v).__name__}")
            _int("top_k", top_k)
            if not 0 < temperature < math.inf:
                raise ValueError(f"temperature must be finite and > 0 when sampling, got {temperature}")
            if seed is None:
                seed = int.from_bytes(os.urandom(8), "little") >> 1
            elif isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
                raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
            sample = {"temperature": float(temperature), "top_k": int(top_k), "top_p": float(top_p),
                      "min_p": float(min_p), "seed": int(seed) & (2**63 - 1)}
        elif (typical_p, epsilon_cutoff, eta_cutoff) != (1.0, 0.0, 0.0):
            raise ValueError("typical_p, epsilon_cutoff and eta_cutoff need do_sample=True")
        stop, vocab = _stop_settings(stop_strings, tokenizer)
        procs = _processors(self.config.vocab_size, sequence_bias, bad_words_ids, suppress_tokens,
                            begin_suppress_tokens, forced_eos_token_id, max_time, typical_p, epsilon_cutoff,
                            eta_cutoff, sample, forced_bos_token_id, exponential_decay_length_penalty, stop,
                            renormalize_logits)
        fill = pad_token_id if pad_token_id is not None else (eos_ids[0] if eos_ids else -1)
        fill = _int("pad_token_id", fill, "an int or None")
        B, T = ids.shape
        R, V, n = int(num_return_sequences), self.config.vocab_size, int(max_new_tokens)
        # BeamSearch writes every returned column (and steps up to those taken):
        # the pages past them are never touched, as generate's.
        tokens = _new_tokens(B * R, n)
        indices = _new_tokens(B * R, n, np.int32)
        scores = np.zeros(B * R, dtype=np.float32)
        counts = np.zeros(2, dtype=np.int64)
        steps = [np.zeros((n, B * int(num_beams), V), np.float32) if want else None
                 for want in (output_scores, output_logits)]
        _interruptible(_b.BeamSearch, self._handle(), _addr(ids), B, T, n, int(num_beams), R, float(length_penalty),
                       {False: 0, True: 1, "never": 2}[early_stopping], eos_ids[0] if eos_ids else -1, _addr(more),
                       more.size, int(fill), float(repetition_penalty), int(min_new_tokens),
                       int(no_repeat_ngram_size), *_span_args(spans), _addr(tokens), _addr(indices), _addr(scores),
                       *(0 if a is None else _addr(a) for a in steps), _addr(counts), procs,
                       keep=(ids, spans, more, tokens, indices, scores, counts, *steps, vocab))
        width, taken = int(counts[0]), int(counts[1])
        return BeamSearchOutput(tokens[:, :width].copy(), scores, indices[:, :width].copy(),
                                *(None if a is None else tuple(a[:taken]) for a in steps))


@dataclass
class BeamSearchOutput:
    """What Model.beam_search returns, for B prompts of num_return_sequences
    R beams each, best first: tokens int64 [B·R, n] (the new tokens, pad
    past each row's end), scores float32 [B·R] (each beam's summed log
    probability over its length to the length penalty), beam_indices int32
    [B·R, n] (the beam, b·num_beams + j, each token came from; -1 past the
    end), and where asked each step's processed log probabilities (scores
    of steps) and logits, float32 [B·num_beams, V] a step."""

    tokens: np.ndarray
    scores: np.ndarray
    beam_indices: np.ndarray
    step_scores: tuple | None = None
    step_logits: tuple | None = None


def _eos_ids(eos_token_id, vocab_size: int) -> list[int]:
    """generate's eos_token_id (None, an id, or a list or array of them) as
    a list of ids, each checked against the vocabulary."""
    return [] if eos_token_id is None else _token_list("eos_token_id", eos_token_id, vocab_size)


def _token_list(name: str, ids, vocab_size: int) -> list[int]:
    """ids (an id or an iterable of them) as a list of ints, each checked
    against the vocabulary."""
    if isinstance(ids, np.ndarray):
        ids = ids.reshape(-1).tolist()
    elif isinstance(ids, (int, np.integer)) and not isinstance(ids, bool):
        ids = [ids]
    try:
        ids = list(ids)
    except TypeError:
        raise TypeError(f"{name} must be an int or a list of ints, got {type(ids).__name__}") from None
    for id in ids:
        if isinstance(id, bool) or not isinstance(id, (int, np.integer)):
            raise TypeError(f"{name} must be an int or a list of ints, got {id!r}")
        if not 0 <= id < vocab_size:
            raise ValueError(f"{name}: id {id} is outside the vocabulary [0, {vocab_size})")
    return [int(id) for id in ids]


def _processors(vocab_size: int, sequence_bias, bad_words_ids, suppress_tokens, begin_suppress_tokens,
                forced_eos_token_id, max_time, typical_p=1.0, epsilon_cutoff=0.0, eta_cutoff=0.0,
                beam_sampling: dict | None = None, forced_bos_token_id=None,
                exponential_decay_length_penalty=None, stop: dict | None = None,
                renormalize_logits: bool = False) -> str:
    """generate's and beam_search's further logits processors and sampling
    warpers (and beam_search's sampling settings, and the stop strings'
    settings from _stop_settings), checked, as the JSON the engine reads
    ("" for none). A sequence bias of -inf bans its sequence, as a bad
    word."""
    settings = {} if beam_sampling is None else {"beam_sampling": beam_sampling}
    if stop is not None:
        settings["stop_strings"] = stop
    if not isinstance(renormalize_logits, (bool, np.bool_)):
        raise TypeError(f"renormalize_logits must be a bool, got {type(renormalize_logits).__name__}")
    if renormalize_logits:
        settings["renormalize_logits"] = True
    for name, v, off in (("typical_p", typical_p, 1.0), ("epsilon_cutoff", epsilon_cutoff, 0.0),
                         ("eta_cutoff", eta_cutoff, 0.0)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a number, got {type(v).__name__}")
        if v != off:
            if not 0 < v < 1:
                raise ValueError(f"{name} must be in (0, 1) ({off:g} for none), got {v}")
            settings[name] = float(v)
    biases = {}
    if sequence_bias is not None:
        pairs = sequence_bias.items() if isinstance(sequence_bias, Mapping) else sequence_bias
        try:
            pairs = [(seq, bias) for seq, bias in pairs]
        except (TypeError, ValueError):
            raise TypeError("sequence_bias must map token sequences to biases: {(id, ...): bias} or "
                            "[[[id, ...], bias], ...]") from None
        for seq, bias in pairs:  # a later entry for the same sequence replaces an earlier one, as in a dict
            seq = tuple(_token_list("sequence_bias", seq, vocab_size))
            if not seq:
                raise ValueError("sequence_bias: each sequence must hold at least one id")
            if isinstance(bias, bool) or not isinstance(bias, (int, float, np.integer, np.floating)):
                raise TypeError(f"sequence_bias: the bias of {list(seq)} must be a number, got {bias!r}")
            if math.isnan(bias) or bias == math.inf:
                raise ValueError(f"sequence_bias: the bias of {list(seq)} is {bias}, want finite or -inf")
            biases[seq] = float(bias)
    banned = [list(seq) for seq, bias in biases.items() if bias == -math.inf]
    if biases:
        settings["sequence_bias"] = [{"tokens": list(seq), "bias": bias}
                                     for seq, bias in biases.items() if bias != -math.inf]
    if bad_words_ids is not None:
        if not isinstance(bad_words_ids, (list, tuple)) or not bad_words_ids:
            raise ValueError(f"bad_words_ids has to be a non-empty list of lists of ids, but is {bad_words_ids!r}")
        for seq in bad_words_ids:
            if isinstance(seq, (int, np.integer, str, bytes)):
                raise ValueError(f"bad_words_ids has to be a list of lists of ids, but is {bad_words_ids!r}")
            seq = _token_list("bad_words_ids", seq, vocab_size)
            if not seq:
                raise ValueError("bad_words_ids: each sequence must hold at least one id")
            banned.append(seq)
    if banned:
        settings["bad_words_ids"] = banned
    for name, ids in (("suppress_tokens", suppress_tokens), ("begin_suppress_tokens", begin_suppress_tokens),
                      ("forced_bos_token_id", forced_bos_token_id), ("forced_eos_token_id", forced_eos_token_id)):
        if ids is not None:
            settings[name] = _token_list(name, ids, vocab_size)
    if exponential_decay_length_penalty is not None:
        try:
            start, factor = exponential_decay_length_penalty
        except (TypeError, ValueError):
            raise TypeError("exponential_decay_length_penalty must be (start_index, decay_factor), got "
                            f"{exponential_decay_length_penalty!r}") from None
        if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0:
            raise ValueError(f"exponential_decay_length_penalty: start_index must be an int ≥ 0, got {start!r}")
        if isinstance(factor, bool) or not isinstance(factor, (int, float, np.integer, np.floating)) or \
                not 0 < factor < math.inf:
            raise ValueError(f"exponential_decay_length_penalty: decay_factor must be finite and > 0, got {factor!r}")
        settings["exponential_decay_length_penalty"] = {"start": int(start), "factor": float(factor)}
    if max_time is not None:
        if isinstance(max_time, bool) or not isinstance(max_time, (int, float, np.integer, np.floating)):
            raise TypeError(f"max_time must be a number of seconds, got {type(max_time).__name__}")
        if not 0 <= max_time < 1e9:
            raise ValueError(f"max_time must be finite and ≥ 0 seconds, got {max_time}")
        settings["max_time"] = float(max_time)
    return json.dumps(settings) if settings else ""


class _Vocabulary(_Owner):
    """A tokenizer's token texts (_vocab.token_texts), kept by the engine
    for stop strings: made once a tokenizer (_vocabulary)."""

    _kind, _free = "vocabulary", "FreeVocab"
    _instead = "pass the tokenizer itself"

    def __init__(self, texts: list[bytes | None]):
        data = np.frombuffer(b"".join(t for t in texts if t is not None), dtype=np.uint8)
        lengths = np.array([-1 if t is None else len(t) for t in texts], dtype=np.int64)
        self._h = _call(_b.NewVocab, _addr(data) if data.size else 0, data.size, _addr(lengths), lengths.size)


# The last few tokenizers' vocabularies, by the tokenizer's identity and
# size (a token added changes it), with the tokenizer kept so that its id
# stays its own; reading a 50k-token vocabulary takes a while.
_VOCABULARIES: dict[tuple[int, int], tuple[object, _Vocabulary]] = {}


def _vocabulary(tokenizer) -> _Vocabulary:
    """The engine's copy of tokenizer's token texts, made once for the
    last few tokenizers."""
    from . import _vocab

    key = (id(tokenizer), _vocab.size(tokenizer))
    if key not in _VOCABULARIES:
        if len(_VOCABULARIES) >= 4:
            _VOCABULARIES.pop(next(iter(_VOCABULARIES)))
        _VOCABULARIES[key] = (tokenizer, _Vocabulary(_vocab.token_texts(tokenizer)))
    return _VOCABULARIES[key][1]


class _FilledStops(tuple):
    """Stop strings with the id a generated row holds after one (fill;
    transformers' pad_token_id), as the hf layer passes them."""

    fill: int | None = None


def _stop_settings(stop_strings, tokenizer) -> tuple[dict | None, _Vocabulary | None]:
    """The stop strings' settings for the engine, checked, and the
    vocabulary they name (None, None for no stop strings): a str or a list
    of them, none empty, as UTF-8 in base64, and the handle of tokenizer's
    texts."""
    if stop_strings is None:
        return None, None
    strings = [stop_strings] if isinstance(stop_strings, str) else stop_strings
    if not isinstance(strings, (list, tuple)) or not strings or not all(isinstance(x, str) for x in strings):
        raise TypeError(f"stop_strings must be a str or a non-empty list of str, got {stop_strings!r}")
    if not all(strings):
        raise ValueError(f"stop_strings: an empty string would end every row at once: {list(strings)!r}")
    if tokenizer is None:
        raise ValueError("stop_strings need the model's tokenizer (tokenizer=...), to read the tokens' texts")
    vocab = _vocabulary(tokenizer)
    settings = {"strings": [base64.b64encode(x.encode("utf-8")).decode("ascii") for x in strings],
                "vocab": vocab._handle()}
    fill = getattr(stop_strings, "fill", None)
    if fill is not None:
        settings["fill"] = int(fill)
    return settings, vocab


# The prompt size (B·T positions) from which a CPU prefill can be stopped
# by Ctrl-C. A 130m model takes about 0.4 s for it on 16 cores, to which
# the hop to the worker thread (_native.interruptible, 75-80 µs) adds
# nothing that shows.
_STOPPABLE_ROWS = 1024


class Graph(_Owner):
    """A captured CUDA graph of a decode step or of a prefill, bound to one
    state and one shape. Make one with Model.capture_step or
    Model.capture_prefill; replay it with step or prefill."""

    _kind, _free = "graph", "FreeGraph"
    _instead = "capture another with Model.capture_step or Model.capture_prefill"

    def __init__(self, model: Model, state: State, handle: int, what: str, kind: str, seq_len: int, output: str):
        self._model, self._state, self._h = model, state, handle
        self._what, self.kind, self.seq_len, self.output = what, kind, seq_len, output
        self.batch_size = state.batch_size

    def step(self, token_ids) -> np.ndarray:
        """Replay the captured step: token_ids [B] in, logits [B, V] out."""
        if self._what != "step":
            raise ValueError("this graph captured a prefill; call prefill")
        ids = _token_column(token_ids)
        if ids.shape != (self.batch_size,):
            raise ValueError(f"token_ids must have shape ({self.batch_size},), got {ids.shape}")
        _check_ids("token_ids", ids, self._model.config.vocab_size)
        out = _nan((self.batch_size, self._model.config.vocab_size))
        _call(_b.GraphStep, self._handle(), _addr(ids), ids.size, _addr(out), out.size)
        return out

    def step_ptr(self, ids_ptr: int, *, logits_ptr: int, stream: int = 0) -> None:
        """Replay the captured step on caller-owned GPU memory, with no copy
        through the host: int64 token ids [B] at ids_ptr in, float32 logits
        [B, V] to logits_ptr (e.g. tensor.data_ptr()), queued on stream
        (torch.cuda.current_stream().cuda_stream; 0 is the legacy default
        stream) without waiting, like Model.prefill_ptr, whose checks of the
        buffers apply. Ids are clamped into the vocabulary on the device, not
        checked."""
        if self._what != "step":
            raise ValueError("this graph captured a prefill; step_ptr replays steps")
        _check_device_args(stream, ids_ptr=ids_ptr, logits_ptr=logits_ptr)
        _call(_b.GraphStepDevice, self._handle(), int(ids_ptr), int(logits_ptr), int(stream))

    def prefill(self, input_ids=None, *, inputs_embeds=None, features=None) -> np.ndarray:
        """Replay the captured prefill on one input of the captured kind and
        shape [B, T(, width)]; returns the captured output."""
        if self._what != "prefill":
            raise ValueError("this graph captured a step; call step")
        x, kind = self._model._prompt(input_ids, inputs_embeds, features)
        if kind != self.kind:
            raise ValueError(f"this graph captured {self.kind!r} input, got {kind!r}")
        B, T = x.shape[0], x.shape[1]
        if (B, T) != (self.batch_size, self.seq_len):
            raise ValueError(f"this graph captured B={self.batch_size} T={self.seq_len}, the input has B={B} T={T}")
        d = self._model.config.hidden_size
        out = _nan((B, T, d) if self.output == "all" else (B, d))
        _call(_b.GraphPrefill, self._handle(), kind, _addr(x), x.size, B, T, _addr(out), out.size)
        return out

    def __repr__(self):
        if self._what == "step":
            return f"mambago.Graph(step, batch_size={self.batch_size})"
        return (f"mambago.Graph(prefill, batch_size={self.batch_size}, seq_len={self.seq_len}, "
                f"kind={self.kind!r}, output={self.output!r})")
