"""Stand-ins for transformers' Mamba causal LMs in inference scripts: swap
the import and keep the calls.

    from mambago.hf import MambaForCausalLM   # was: from transformers import MambaForCausalLM

    model = MambaForCausalLM.from_pretrained("state-spaces/mamba-130m-hf", device="cuda", dtype="bfloat16")
    out = model.generate(input_ids, max_new_tokens=20)   # prompt and new tokens, as transformers returns them
    logits = model(input_ids).logits                     # [B, T, V]

Inputs may be torch tensors (CPU or CUDA) or numpy arrays; outputs come
back as the same kind, on the input's device. Embeddings may be float32, or
bfloat16/float16 tensors (widened exactly). The engine is chosen at load
(device=, dtype=): .to(), .cuda(), .half() and the like load the
checkpoint (or from_model's transformers model) again as asked, saying so
on stderr, where the model is not already so; .device and .dtype say what it is, as torch objects where torch is
installed (so `inputs.to(model.device)` works). A model already in PyTorch
hands over with from_model. AutoModelForCausalLM is the same class: it
loads Mamba and Falcon-Mamba checkpoints and refuses any other model type.

Hand-written decoding loops keep a cache, as with transformers: a forward
call's out.cache (a MambaCache, the engine's carried state) passed back as
cache= continues the sequences, one token a row as a decode step.

    out = model(input_ids, use_cache=True)
    for _ in range(20):
        out = model(out.logits[:, -1:].argmax(-1), cache=out.cache)

MambaModel (also AutoModel) is the backbone, for embeddings and classifier
heads: its forward call returns .last_hidden_state [B, T, d].

    from mambago.hf import AutoModel          # was: from transformers import AutoModel
    states = AutoModel.from_pretrained(path, device="cuda")(input_ids).last_hidden_state

transformers' pipeline() (version 5) takes either stand-in as its model:
"text-generation" with MambaForCausalLM, "feature-extraction" with
MambaModel.
"""

from __future__ import annotations

import math
import os
import sys
import weakref

import numpy as np

from .model import Model, State, _batched, _eos_ids, _FilledStops, _int, _is_torch_tensor, _spans

# torch's names of the floating types mambago runs in, as .to() takes them.
_TORCH_FLOATS = {"float32": "float32", "float": "float32", "bfloat16": "bfloat16", "float16": "float16",
                 "half": "float16"}

# transformers' from_pretrained arguments that name what device= and dtype=
# choose.
_LOAD_ALIASES = {"torch_dtype": "dtype", "device_map": "device"}

# transformers' from_pretrained arguments for a Hub download, passed to
# Model.from_pretrained's.
_HUB_ARGS = ("revision", "cache_dir", "token", "local_files_only", "force_download")

# transformers' from_pretrained arguments that change nothing here: no code
# from a checkpoint ever runs, and loading never builds a model in memory
# twice.
_NO_EFFECT_ARGS = ("trust_remote_code", "low_cpu_mem_usage")


# transformers' label for a position left out of the loss.
IGNORE_INDEX = -100


class _ModelOutput:
    """What the outputs share: read by name (out.logits, out["logits"];
    cache also as cache_params, transformers 4's name) or by place in
    transformers' order (_fields), leaving out what is not set."""

    _fields: tuple = ()

    @property
    def cache_params(self):
        """The cache, under transformers 4's name."""
        return self.cache

    def to_tuple(self) -> tuple:
        """The outputs that are set, in transformers' order."""
        return tuple(getattr(self, f) for f in self._fields if getattr(self, f) is not None)

    def __getitem__(self, key):
        if isinstance(key, (int, slice)):
            return self.to_tuple()[key]
        key = "cache" if key == "cache_params" else key
        if key in self._fields and getattr(self, key) is not None:
            return getattr(self, key)
        raise KeyError(key)


class CausalLMOutput(_ModelOutput):
    """What a forward call returns, as transformers' output reads: logits
    [B, T, V] (float32), given labels loss (a float32 scalar), with
    use_cache the MambaCache to continue from (cache), and with
    output_hidden_states hidden_states (each layer's residual stream
    [B, T, d], then the final norm's output); by place loss, logits, cache,
    hidden_states."""

    _fields = ("loss", "logits", "cache", "hidden_states")

    def __init__(self, logits, loss=None, cache=None, hidden_states=None):
        self.logits = logits
        self.loss = loss
        self.cache = cache
        self.hidden_states = hidden_states


class MambaCache:
    """The carried state of a batch of sequences (every layer's conv window
    and SSM state), as a forward call with use_cache returns it: transformers'
    cache, for Mamba. Passed back as cache= (or cache_params=) with the next
    tokens, it continues those sequences: the call updates it in place and
    returns it again, as transformers' hand-written decoding loops expect.

        out = model(input_ids, use_cache=True)
        for _ in range(20):
            next_ids = out.logits[:, -1:].argmax(-1)
            out = model(next_ids, cache=out.cache)

    .state is the mambago.State behind it (conv_state(layer), ssm_state(layer));
    MambaCache(state, seen) wraps one, seen being the positions it holds."""

    def __init__(self, state: State, seen: int = 0):
        if not isinstance(state, State):
            raise TypeError(f"MambaCache wraps a mambago.State, got {type(state).__name__}")
        if isinstance(seen, bool) or not isinstance(seen, (int, np.integer)) or seen < 0:
            raise ValueError(f"seen must be a count of positions (an int, 0 or more), got {seen!r}")
        self.state = state
        self.seen = int(seen)

    @property
    def batch_size(self) -> int:
        """The number of sequences it holds."""
        return self.state.batch_size

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """The positions fed through it so far, padding included (every layer
        has seen the same)."""
        return self.seen

    def reset(self) -> None:
        """Zero it, for new sequences."""
        self.state.reset()
        self.seen = 0

    def copy(self) -> "MambaCache":
        """A cache holding this one's values, to continue two ways or to come
        back to (copy.copy and copy.deepcopy give the same)."""
        return MambaCache(self.state.copy(), self.seen)

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def __repr__(self):
        return f"mambago.hf.MambaCache(batch_size={self.batch_size}, seen={self.seen})"


class _StandIn:
    """What the stand-ins share: the mambago Model behind them (.model,
    its config .config), transformers' load calls, and its device and dtype
    conveniences."""

    def __init__(self, model: Model):
        """Wrap a loaded mambago Model; anything else (a path) is a
        TypeError that says to call from_pretrained."""
        if not isinstance(model, Model):
            name = type(self).__name__
            raise TypeError(f"{name}({model!r}): it wraps a mambago.Model; to load a checkpoint, "
                            f"call mambago.hf.{name}.from_pretrained(path)")
        self.model = model
        self._source = None  # from_model's transformers model (a weak reference), for .to() to load again
        self._init_generation_config()

    @property
    def config(self):
        """The model's configuration (Model.config), from the engine behind
        it, which .to() may replace."""
        return self.model.config

    @property
    def device(self):
        """Where the model runs: torch.device("cuda:N") or ("cpu") where
        torch is installed, else the string."""
        name = self.model._where()
        torch = _torch()
        return torch.device(name) if torch else name

    @property
    def dtype(self):
        """The model's dtype (Model.dtype: on the CUDA engine the type its
        GEMMs compute in, on the CPU engine the type its weights are kept
        in): torch.float32, torch.bfloat16 or torch.float16 where torch is
        installed, else its name."""
        torch = _torch()
        return getattr(torch, self.model.dtype) if torch else self.model.dtype

    @classmethod
    def from_pretrained(cls, path, *, device: str = "auto", dtype=None, blas: str = "auto", **kwargs):
        """Load as Model.from_pretrained does (a folder or a Hub id).
        transformers' torch_dtype= and device_map= ("auto", "cpu", "cuda",
        "cuda:1", a GPU index, or {"": one of those}) are read as dtype= and
        device=; revision=, cache_dir=, token=, local_files_only= and
        force_download= go to a Hub download, as in transformers;
        trust_remote_code= and low_cpu_mem_usage= change nothing (no
        checkpoint code runs here). Any other argument is a TypeError."""
        hub = {}
        for name, value in kwargs.items():
            if name in _HUB_ARGS:
                hub[name] = value
                continue
            if name in _NO_EFFECT_ARGS:
                continue
            if name not in _LOAD_ALIASES:
                raise TypeError(f"from_pretrained: unsupported argument {name!r}")
            if _LOAD_ALIASES[name] == "dtype":
                dtype = value
            elif isinstance(value, dict) and set(value) == {""}:  # the whole model on one device
                device = value[""]
            else:
                device = value
        return cls(Model.from_pretrained(path, device=device, dtype=dtype, blas=blas, **hub))

    def _init_generation_config(self, hf_model=None):
        """Set what the stand-in keeps beside the model, from hf_model (a
        transformers model) where given: nothing here; a causal LM's
        generation_config."""

    @classmethod
    def from_model(cls, hf_model, *, device: str = "auto", dtype=None, blas: str = "auto"):
        """Take over a transformers model already in memory (its
        state_dict() and config; Model.from_state_dict). device="auto"
        follows the model's own GPU where it is on one ("cuda:1"), and is
        Model.from_pretrained's "auto" otherwise. dtype=None follows the
        model's own parameters: bfloat16 and float16 models load in that
        dtype (mixed precision on a GPU, 16-bit weights on the CPU), any
        other in float32."""
        first = next(iter(hf_model.parameters()), None) if hasattr(hf_model, "parameters") else None
        if device == "auto" and first is not None and getattr(first, "is_cuda", False):
            device = str(first.device)
        if dtype is None and first is not None:
            kind = str(getattr(first, "dtype", "")).replace("torch.", "")
            dtype = kind if kind in ("bfloat16", "float16") else None
        out = cls(Model.from_state_dict(hf_model.state_dict(), hf_model.config, device=device, dtype=dtype,
                                        blas=blas))
        out._init_generation_config(hf_model)
        try:
            out._source = weakref.ref(hf_model)
        except TypeError:  # an object that takes no weak reference: .to() cannot load again
            pass
        return out

    def eval(self):
        """Return self: the model only ever runs inference."""
        return self

    def can_generate(self) -> bool:
        """Whether generate runs, as transformers asks a model (its
        pipelines do): True for the causal LM, False for the backbone."""
        return hasattr(self, "generate")

    def to(self, *args, **kwargs):
        """Move or cast the model in place and return it, as torch's
        Module.to does: a device ("cpu", "cuda", "cuda:1", a torch.device
        or a GPU index) and a dtype (torch.float32, torch.bfloat16,
        torch.float16 or their names), each left as it is where omitted;
        non_blocking and copy change nothing. The engine is chosen at load,
        so another device or dtype loads the checkpoint folder again that
        way (saying so on stderr; from_pretrained(..., device=, dtype=)
        loads it once), or, for a model taken over with from_model, that
        transformers model's weights as they are now, while it is still in
        memory. States and caches made before keep the old engine. A model
        with neither to load from is a ValueError that says how to load it
        instead, as is a failed load, which leaves the model as it was."""
        device, dtype = self._asked(list(args) + [v for k, v in kwargs.items() if k not in ("non_blocking", "copy")])
        m = self.model
        if device is not None and (device.partition(":")[0] == m.device and
                                   device.partition(":")[2] in ("", str(m.device_index))):
            device = None
        if dtype == m.dtype:
            dtype = None
        if device is None and dtype is None:
            return self
        where, kind = device or m._where(), dtype or m.dtype
        source = self._source() if self._source is not None else None
        if m._folder is None and source is None:
            raise ValueError(f"this model runs on {m._where()} in {m.dtype} and has no checkpoint folder or "
                             f"transformers model to load again from: load it with device={where!r}, "
                             f"dtype={kind!r} instead")
        what = m._folder or f"the weights of its {type(source).__name__}"
        print(f"mambago.hf: {type(self).__name__}.to() loads {what} again, as {kind} on {where} (the engine is "
              f"chosen at load: loading with device={where!r}, dtype={kind!r} loads it once)", file=sys.stderr,
              flush=True)
        if m._folder is not None:
            self.model = Model.from_pretrained(m._folder, device=where, dtype=kind, blas=m._blas)
        else:
            self.model = Model.from_state_dict(source.state_dict(), source.config, device=where, dtype=kind,
                                               blas=m._blas)
        return self

    @staticmethod
    def _asked(args) -> tuple[str | None, str | None]:
        """The device ("cpu", "cuda" or "cuda:N") and the dtype (float32,
        bfloat16 or float16) that .to()'s arguments ask for, None where they
        ask none; anything else is a ValueError."""
        device = dtype = None
        for a in args:
            if a is None or isinstance(a, bool):
                continue
            want = f"cuda:{a}" if isinstance(a, int) else str(a).replace("torch.", "")
            if want.partition(":")[0] in ("cpu", "cuda"):
                device = want
            elif want in _TORCH_FLOATS:
                dtype = _TORCH_FLOATS[want]
            else:
                raise ValueError(f".to({a!r}): mambago runs on cpu or cuda, in float32, bfloat16 or float16")
        return device, dtype

    def cuda(self, device=None):
        """.to("cuda"), or .to("cuda:N") for a GPU index or name."""
        return self.to("cuda" if device is None else f"cuda:{device}" if isinstance(device, int) else device)

    def cpu(self):
        """.to("cpu")."""
        return self.to("cpu")

    def float(self):
        """.to("float32")."""
        return self.to("float32")

    def half(self):
        """.to("float16")."""
        return self.to("float16")

    def bfloat16(self):
        """.to("bfloat16")."""
        return self.to("bfloat16")

    def __repr__(self):
        return f"mambago.hf.{type(self).__name__}({self.model!r})"

    @staticmethod
    def _return_dict(kwargs, only: str) -> bool:
        """What a forward call's other transformers argument asks, as kwargs
        holds it: return_dict (False: the output's tuple). Anything else is
        a TypeError, as is asking for more than only, what the call
        returns."""
        kwargs = dict(kwargs)
        return_dict = kwargs.pop("return_dict", None)
        if kwargs:
            raise TypeError(f"unsupported arguments {sorted(kwargs)}: this model returns {only} only")
        return return_dict is None or bool(return_dict)

    def _on_model_gpu(self, x) -> bool:
        """Whether x is a CUDA tensor on the GPU this model runs on."""
        return (_is_torch_tensor(x) and x.is_cuda and self.model.device == "cuda"
                and x.device.index == self.model.device_index)

    def _run(self, input_ids, inputs_embeds, attention_mask, *, logits: bool, keep=0, cache=None,
             cache_params=None, cache_position=None, use_cache=None, hidden_states=None):
        """A forward call's work: logits [B, T', V] or (logits=False) the
        states [B, T', d] of the positions keep picks (transformers'
        logits_to_keep: 0 all, an int k the last k, a 1-D array those
        positions), as the input's kind of array; the cache to return
        (None for use_cache=False); and with hidden_states, transformers'
        hidden_states: each layer's residual stream [B, T, d], then the
        final norm's output (None without). A cache given is continued and
        updated; without one the prompt starts fresh, into a new cache
        unless use_cache is False."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids or inputs_embeds")
        if cache is not None and cache_params is not None:
            raise TypeError("give cache or cache_params (transformers 4's name for it), not both")
        cache = cache if cache is not None else cache_params
        name, rank = ("input_ids", 2) if inputs_embeds is None else ("inputs_embeds", 3)
        like = input_ids if inputs_embeds is None else inputs_embeds
        on_gpu = self._on_model_gpu(like)
        x = _batched(name, like if on_gpu else _embeds_f32(_numpy(like), name), rank)
        B, T = x.shape[0], x.shape[1]
        keep_cache = use_cache is None or bool(use_cache)
        cache, fresh, restart = self._cache_for(cache, cache_position, keep_cache, B)
        mask = None if attention_mask is None else _numpy(attention_mask)
        if mask is not None and not fresh and mask.shape[-1] > T:
            mask = mask[..., -T:]  # a mask of the whole sequence so far: the new positions' part
        spans = None if mask is None else _spans(mask, B, T)  # its errors before the cache changes
        at = _kept(keep, T)
        if restart:
            cache.reset()
        state = None if cache is None else cache.state
        layers = None
        if hidden_states and on_gpu:
            out, layers = self._run_on_gpu(x, name, spans, logits, state, fresh, at, hidden_states=True)
        elif hidden_states:  # the host engine hands the layers out on the host
            ids, embeds = (x, None) if name == "input_ids" else (None, x)
            final, taps = self.model._prefill(ids, embeds, None, state, fresh, "all", mask, layers=True)
            kept = final if at is None else np.ascontiguousarray(final[:, at])
            out = _like(self.model.logits(kept) if logits else kept, like)
            layers = tuple(_like(h, like) for h in (*taps, final))
        elif on_gpu:
            out = self._run_on_gpu(x, name, spans, logits, state, fresh, at)
        else:
            out = _like(self._run_on_host(x, name, mask, spans, logits, state, fresh, at), like)
        if cache is not None:
            cache.seen += T
        return out, (cache if keep_cache else None), layers

    def _cache_for(self, cache, cache_position, keep_cache, B):
        """The MambaCache a forward call of B rows runs on, whether it holds
        new sequences (zero), and whether it must be reset first to hold
        them: the cache given, to restart where cache_position starts at 0
        (transformers 4's sign of a new prompt); else a new one, or none
        where none is kept. Nothing changes here, so that a call refused
        later leaves the cache as it was."""
        start = None
        if cache_position is not None:
            flat = np.asarray(_numpy(cache_position)).reshape(-1)
            if flat.size == 0 or flat.dtype.kind not in "iu":
                raise ValueError(f"cache_position must hold the positions' indices (integers), got {flat!r}")
            start = int(flat[0])
        if cache is None:
            if start not in (None, 0):
                raise ValueError(f"cache_position starts at {start}, but no cache was given: pass the cache "
                                 f"the last call returned (cache=out.cache)")
            return (MambaCache(self.model.new_state(B)) if keep_cache else None), True, False
        if not isinstance(cache, MambaCache):
            raise TypeError(f"cache must be the mambago.hf.MambaCache a forward call with use_cache=True returned, "
                            f"got {type(cache).__name__}")
        if cache.state._model is not self.model:
            raise ValueError("cache was made by another model")
        if cache.batch_size != B:
            raise ValueError(f"cache holds {cache.batch_size} sequences, but the input has batch size {B}")
        if start is not None and start not in (0, cache.seen):
            raise ValueError(f"cache_position starts at {start}, but the cache holds {cache.seen} positions")
        return cache, start == 0, start == 0

    @staticmethod
    def _is_step(x, name, spans, logits, fresh) -> bool:
        """Whether a forward call is a decode step: one token a row, unpadded,
        continuing a cache, for its logits."""
        return logits and not fresh and name == "input_ids" and x.shape[1] == 1 and spans is None

    def _run_on_host(self, x, name, mask, spans, logits, state, fresh, at):
        """_run for a prompt x (numpy, batched) given on the host, mask's
        spans (_spans) already read; a decode step through Model.step."""
        T = x.shape[1]
        if self._is_step(x, name, spans, logits, fresh):
            out = self.model.step(x[:, 0], state)[:, None]
            return out if at is None else out[:, at]
        last = at is not None and at.tolist() == [T - 1] and spans is None
        ids, embeds = (x, None) if name == "input_ids" else (None, x)
        hidden = self.model._prefill(ids, embeds, None, state, fresh, "last" if last else "all", mask)
        if last:
            hidden = hidden[:, None]
        elif at is not None:
            hidden = np.ascontiguousarray(hidden[:, at])
        return self.model.logits(hidden) if logits else hidden

    def _run_on_gpu(self, x, name, spans, logits: bool, state, fresh, at, hidden_states=False):
        """_run for a prompt x (a torch tensor, batched) already on the
        model's GPU, its mask's spans (_spans) already read, made there by
        Model.prefill_ptr (a decode step: Model.step_ptr) on torch's current
        stream: nothing of the output's size crosses to the host. With
        hidden_states it returns (the output, transformers' hidden_states:
        each layer's residual stream [B, T, d], then the final norm's
        output), all from one prefill_ptr (layers_ptr)."""
        import torch

        if name == "inputs_embeds":
            kind, x = "embeds", x.detach()
            if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
                x = x.float()
        else:
            kind, x = "ids", x.detach().to(torch.int64)
        x = x.contiguous()
        B, T = x.shape[0], x.shape[1]
        stream = torch.cuda.current_stream(x.device).cuda_stream
        if not hidden_states and self._is_step(x, name, spans, logits, fresh):
            out = torch.empty((B, 1, self.config.vocab_size), dtype=torch.float32, device=x.device)
            self.model.step_ptr(x.data_ptr(), state, logits_ptr=out.data_ptr(), stream=stream)  # [B, 1]: B ids
            return out if at is None else out[:, torch.from_numpy(at).to(x.device)]
        rows = torch.arange(B, device=x.device)[:, None]
        lead, ends, back = None, None, None
        if spans is not None:
            first, end = spans[:, 0], spans[:, 0] + spans[:, 1]
            if np.any(end < T) and state is not None:
                # The state must be what each row's tokens alone give, and the
                # engine takes padding before them only: each row's tokens
                # move to its end, and its outputs back after.
                shift = T - end
                pos = np.arange(T)[None, :]
                x = x[rows, torch.from_numpy((pos - shift[:, None]) % T).to(x.device)].contiguous()
                back = torch.from_numpy((pos + shift[:, None]) % T).to(x.device)
                first, end = first + shift, np.full(B, T)
            # Padding after a row's tokens cannot change its tokens' outputs
            # (the model is causal): where no state is kept it runs as tokens,
            # its outputs zeroed after.
            if np.any(first > 0):
                lead = (np.arange(T) >= first[:, None]).astype(np.int64)
            if np.any(end < T):
                ends = torch.from_numpy(end).to(x.device)
        last = at is not None and at.tolist() == [T - 1] and spans is None and not hidden_states
        width = self.config.vocab_size if logits else self.config.hidden_size
        out = torch.empty((B, 1 if last else T, width), dtype=torch.float32, device=x.device)
        taps = None  # hidden_states: [L + 1, B, T, d]
        if hidden_states:
            taps = torch.empty((self.config.num_hidden_layers + 1, B, T, self.config.hidden_size),
                               dtype=torch.float32, device=x.device)
        self.model.prefill_ptr(x.data_ptr(), tuple(x.shape), out_ptr=out.data_ptr(), kind=kind,
                               output="last" if last else "all", logits=logits,
                               input_dtype=str(x.dtype) if kind == "embeds" else None, attention_mask=lead,
                               state=state, stream=stream, layers_ptr=0 if taps is None else taps.data_ptr())
        if ends is not None:
            after = torch.arange(T, device=x.device)[None, :] >= ends[:, None]
            out.masked_fill_(after[..., None], 0.0)
            if taps is not None:
                taps.masked_fill_(after[None, ..., None], 0.0)
        if back is not None:
            out = out[rows, back]
            if taps is not None:
                taps = taps[:, rows, back]
        if at is not None and not last:
            out = out[:, torch.from_numpy(at).to(x.device)]
        if taps is None:
            return out
        return out, tuple(taps.unbind(0))


# generate's settings in transformers' GenerationConfig names, each with the
# value it takes where neither the call, nor a generation_config given to
# it, nor the model's generation_config sets it (transformers' global
# defaults; max_length None: 20 new tokens).
_GENERATION_DEFAULTS = {
    "max_new_tokens": None, "max_length": None, "do_sample": False, "temperature": 1.0, "top_k": 50,
    "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0, "min_new_tokens": None, "min_length": 0,
    "no_repeat_ngram_size": 0, "num_beams": 1, "length_penalty": 1.0, "early_stopping": False,
    "eos_token_id": None, "pad_token_id": None,
    "num_return_sequences": 1, "return_dict_in_generate": False, "output_scores": False, "output_logits": False,
    "sequence_bias": None, "bad_words_ids": None, "suppress_tokens": None, "begin_suppress_tokens": None,
    "forced_eos_token_id": None, "max_time": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
    "forced_bos_token_id": None, "exponential_decay_length_penalty": None,
    # speed settings that leave the tokens as they are: beam search a beam at a time, and prompt-lookup
    # decoding (transformers' greedy tokens are the same with it); mambago takes them and decodes as it does
    "low_memory": None, "prompt_lookup_num_tokens": None, "stop_strings": None, "renormalize_logits": False,
    "output_hidden_states": False,
}

# transformers' generation settings that change the tokens and that
# generate does not have, each with the value that leaves it off: set to it
# they pass (a script may spell out num_beams=1); set otherwise, generate
# refuses them rather than decode another way than transformers would.
_GENERATION_OFF = {
    "num_beam_groups": 1, "penalty_alpha": None, "diversity_penalty": 0.0,
    "force_words_ids": None, "constraints": None, "top_h": None, "guidance_scale": None,
    "dola_layers": None, "watermarking_config": None, "assistant_model": None,
}


# Methods of transformers' GenerationConfig that mambago.hf's lacks: asked
# for, they are an AttributeError, not a setting read as None.
_TRANSFORMERS_CONFIG_METHODS = frozenset({"validate", "to_json_file", "push_to_hub", "from_pretrained", "from_dict",
                                          "from_model_config", "get_generation_mode", "dict_dtype_to_str"})


class GenerationConfig:
    """generate's defaults for one model, as transformers'
    model.generation_config holds them: an attribute a setting
    (do_sample, temperature, top_k, top_p, repetition_penalty,
    max_new_tokens, max_length, eos_token_id, pad_token_id, ...), None
    where unset. from_pretrained reads the checkpoint's
    generation_config.json where it has one, and otherwise takes the eos
    and pad ids of its config, as transformers does; from_model takes the
    transformers model's own. Setting an attribute changes the default of
    every later generate call; a call's own arguments, then a
    generation_config given to it, come first."""

    def __init__(self, **settings):
        """A config holding settings (transformers' names)."""
        self.__dict__.update(settings)

    def __getattr__(self, name):
        """None for a setting not set, as transformers' GenerationConfig has;
        an AttributeError for a method of transformers' that this one lacks."""
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _TRANSFORMERS_CONFIG_METHODS:
            raise AttributeError(f"mambago.hf.GenerationConfig has no {name}() of transformers' GenerationConfig; "
                                 f"generate and model.generation_config take a transformers.GenerationConfig too")
        return None

    def to_dict(self) -> dict:
        """The settings that are set, by name."""
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def to_diff_dict(self) -> dict:
        """The settings that are set, as to_dict: transformers' name for the
        settings that differ from its defaults (its pipelines ask for it).
        A setting left unset here already falls to those defaults."""
        return self.to_dict()

    def to_json_string(self) -> str:
        """The settings that are set, as generation_config.json holds them."""
        import json

        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def save_pretrained(self, save_directory) -> None:
        """Write generation_config.json into save_directory (made if
        missing), as transformers does; from_pretrained reads it back."""
        os.makedirs(save_directory, exist_ok=True)
        with open(os.path.join(save_directory, "generation_config.json"), "w") as f:
            f.write(self.to_json_string())

    def update(self, **settings) -> dict:
        """Set each of settings, as transformers' GenerationConfig.update
        does, and return those it did not take: none, since this config
        holds any of generate's settings."""
        self.__dict__.update(settings)
        return {}

    def __repr__(self) -> str:
        return f"GenerationConfig({', '.join(f'{k}={v!r}' for k, v in sorted(self.to_dict().items()))})"

    @classmethod
    def _from_file(cls, path: str) -> "GenerationConfig":
        """The settings of a generation_config.json; ValueError naming it
        where it holds no JSON object."""
        import json

        try:
            with open(path) as f:
                settings = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a generation config: {e}") from None
        if not isinstance(settings, dict):
            raise ValueError(f"{path}: not a generation config: a JSON {type(settings).__name__}, want an object")
        return cls(**{k: v for k, v in settings.items() if not k.startswith("_")})

    @classmethod
    def _from_config(cls, config) -> "GenerationConfig":
        """The settings a config without generation_config.json gives:
        its eos ids (a list where it names several) and pad id."""
        eos = config.eos_token_id
        if eos is not None and config.more_eos_token_ids:
            eos = [eos, *config.more_eos_token_ids]
        return cls(eos_token_id=eos, pad_token_id=config.pad_token_id)


def _settings_of(config) -> dict:
    """A generation_config given to generate as a dict of its settings:
    ours or transformers' (to_dict), or a dict; None gives none."""
    if config is None:
        return {}
    if isinstance(config, dict):
        return config
    if hasattr(config, "to_dict"):
        return config.to_dict()
    raise TypeError(f"generation_config must be a GenerationConfig (this module's or transformers') or a dict, "
                    f"got {type(config).__name__}")


class MambaForCausalLM(_StandIn):
    """A Mamba (or Falcon-Mamba) causal LM with transformers' inference
    calls: from_pretrained, a forward call returning .logits, generate
    returning prompt and new tokens. The mambago Model behind it is .model;
    its config is .config."""

    def _init_generation_config(self, hf_model=None):
        """Set .generation_config: hf_model's own (a transformers model),
        else the checkpoint folder's generation_config.json, else the
        config's eos and pad ids."""
        own = getattr(hf_model, "generation_config", None)
        path = self.model._folder and os.path.join(self.model._folder, "generation_config.json")
        if own is not None:
            self.generation_config = GenerationConfig(**_settings_of(own))
        elif path and os.path.exists(path):
            self.generation_config = GenerationConfig._from_file(path)
        else:
            self.generation_config = GenerationConfig._from_config(self.config)

    def __call__(self, input_ids=None, *, inputs_embeds=None, attention_mask=None, labels=None, use_cache=None,
                 cache=None, cache_params=None, cache_position=None, logits_to_keep=0, output_hidden_states=None,
                 **kwargs) -> CausalLMOutput:
        """Logits [B, T, V] at every position of a prompt. An attention_mask
        with zeros marks padding before or after each row's tokens
        (Model.prefill): the tokens' logits are what the row alone gives, as
        transformers gives them for left padding, and the padding's logits
        are zero. A prompt on the model's GPU stays there: the logits are
        made on the device (Model.prefill_ptr) and the loss taken there by
        torch.

        Caches, as transformers has them: unless use_cache=False the output
        carries a MambaCache (out.cache, or out.cache_params) holding each
        sequence's state after the prompt (after its tokens, where padded).
        Given back as cache= (or cache_params=), the call continues those
        sequences with the new positions, updating the cache in place; a
        decode step's one new token a row runs as one (Model.step) where the
        input is on the host. A mask as wide as the whole sequence so far is
        read at the new positions. cache_position, where given, must start
        at the positions the cache holds, or at 0 to start it over.
        logits_to_keep (an int k: the last k positions; a 1-D array: those
        positions; 0: all) returns only those positions' logits.

        labels [B, T] (token ids, or -100 for a position to leave out) add
        the loss transformers computes, for perplexity: the mean cross
        entropy of each position's logits against the next position's label,
        over the labels not left out (NaN where all are). Give the padding's
        labels -100, as transformers' data collators do: its logits are zero
        here. return_dict=False gives the output's tuple, as transformers
        does. output_hidden_states=True adds transformers' hidden_states:
        each layer's residual stream [B, T, d] (zero at the padding), then
        the final norm's output, float32: for a prompt on the model's GPU
        made there in the same call (Model.prefill_ptr's layers_ptr), for
        one on the host through it (Model.prefill_layers). Other arguments
        are a TypeError."""
        as_dict = self._return_dict(kwargs, "logits, loss, cache and hidden states")
        if labels is not None and not (isinstance(logits_to_keep, (int, np.integer)) and logits_to_keep == 0):
            raise ValueError("labels need every position's logits: leave logits_to_keep at 0")
        logits, cache, hidden = self._run(input_ids, inputs_embeds, attention_mask, logits=True, keep=logits_to_keep,
                                          cache=cache, cache_params=cache_params, cache_position=cache_position,
                                          use_cache=use_cache, hidden_states=output_hidden_states)
        loss = None
        if labels is not None:
            if _is_torch_tensor(logits) and logits.is_cuda:
                loss = _gpu_causal_lm_loss(logits, labels)
            else:
                loss = _like(causal_lm_loss(_numpy(logits), _numpy(labels)), logits)
        out = CausalLMOutput(logits, loss, cache, hidden)
        return out if as_dict else out.to_tuple()

    def generate(self, input_ids, max_new_tokens: int | None = None, *, max_length: int | None = None,
                 do_sample: bool | None = None, temperature: float | None = None, top_k: int | None = None,
                 top_p: float | None = None, eos_token_id: int | list[int] | None = None,
                 pad_token_id: int | None = None, attention_mask=None, use_cache: bool = True,
                 seed: int | None = None, streamer=None, num_return_sequences: int | None = None,
                 return_dict_in_generate: bool | None = None, output_scores: bool | None = None,
                 output_logits: bool | None = None, repetition_penalty: float | None = None,
                 min_new_tokens: int | None = None, min_length: int | None = None, min_p: float | None = None,
                 no_repeat_ngram_size: int | None = None, num_beams: int | None = None,
                 length_penalty: float | None = None, early_stopping: bool | str | None = None,
                 sequence_bias=None, bad_words_ids=None, suppress_tokens=None, begin_suppress_tokens=None,
                 forced_eos_token_id=None, max_time: float | None = None, typical_p: float | None = None,
                 epsilon_cutoff: float | None = None, eta_cutoff: float | None = None, forced_bos_token_id=None,
                 exponential_decay_length_penalty=None, low_memory: bool | None = None,
                 prompt_lookup_num_tokens: int | None = None, stop_strings=None, tokenizer=None,
                 renormalize_logits: bool | None = None, output_hidden_states: bool | None = None,
                 generation_config=None, **kwargs):
        """Continue prompts [B, T] by up to max_new_tokens tokens and return
        prompt and new tokens [B, T + n], as transformers does: greedy unless
        do_sample (then temperature, top_k and top_p apply; seed makes it
        reproducible). Without max_new_tokens, max_length counts the prompt
        too (T + n <= max_length); with neither, 20 new tokens. A row stops
        at eos_token_id (an id or a list of them, each of which stops it;
        by default the generation config's, which without a
        generation_config.json are the config's) and is padded with
        pad_token_id (likewise; else the first eos id) while others go on. An attention_mask
        with zeros marks padding before or after each row's prompt, and each
        row continues from its own last token (for left padding, as
        transformers does). Without one, the pad ids that open or close a
        row are its padding, as transformers infers them where the pad id
        is not an eos id. use_cache changes nothing (the state is always
        carried). streamer (TextStreamer, TextIteratorStreamer) receives the
        prompt, then each new token as it comes, then end(), as from
        transformers: CPU torch tensors where the input is a torch tensor.
        num_return_sequences n > 1 (with do_sample) samples n continuations
        of each prompt, as transformers does: rows [B * n, T + n_new], a
        prompt's n rows together, each drawn on a random stream of its own.
        repetition_penalty, as transformers 5.25 applies it, scales the
        logits of the tokens already in each row (its prompt's, without the
        padding, and the new tokens) before the draw, greedy or sampled.
        min_p, when sampling, keeps of the tokens top_k and top_p leave
        those at least min_p times as likely as the best.
        no_repeat_ngram_size n keeps each row from repeating an n-gram of
        its tokens, as transformers does, but without the left padding's
        ids, which transformers 5.25 counts as the row's.
        min_new_tokens keeps each row from ending before that many new
        tokens, as transformers does (the eos ids' logits -inf until then);
        without it, min_length does, counting the prompt.
        sequence_bias, bad_words_ids (those that are a lone eos id left
        out, as transformers leaves them), suppress_tokens,
        begin_suppress_tokens (ids outside the vocabulary ignored, as
        there), forced_eos_token_id and max_time are transformers' own,
        applied in its order (Model.generate).

        return_dict_in_generate returns a GenerateOutput (.sequences, the
        tokens above) that with output_logits also holds each step's logits
        and with output_scores its scores, transformers' processed logits
        (with do_sample: divided by temperature, then -inf outside top_k
        and outside top_p's nucleus; greedy: the logits), a tuple of n
        float32 [B, V] arrays. They come from one more pass over the
        tokens generated (the prompt's last position, then the new tokens
        from the cache), not from the steps that drew them: the same tokens
        and seed, logits within the engine's rounding of the steps'.
        compute_transition_scores reads them as transformers' does.
        output_hidden_states adds transformers' hidden_states, from one more
        pass the same way: a tuple of a step, each a tuple of each layer's
        residual stream, then the final norm's output (float32, as the
        forward call's hidden_states): [B, T, d] over the prompt for the
        first step, zero at its padding; then [B, 1, d] for the token each
        later step was fed (the pad id in a row that has ended, as
        transformers feeds it). For a prompt on the model's GPU they are
        made there (CUDA tensors). With beam search it is a ValueError.

        Each setting left None is taken, as transformers takes it, from
        generation_config where given (a GenerationConfig, this module's or
        transformers', or a dict), else from the model's
        .generation_config (the checkpoint's generation_config.json), else
        transformers' default (greedy; temperature 1, top_k 50, top_p 1).
        num_beams K > 1 (do_sample False) runs transformers' beam search
        (Model.beam_search): length_penalty, early_stopping (False, True or
        "never") and num_return_sequences (up to K) as there; with
        return_dict_in_generate a GenerateBeamOutput (sequences_scores,
        scores, logits, beam_indices as transformers gives them). With
        do_sample it is transformers' beam sampling (the warpers cut each
        beam's log probabilities, and the candidates are drawn). A streamer
        with beams is a ValueError, as in transformers.

        renormalize_logits log-softmaxes the processed (and, sampling,
        warped) logits last, as transformers' does: the scores returned,
        and in beam search the beams' scores, are then log probabilities
        over what the processors left.

        stop_strings (a str or a list), with the model's tokenizer
        (tokenizer=, as transformers takes it), end a row with the token
        that completes one in its text, as transformers' do: the row is
        padded after it as after an eos id (with no eos id it goes on while
        other rows have not ended), and a beam is finished there.

        transformers' settings for what this generate does not do (group
        beam search, contrastive search, DoLa, ...) pass where they are off
        (num_beam_groups=1) and are a ValueError naming them otherwise;
        other arguments are a TypeError."""
        given = {"max_new_tokens": max_new_tokens, "max_length": max_length, "do_sample": do_sample,
                 "temperature": temperature, "top_k": top_k, "top_p": top_p, "eos_token_id": eos_token_id,
                 "pad_token_id": pad_token_id, "num_return_sequences": num_return_sequences,
                 "return_dict_in_generate": return_dict_in_generate, "output_scores": output_scores,
                 "output_logits": output_logits, "repetition_penalty": repetition_penalty,
                 "min_new_tokens": min_new_tokens, "min_length": min_length, "min_p": min_p,
                 "no_repeat_ngram_size": no_repeat_ngram_size, "num_beams": num_beams,
                 "length_penalty": length_penalty, "early_stopping": early_stopping, "sequence_bias": sequence_bias,
                 "bad_words_ids": bad_words_ids, "suppress_tokens": suppress_tokens,
                 "begin_suppress_tokens": begin_suppress_tokens, "forced_eos_token_id": forced_eos_token_id,
                 "max_time": max_time, "typical_p": typical_p, "epsilon_cutoff": epsilon_cutoff,
                 "eta_cutoff": eta_cutoff, "forced_bos_token_id": forced_bos_token_id,
                 "exponential_decay_length_penalty": exponential_decay_length_penalty, "low_memory": low_memory,
                 "prompt_lookup_num_tokens": prompt_lookup_num_tokens, "stop_strings": stop_strings,
                 "renormalize_logits": renormalize_logits, "output_hidden_states": output_hidden_states}
        for name in kwargs:
            if name not in _GENERATION_OFF:
                raise TypeError(f"generate: unsupported argument {name!r}")
        layers = (given | kwargs, _settings_of(generation_config), _settings_of(self.generation_config))

        def setting(name, default=None):
            return next((layer[name] for layer in layers if layer.get(name) is not None), default)

        on = {name: setting(name) for name, off in _GENERATION_OFF.items() if setting(name, off) != off}
        if on:
            raise ValueError(f"generate: {', '.join(f'{k}={v!r}' for k, v in on.items())}: mambago generates "
                             f"greedily, by sampling (temperature, top_k, top_p, min_p) or by beam search "
                             f"(num_beams, length_penalty, early_stopping), with repetition_penalty, "
                             f"min_new_tokens, no_repeat_ngram_size, sequence_bias, bad_words_ids, "
                             f"suppress_tokens, begin_suppress_tokens, forced_bos_token_id, "
                             f"forced_eos_token_id, exponential_decay_length_penalty, max_time, stop_strings, renormalize_logits, typical_p, "
                             f"epsilon_cutoff and eta_cutoff only; "
                             f"set {'each' if len(on) > 1 else 'it'} to its default "
                             f"({', '.join(f'{k}={_GENERATION_OFF[k]!r}' for k in on)}), in the call or in "
                             f"model.generation_config")
        (max_new_tokens, max_length, do_sample, temperature, top_k, top_p, eos_token_id, pad_token_id,
         num_return_sequences, return_dict_in_generate, output_scores, output_logits, repetition_penalty,
         min_new_tokens, min_length, min_p, no_repeat_ngram_size, num_beams, length_penalty, early_stopping,
         sequence_bias, bad_words_ids, suppress_tokens, begin_suppress_tokens, forced_eos_token_id, max_time,
         typical_p, epsilon_cutoff, eta_cutoff, forced_bos_token_id, exponential_decay_length_penalty, _, _,
         stop_strings, renormalize_logits, output_hidden_states) = (setting(name, _GENERATION_DEFAULTS[name])
                                                                    for name in given)
        mask = None if attention_mask is None else _numpy(attention_mask)
        ids = _numpy(input_ids).astype(np.int64, copy=False)
        if pad_token_id is not None:  # it fills finished rows here, before Model.generate sees it
            pad_token_id = _int("pad_token_id", pad_token_id, "an int or None")
        if _int("num_return_sequences", num_return_sequences) < 1:
            raise ValueError(f"num_return_sequences must be at least 1, got {num_return_sequences}")
        if isinstance(num_beams, bool) or not isinstance(num_beams, (int, np.integer)) or num_beams < 1:
            raise ValueError(f"num_beams must be an int ≥ 1, got {num_beams!r}")
        beams = num_beams > 1
        if beams and output_hidden_states and return_dict_in_generate:
            raise ValueError("output_hidden_states with beam search (num_beams > 1) is not supported: mambago "
                             "keeps no running beam's states; generate without num_beams, or call the model on "
                             "the returned sequences with output_hidden_states=True")
        if beams and streamer is not None:  # transformers' refusal too
            raise ValueError("`streamer` cannot be used with beam search: set num_beams to 1")
        if beams and num_return_sequences > num_beams:
            raise ValueError(f"num_return_sequences ({num_return_sequences}) has to be smaller or equal to "
                             f"num_beams ({num_beams})")
        if num_return_sequences > 1 and not beams:
            if not do_sample:
                raise ValueError("num_return_sequences > 1 needs do_sample=True: greedy decoding gives one "
                                 "continuation a prompt (beam search is not supported)")
            if ids.ndim in (1, 2):  # other ranks: the engine's error
                ids = np.repeat(ids.reshape(-1, ids.shape[-1]), num_return_sequences, axis=0)
            if mask is not None and mask.ndim in (1, 2):
                mask = np.repeat(mask.reshape(-1, mask.shape[-1]), num_return_sequences, axis=0)
        if max_new_tokens is None:
            T = ids.shape[-1] if ids.ndim else 0
            if max_length is not None and max_length <= T:
                raise ValueError(f"max_length={max_length} leaves no room after a prompt of {T} tokens: "
                                 f"raise it, or pass max_new_tokens")
            max_new_tokens = 20 if max_length is None else max_length - T
        min_new = min_new_tokens
        if min_new is None:  # min_length counts the prompt, as transformers' does
            if isinstance(min_length, bool) or not isinstance(min_length, (int, np.integer)):
                raise TypeError(f"min_length must be an int, got {type(min_length).__name__}")
            min_new = max(0, min_length - (ids.shape[-1] if ids.ndim else 0))
        if _is_torch_tensor(eos_token_id):
            eos_token_id = _numpy(eos_token_id)
        eos_ids = _eos_ids(eos_token_id, self.config.vocab_size)  # the engine stops a row at each, pads with the first
        V = self.config.vocab_size
        if bad_words_ids is not None and isinstance(bad_words_ids, (list, tuple)):
            # transformers leaves out a bad word that is a lone eos id (and with it every processor, were
            # none left)
            bad_words_ids = [w for w in bad_words_ids
                             if not (isinstance(w, (list, tuple)) and len(w) == 1 and w[0] in eos_ids)] or None
        suppress_tokens, begin_suppress_tokens = (_within_vocab(t, V) for t in (suppress_tokens, begin_suppress_tokens))
        forced_bos_token_id, forced_eos_token_id = (_numpy(f) if _is_torch_tensor(f) else f
                                                    for f in (forced_bos_token_id, forced_eos_token_id))
        processors = dict(sequence_bias=sequence_bias, bad_words_ids=bad_words_ids, suppress_tokens=suppress_tokens,
                          begin_suppress_tokens=begin_suppress_tokens, forced_bos_token_id=forced_bos_token_id,
                          forced_eos_token_id=forced_eos_token_id,
                          exponential_decay_length_penalty=exponential_decay_length_penalty)
        if mask is None and pad_token_id is not None and pad_token_id not in eos_ids:
            mask = _mask_from_padding(ids, pad_token_id)  # transformers' generate reads pad ids as padding
        pads = eos_ids and pad_token_id is not None and pad_token_id != eos_ids[0]
        if isinstance(stop_strings, (str, list, tuple)):  # a row that ends at one is filled with the pad id
            stops = _FilledStops([stop_strings] if isinstance(stop_strings, str) else stop_strings)
            stops.fill = pad_token_id if pads else None
            processors.update(stop_strings=stops, tokenizer=tokenizer)
        elif stop_strings is not None:  # Model.generate's TypeError names it
            processors.update(stop_strings=stop_strings, tokenizer=tokenizer)
        if streamer is not None:
            streamer = _Streamed(streamer, _is_torch_tensor(input_ids), eos_ids if pads else None, pad_token_id)
        if do_sample and not temperature > 0:  # transformers' refusal, in its words: 0 is not greedy here
            raise ValueError(f"`temperature` (={temperature}) has to be a strictly positive float when sampling; "
                             f"for greedy decoding, set do_sample=False")
        # transformers' warpers past min_p: typical_p below 1 (the warper refuses 0 and less), the cutoffs in (0, 1)
        warpers = dict(typical_p=typical_p if typical_p < 1 else 1.0,
                       epsilon_cutoff=epsilon_cutoff if 0 < epsilon_cutoff < 1 else 0.0,
                       eta_cutoff=eta_cutoff if 0 < eta_cutoff < 1 else 0.0)
        if beams:
            if do_sample:  # beam sampling: top_p=0 keeps the fewest tokens the search allows, as transformers'
                processors = dict(processors, do_sample=True, temperature=temperature, top_k=top_k,
                                  top_p=top_p if top_p > 0 else 1e-300, min_p=min_p, seed=seed, **warpers)
            return self._beam_search(input_ids, ids, mask, max_new_tokens, num_beams, num_return_sequences,
                                     length_penalty, early_stopping, eos_ids, pad_token_id, repetition_penalty,
                                     min_new, no_repeat_ngram_size, return_dict_in_generate and output_scores,
                                     return_dict_in_generate and output_logits, return_dict_in_generate,
                                     dict(processors, renormalize_logits=renormalize_logits), max_time)
        if do_sample and top_p != 0:
            new = self.model.generate(ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                                      seed=seed, eos_token_id=eos_ids, attention_mask=mask, streamer=streamer,
                                      repetition_penalty=repetition_penalty, min_new_tokens=min_new, min_p=min_p,
                                      no_repeat_ngram_size=no_repeat_ngram_size, max_time=max_time, **processors,
                                      **warpers)
        else:
            # greedy; also sampling with top_p=0, which keeps only the most likely token (transformers keeps
            # at least one; the engine's top_p wants (0, 1]); the scores below are still top_p=0's
            new = self.model.generate(ids, max_new_tokens, eos_token_id=eos_ids, attention_mask=mask,
                                      streamer=streamer, repetition_penalty=repetition_penalty,
                                      min_new_tokens=min_new, no_repeat_ngram_size=no_repeat_ngram_size,
                                      max_time=max_time, **processors)
        if pads:
            new, _ = _pad_after_eos(new, eos_ids, pad_token_id, np.zeros(new.shape[0], bool))
        sequences = _like(np.concatenate([ids.reshape(new.shape[0], -1), new], axis=1), input_ids)
        if not return_dict_in_generate:
            return sequences
        logits = self._step_logits(ids, mask, new) if output_scores or output_logits else None
        scores = None
        if output_scores:
            prompts = ids.reshape(new.shape[0], -1)
            if mask is not None:
                prompts = [row[keep == 1] for row, keep in zip(prompts, mask.reshape(prompts.shape))]
            scores = []
            biases, banned = _sequence_biases(processors["sequence_bias"], processors["bad_words_ids"])
            prompts_T = ids.shape[-1]
            for i, z in enumerate(logits):  # transformers' processors in its order, then its warpers when sampling
                seen = [np.concatenate([p, row[:i]]) for p, row in zip(prompts, new)]  # each row's tokens so far
                z = _biased(z, seen, biases)
                z = _penalized(z, seen, repetition_penalty)
                if no_repeat_ngram_size:
                    z = _ngrams_banned(z, seen, no_repeat_ngram_size)
                z = _biased(z, seen, banned)
                z = z.copy()
                if i < min_new:  # before min_new_tokens, -inf at eos
                    z[:, eos_ids] = -np.inf
                bos = processors["forced_bos_token_id"] is not None and prompts_T == 1
                for forced, at in ((processors["forced_bos_token_id"], bos and i == 0),
                                   (processors["forced_eos_token_id"], i == max_new_tokens - 1)):
                    if forced is not None and at:
                        z[:] = -np.inf
                        z[:, np.asarray(forced).reshape(-1)] = 0
                decay = processors["exponential_decay_length_penalty"]
                if decay is not None and eos_ids and i > decay[0]:
                    e = z[:, eos_ids]
                    finite = np.where(np.isfinite(e), e, 0)
                    z[:, eos_ids] = e + np.abs(finite) * np.float32(decay[1] ** (i - decay[0]) - 1)
                for suppressed, at in ((processors["suppress_tokens"], True), (processors["begin_suppress_tokens"],
                                                                                i == (1 if bos else 0))):
                    if suppressed and at:
                        z[:, suppressed] = -np.inf
                z = _warped(z, temperature, top_k, top_p, min_p, **warpers) if do_sample else z
                scores.append(_like(_log_softmax(z) if renormalize_logits else z, input_ids))
            scores = tuple(scores)
        if output_logits:
            logits = tuple(_like(z, input_ids) for z in logits)
        hidden = self._step_hidden_states(ids, mask, new, input_ids) if output_hidden_states else None
        return GenerateOutput(sequences, scores, logits if output_logits else None, hidden)

    def _beam_search(self, input_ids, ids, mask, max_new_tokens, num_beams, num_return_sequences, length_penalty,
                     early_stopping, eos_ids, pad_token_id, repetition_penalty, min_new, no_repeat_ngram_size,
                     output_scores, output_logits, as_output, processors, max_time):
        """generate's beam search (Model.beam_search): prompts ids [B, T]
        (input_ids as given, for the output's kind), each prompt's
        num_return_sequences best beams as transformers returns them."""
        # transformers fills a finished row with (pad_token_id or eos_token_id[0]) if there are eos ids, else -1:
        # a pad id of 0 gives the first eos id
        fill = (pad_token_id or eos_ids[0]) if eos_ids else -1
        out = self.model.beam_search(ids, max_new_tokens, num_beams, num_return_sequences=num_return_sequences,
                                     length_penalty=length_penalty, early_stopping=early_stopping,
                                     eos_token_id=eos_ids, pad_token_id=int(fill), attention_mask=mask,
                                     repetition_penalty=repetition_penalty, min_new_tokens=min_new,
                                     no_repeat_ngram_size=no_repeat_ngram_size, output_scores=output_scores,
                                     output_logits=output_logits, max_time=max_time, **processors)
        prompts = np.repeat(ids.reshape(-1, ids.shape[-1]), num_return_sequences, axis=0)
        sequences = _like(np.concatenate([prompts, out.tokens], axis=1), input_ids)
        if not as_output:
            return sequences

        def steps(arrays):
            return None if arrays is None else tuple(_like(np.ascontiguousarray(a), input_ids) for a in arrays)

        return GenerateBeamOutput(sequences, _like(out.scores, input_ids) if output_scores else None,
                                  steps(out.step_scores), steps(out.step_logits),
                                  _like(out.beam_indices.astype(np.int64), input_ids))

    def _step_logits(self, ids, mask, new):
        """The logits each generation step of new [B, n] drew from, after
        prompts ids [B, T] (mask: their padding): the prompt's last token's,
        then each new token's but the last, continuing the prompt's state;
        n float32 arrays [B, V]."""
        n = new.shape[1]
        if n == 0:
            return []
        state = self.model.new_state(new.shape[0])
        last = self.model._prefill(ids.reshape(new.shape[0], -1), None, None, state, True, "last", mask)
        steps = [self.model.logits(last)]
        if n > 1:
            after = self.model.logits(self.model._prefill(new[:, :-1], None, None, state, False, "all", None))
            steps += [np.ascontiguousarray(after[:, i]) for i in range(n - 1)]
        return steps

    def _step_hidden_states(self, ids, mask, new, like):
        """transformers' hidden_states of the generation steps of new [B, n]
        after prompts ids [B, T] (mask: their padding), as like's kind of
        array: for the prompt, then for each new token but the last,
        continuing the prompt's state, each layer's residual stream and the
        final norm's output. Where like is on the model's GPU they are made
        there (_run_on_gpu's hidden_states), float32."""
        B, n = new.shape
        if n == 0:
            return ()
        state = self.model.new_state(B)
        if self._on_model_gpu(like):
            import torch

            prompts = torch.from_numpy(ids.reshape(B, -1)).to(like.device)
            spans = None if mask is None else _spans(mask, *prompts.shape)
            steps = [self._run_on_gpu(prompts, "input_ids", spans, False, state, True, None, hidden_states=True)[1]]
            if n > 1:
                rest = torch.from_numpy(new[:, :-1]).to(like.device)
                _, hs = self._run_on_gpu(rest, "input_ids", None, False, state, False, None, hidden_states=True)
                steps += [tuple(h[:, i:i + 1].contiguous() for h in hs) for i in range(n - 1)]
            return tuple(steps)
        final, taps = self.model._prefill(ids.reshape(B, -1), None, None, state, True, "all", mask, layers=True)
        steps = [(*taps, final)]
        if n > 1:
            final, taps = self.model._prefill(new[:, :-1], None, None, state, False, "all", None, layers=True)
            steps += [tuple(h[:, i:i + 1] for h in (*taps, final)) for i in range(n - 1)]
        return tuple(tuple(_like(np.ascontiguousarray(h), like) for h in step) for step in steps)

    def compute_transition_scores(self, sequences, scores, beam_indices=None, normalize_logits: bool = False):
        """Each generated token's score [rows, n] out of a GenerateOutput's
        sequences [rows, T + n] and scores (a [B, V] array a step), as
        transformers' compute_transition_scores gives them: the score of the
        token each step took, as a log probability over the vocabulary with
        normalize_logits. For beam search, give its beam_indices: each
        token's score is then read from the beam it came from, and is 0 past
        a row's end, so that a row's scores summed over its length to the
        length penalty give its sequences_scores."""
        like = scores[0] if len(scores) else sequences
        z = np.stack([_numpy(x) for x in scores], axis=1).astype(np.float32)  # [beams, steps, V]
        if normalize_logits:
            top = z.max(axis=-1, keepdims=True)
            top = np.where(np.isfinite(top), top, 0)
            z = z - top - np.log(np.exp(z - top).sum(axis=-1, keepdims=True))
        seqs = _numpy(sequences)
        if beam_indices is None:
            tokens = seqs[:, seqs.shape[-1] - z.shape[1]:]
            return _like(np.take_along_axis(z, tokens[..., None].astype(np.int64), axis=-1)[..., 0], like)
        beams = _numpy(beam_indices).astype(np.int64)
        ended = beams < 0
        n = int((~ended).sum(axis=-1).max()) if beams.size else 0
        beams, ended = beams[:, :n].copy(), ended[:, :n]
        beams[ended] = 0
        tokens = seqs[:, seqs.shape[-1] - n:].astype(np.int64)
        got = z[beams, np.arange(n)[None, :], tokens]
        got[ended] = 0
        return _like(got.astype(np.float32), like)


class GenerateBeamOutput(_ModelOutput):
    """What generate's beam search returns with return_dict_in_generate, as
    transformers' GenerateBeamDecoderOnlyOutput reads: sequences (prompt and
    new tokens, each prompt's num_return_sequences best beams together,
    best first), with output_scores sequences_scores (each beam's
    length-penalized score) and scores (each step's processed log
    probabilities, [B·num_beams, V]), with output_logits logits, and
    beam_indices [rows, n] (the beam each token came from, -1 past the
    end)."""

    _fields = ("sequences", "sequences_scores", "scores", "logits", "beam_indices")
    cache = None  # transformers' past_key_values: not kept

    def __init__(self, sequences, sequences_scores=None, scores=None, logits=None, beam_indices=None):
        self.sequences, self.sequences_scores, self.scores = sequences, sequences_scores, scores
        self.logits, self.beam_indices = logits, beam_indices


class GenerateOutput(_ModelOutput):
    """What generate returns with return_dict_in_generate, as transformers'
    GenerateDecoderOnlyOutput reads: sequences (prompt and new tokens), and
    where asked scores and logits (a tuple of a [B, V] array a step) and
    hidden_states (a tuple a step of each layer's [B, T', d])."""

    _fields = ("sequences", "scores", "logits", "hidden_states")
    cache = None  # transformers' past_key_values: not kept

    def __init__(self, sequences, scores=None, logits=None, hidden_states=None):
        self.sequences = sequences
        self.scores = scores
        self.logits = logits
        self.hidden_states = hidden_states


class BaseModelOutput(_ModelOutput):
    """What MambaModel's forward call returns, as transformers' output
    reads: last_hidden_state [B, T, d] (float32, after the final norm),
    with use_cache the MambaCache to continue from (cache), and with
    output_hidden_states hidden_states (each layer's residual stream, then
    last_hidden_state); by place last_hidden_state, cache, hidden_states."""

    _fields = ("last_hidden_state", "cache", "hidden_states")

    def __init__(self, last_hidden_state, cache=None, hidden_states=None):
        self.last_hidden_state = last_hidden_state
        self.cache = cache
        self.hidden_states = hidden_states


class MambaModel(_StandIn):
    """A Mamba (or Falcon-Mamba) backbone with transformers' inference
    calls, for embeddings and classifier heads: from_pretrained (a
    MambaModel checkpoint, or a causal LM's, whose LM head goes unused), and
    a forward call returning .last_hidden_state, every position's state
    after the final norm. The mambago Model behind it is .model; its
    config is .config."""

    def __call__(self, input_ids=None, *, inputs_embeds=None, attention_mask=None, use_cache=None, cache=None,
                 cache_params=None, cache_position=None, output_hidden_states=None, **kwargs) -> BaseModelOutput:
        """last_hidden_state [B, T, d] (float32) at every position of a
        prompt. An attention_mask with zeros marks padding before or after
        each row's tokens (Model.prefill): each token's state is what the
        row alone gives, and the padding's is zero. A prompt on the model's
        GPU stays there (Model.prefill_ptr). use_cache, cache (or
        cache_params), cache_position and output_hidden_states work as
        MambaForCausalLM's: the output's cache continues the sequences, and
        hidden_states ends with last_hidden_state. return_dict=False gives
        the output's tuple; other arguments are a TypeError."""
        as_dict = self._return_dict(kwargs, "last_hidden_state, cache and hidden states")
        states, cache, hidden = self._run(input_ids, inputs_embeds, attention_mask, logits=False, cache=cache,
                                          cache_params=cache_params, cache_position=cache_position,
                                          use_cache=use_cache, hidden_states=output_hidden_states)
        out = BaseModelOutput(states, cache, hidden)
        return out if as_dict else out.to_tuple()


def _check_labels(labels: np.ndarray, B: int, T: int, V: int) -> None:
    """Raise unless labels is integer [B, T] of token ids in [0, V) or
    IGNORE_INDEX."""
    if labels.dtype.kind not in "iu":
        raise TypeError(f"labels must hold integers, got dtype {labels.dtype}")
    if labels.shape != (B, T):
        raise ValueError(f"labels must have the input's shape ({B}, {T}), got {labels.shape}")
    bad = (labels != IGNORE_INDEX) & ((labels < 0) | (labels >= V))
    if bad.any():
        raise ValueError(f"labels holds {labels[bad].flat[0]}: want a token id in [0, {V}) or {IGNORE_INDEX}")


def causal_lm_loss(logits: np.ndarray, labels: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """transformers' causal-LM loss of logits [B, T, V] against labels
    [B, T]: position t's logits predict label t+1; labels of -100
    (IGNORE_INDEX) are left out; the mean over the rest, as a float32
    scalar (NaN where none is left). Rows of logits are taken chunk at a
    time, so the log-softmax needs no second copy of them all."""
    B, T, V = logits.shape
    _check_labels(labels, B, T, V)
    target = labels[:, 1:].reshape(-1).astype(np.int64)  # the next position's label
    rows = logits[:, :-1, :].reshape(-1, V)
    keep = np.flatnonzero(target != IGNORE_INDEX)
    total = 0.0
    for i in range(0, keep.size, chunk):
        at = keep[i:i + chunk]
        x = rows[at]
        top = x.max(axis=1, keepdims=True)
        lse = np.log(np.exp(x - top).sum(axis=1, dtype=np.float64)) + top[:, 0]
        total += float((lse - x[np.arange(at.size), target[at]]).sum())
    return np.array(total / keep.size if keep.size else np.nan, dtype=np.float32)


def _gpu_causal_lm_loss(logits, labels):
    """causal_lm_loss of CUDA logits [B, T, V] (torch, float32) where they
    are, a row at a time: labels (torch or numpy) are checked before any
    reaches a CUDA kernel, which would fault on one out of range."""
    import torch
    import torch.nn.functional as F

    B, T, V = logits.shape
    host = _numpy(labels)  # B·T ids, checked on the host as causal_lm_loss checks them
    _check_labels(host, B, T, V)
    target = torch.from_numpy(host.astype(np.int64, copy=False)).to(logits.device)[:, 1:]
    total = sum(F.cross_entropy(logits[b, :-1], target[b], ignore_index=IGNORE_INDEX, reduction="sum",
                                ).double() for b in range(B))
    kept = (target != IGNORE_INDEX).sum()
    return (total / kept).float()  # NaN where every label is left out, as causal_lm_loss


class _Streamed:
    """A transformers streamer fed what transformers' generate gives it:
    CPU torch tensors where the input was a torch tensor, and, with eos set,
    pad for a row's tokens after its eos (the engine repeats eos)."""

    def __init__(self, streamer, as_torch: bool, eos: list[int] | None, pad: int | None):
        self.streamer, self.as_torch, self.eos, self.pad = streamer, as_torch, eos, pad
        self.stopped = None  # rows past their eos

    def put(self, value: np.ndarray):
        if value.ndim == 1 and self.eos is not None:  # a new token of each row
            if self.stopped is None:
                self.stopped = np.zeros(value.shape, bool)
            column, self.stopped = _pad_after_eos(value[:, None], self.eos, self.pad, self.stopped)
            value = column[:, 0]
        if self.as_torch:
            import torch

            value = torch.from_numpy(value)
        self.streamer.put(value)

    def end(self):
        self.streamer.end()


def _log_softmax(z: np.ndarray) -> np.ndarray:
    """Each row of z [B, V] log-softmaxed, as transformers'
    renormalize_logits does last (float32; a row that is all -inf stays)."""
    top = z.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)
    with np.errstate(divide="ignore"):
        lse = np.log(np.exp((z - top).astype(np.float64)).sum(axis=-1, keepdims=True))
    out = (z - top - lse).astype(np.float32)
    return np.where(np.isneginf(z.max(axis=-1, keepdims=True)), z, out)


def _pad_after_eos(tokens: np.ndarray, eos: list[int], pad: int, stopped: np.ndarray):
    """New tokens [B, k] as transformers gives them, pad in each row after
    its first id of eos (the engine repeats eos[0] there), where stopped
    [B] marks the rows whose eos came in earlier columns; returns them and
    the rows stopped after them."""
    is_eos = np.isin(tokens, eos)
    past = stopped[:, None] | (np.cumsum(is_eos, axis=1) - is_eos > 0)
    return np.where(past, pad, tokens), stopped | is_eos.any(axis=1)


def _mask_from_padding(ids: np.ndarray, pad) -> np.ndarray | None:
    """The attention_mask transformers' generate infers without one, where
    pad_token_id is not an eos id: 0 at each pad id of input_ids [B, T].
    None where no row holds the pad id, and where a pad id sits between a
    row's tokens (also a row of nothing else): that is taken as a token,
    with a warning, where transformers would skip it as padding."""
    if ids.ndim != 2 or isinstance(pad, bool) or not isinstance(pad, (int, np.integer)):
        return None
    mask = (ids != pad).astype(np.int64)
    if mask.all():
        return None
    try:
        _spans(mask, *ids.shape)
    except ValueError:
        import warnings

        warnings.warn(f"input_ids hold pad_token_id {pad} among a row's tokens; mambago takes them as tokens, "
                      f"where transformers' generate would take them for padding: pass attention_mask",
                      stacklevel=3)
        return None
    return mask


def _numpy(x) -> np.ndarray:
    """x as a numpy array: torch tensors are copied to the CPU first, and
    bfloat16/float16 ones (which numpy cannot hold or the engine take)
    widened to float32, exactly."""
    if _is_torch_tensor(x):
        x = x.detach()
        if x.is_floating_point() and x.element_size() == 2:
            x = x.float()
        return x.cpu().numpy()
    a = np.asarray(x)
    return a.astype(np.float32) if a.dtype == np.float16 else a


def _embeds_f32(x: np.ndarray, name: str) -> np.ndarray:
    """Host inputs_embeds of any float type as float32, as the GPU path takes
    a float64 tensor (the engines compute in float32 or narrower anyway);
    anything else passes to the entry's own checks unchanged."""
    if name == "inputs_embeds" and x.dtype.kind == "f" and x.dtype != np.float32:
        return x.astype(np.float32)
    return x


def _kept(keep, T: int):
    """transformers' logits_to_keep for T positions as the positions it
    keeps (int64 [k], in order), or None for all of them: an int k keeps
    the last k (0: all), a 1-D array of indices those positions."""
    if isinstance(keep, bool):
        raise TypeError("logits_to_keep must be an int or a 1-D array of positions, got a bool")
    if isinstance(keep, (int, np.integer)):
        if keep < 0:
            raise ValueError(f"logits_to_keep must be 0 (all positions) or more, got {keep}")
        return None if keep == 0 or keep >= T else np.arange(T - keep, T)
    at = _numpy(keep)
    if at.ndim != 1 or at.dtype.kind not in "iu":
        raise TypeError(f"logits_to_keep must be an int or a 1-D array of positions, got {at.dtype} of shape {at.shape}")
    if at.size and (at.min() < -T or at.max() >= T):
        raise ValueError(f"logits_to_keep holds {at[(at < -T) | (at >= T)][0]}, outside the {T} positions")
    return np.where(at < 0, at + T, at).astype(np.int64)


def _penalized(logits: np.ndarray, seen, penalty: float) -> np.ndarray:
    """transformers' repetition penalty on logits [B, V]: in each row b, the
    logit of every id in seen[b] (an array of ids) divided by penalty where
    it is ≥ 0 and multiplied by it where it is below (float32, as
    transformers computes it); logits as they are where penalty is 1."""
    if penalty == 1.0:
        return logits
    z = logits.astype(np.float32, copy=True)
    p = np.float32(penalty)
    for row, ids in zip(z, seen):
        ids = np.unique(ids)
        row[ids] = np.where(row[ids] < 0, row[ids] * p, row[ids] / p)
    return z


def _within_vocab(ids, V: int):
    """ids (None, or an iterable of ids: a list, an array, a tensor) less
    those outside [0, V), which transformers' suppressing processors ignore;
    what is not an id stays, for Model.generate's TypeError."""
    if ids is None:
        return None
    if _is_torch_tensor(ids) or isinstance(ids, np.ndarray):
        ids = _numpy(ids).reshape(-1).tolist()
    return [i for i in ids if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or 0 <= i < V]


def _sequence_biases(sequence_bias, bad_words_ids):
    """generate's sequence biases and bad words as two lists of (tokens,
    bias): the finite biases, then the banned sequences (-inf; a bias of
    -inf included), for _biased."""
    pairs = [] if sequence_bias is None else (
        sequence_bias.items() if isinstance(sequence_bias, dict) else [(seq, bias) for seq, bias in sequence_bias])
    biases = {tuple(int(t) for t in seq): float(bias) for seq, bias in pairs}
    banned = [(seq, -math.inf) for seq, bias in biases.items() if bias == -math.inf]
    banned += [(tuple(int(t) for t in seq), -math.inf) for seq in bad_words_ids or ()]
    return [(seq, bias) for seq, bias in biases.items() if bias != -math.inf], banned


def _biased(logits: np.ndarray, rows, biases) -> np.ndarray:
    """transformers' sequence bias on logits [B, V]: in each row b, each
    bias of biases ((tokens, bias) pairs) whose tokens but the last end
    rows[b] (its tokens so far) added to the last's logit, a token's
    biases summed first (float32)."""
    if not biases:
        return logits
    z = logits.astype(np.float32, copy=True)
    for b, row in enumerate(rows):
        row = [int(t) for t in row]
        add = np.zeros(z.shape[-1], np.float32)
        for seq, bias in biases:
            n = len(seq) - 1
            if n == 0 or (len(row) >= n and tuple(row[len(row) - n:]) == seq[:-1]):
                add[seq[-1]] += np.float32(bias)
        z[b] += add
    return z


def _ngrams_banned(logits: np.ndarray, rows, n: int) -> np.ndarray:
    """transformers' no_repeat_ngram_size on logits [B, V]: in each row b,
    -inf at every token that would close an n-gram rows[b] (its tokens so
    far) already holds."""
    z = logits.astype(np.float32, copy=True)
    for b, row in enumerate(rows):
        row = [int(t) for t in row]
        if len(row) < n - 1:
            continue
        last = tuple(row[len(row) - n + 1:])
        for end in range(n, len(row) + 1):
            if tuple(row[end - n:end - 1]) == last:
                z[b, row[end - 1]] = -np.inf
    return z


def _warped(logits: np.ndarray, temperature: float, top_k: int, top_p: float, min_p: float = 0.0,
            typical_p: float = 1.0, epsilon_cutoff: float = 0.0, eta_cutoff: float = 0.0) -> np.ndarray:
    """transformers' sampling scores of logits [B, V]: divided by
    temperature (unless 1), then -inf below the top_k-th largest (ties
    kept; unless 0 or V and more), then -inf outside the nucleus: the
    tokens whose probability, added from the least likely up, stays at or
    under 1 - top_p, the most likely always kept (unless top_p is 1), then
    -inf where the probability is under min_p times the best's (unless
    min_p is 0), then outside typical_p's set (the tokens whose surprise
    is nearest the entropy, up to the one whose probability, added in
    that order, reaches typical_p; unless 1), then where the probability
    is under epsilon_cutoff, then under min(eta, sqrt(eta) e^-entropy)
    for eta_cutoff (unless 0; the best always kept)."""
    z = logits.astype(np.float32, copy=True)
    if temperature != 1.0:
        z /= np.float32(temperature)
    V = z.shape[-1]
    if 0 < top_k < V:
        kth = np.partition(z, V - top_k, axis=-1)[:, V - top_k][:, None]
        z[z < kth] = -np.inf
    if top_p < 1.0:
        order = np.argsort(z, axis=-1, kind="stable")  # ascending
        ranked = np.take_along_axis(z, order, axis=-1).astype(np.float64)
        p = np.exp(ranked - ranked[:, -1:])
        cum = np.cumsum(p / p.sum(axis=-1, keepdims=True), axis=-1)
        drop = cum <= 1 - top_p
        drop[:, -1] = False
        np.put_along_axis(z, order, np.where(drop, -np.inf, ranked).astype(np.float32), axis=-1)
    if min_p > 0:
        p = np.exp(z.astype(np.float64) - z.max(axis=-1, keepdims=True))  # the best's is 1
        z[p < min_p] = -np.inf

    def softmax():
        logp = z.astype(np.float64) - z.max(axis=-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(axis=-1, keepdims=True))
        return np.exp(logp), logp

    def entropy(p, logp):
        return -(p * np.where(p > 0, logp, 0.0)).sum(axis=-1, keepdims=True)

    if typical_p < 1:
        p, logp = softmax()
        key = np.abs(-logp - entropy(p, logp))
        order = np.argsort(key, axis=-1, kind="stable")
        cum = np.cumsum(np.take_along_axis(p, order, axis=-1), axis=-1)
        last = np.minimum((cum < typical_p).sum(axis=-1, keepdims=True), V - 1)
        cut = np.take_along_axis(np.take_along_axis(key, order, axis=-1), last, axis=-1)
        drop = np.take_along_axis(key, order, axis=-1) > cut
        drop[:, 0] = False
        np.put_along_axis(z, order, np.where(drop, -np.inf, np.take_along_axis(z, order, axis=-1)), axis=-1)
    for cutoff, eta in ((epsilon_cutoff, False), (eta_cutoff, True)):
        if cutoff > 0:
            p, logp = softmax()
            floor = np.minimum(cutoff, np.sqrt(cutoff) * np.exp(-entropy(p, logp))) if eta else cutoff
            z[(p < floor) & (z < z.max(axis=-1, keepdims=True))] = -np.inf
    return z


def _torch():
    """The torch module where it is installed, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _like(a: np.ndarray, like):
    """a as the kind of array like is: a torch tensor on like's device, or
    numpy."""
    if _is_torch_tensor(like):
        import torch

        return torch.from_numpy(a).to(like.device)
    return a


# Falcon-Mamba checkpoints load through the same class (model_type
# "falcon_mamba" in their config), and so do scripts written against
# transformers' AutoModelForCausalLM: the loader reads the model type from
# the config and refuses any that is not Mamba-1.
FalconMambaForCausalLM = MambaForCausalLM
AutoModelForCausalLM = MambaForCausalLM
# Likewise the backbone, for scripts that load through AutoModel.
FalconMambaModel = MambaModel
AutoModel = MambaModel
