"""Model.from_state_dict (weights in memory, as a PyTorch state_dict holds
them) and from_pretrained on a folder of pickled pytorch_model.bin files:
the same model as from_pretrained on the safetensors checkpoint, bit for
bit, and clear errors for bad input."""

import json
import os
import shutil

import numpy as np
import pytest

import mambago
import mambago.hf
from conftest import case_dir, read_safetensors

CASES = ["base", "untied", "falcon", "conv3_bias", "dstate8", "original", "mambamodel", "features", "bf16"]


def prompt(model, rng):
    """Fresh random input for model, as prefill's keyword arguments."""
    if model.config.input_dim:
        return {"features": rng.standard_normal((2, 9, model.config.input_dim)).astype(np.float32)}
    return {"input_ids": rng.integers(0, model.config.vocab_size, size=(2, 9))}


def assert_same_model(got, want, device="cpu"):
    """got and want give the same bits for every output kind and the state."""
    kw = prompt(want, np.random.default_rng())
    for output in ("all", "last", "mean"):
        assert np.array_equal(got.prefill(**kw, output=output), want.prefill(**kw, output=output)), output
    sg, sw = got.new_state(2), want.new_state(2)
    got.prefill(**kw, state=sg)
    want.prefill(**kw, state=sw)
    assert np.array_equal(sg.ssm_state(0), sw.ssm_state(0))


class HFLikeConfig:
    """Stands in for a transformers config: anything with to_dict()."""

    def __init__(self, d):
        self.d = d

    def to_dict(self):
        return dict(self.d)


@pytest.mark.parametrize("name", CASES)
def test_from_state_dict_matches_from_pretrained(name):
    want = mambago.Model.from_pretrained(case_dir(name), device="cpu")
    sd = read_safetensors(os.path.join(case_dir(name), "model.safetensors"))
    with open(os.path.join(case_dir(name), "config.json")) as f:
        config = json.load(f)
    for cfg in (config, HFLikeConfig(config), case_dir(name), os.path.join(case_dir(name), "config.json")):
        got = mambago.Model.from_state_dict(sd, cfg, device="cpu")
        assert got.config == want.config
        assert_same_model(got, want)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["base", "untied", "features", "bf16"])
def test_16bit_cpu_loads_agree(name, dtype):
    """The CPU engine's 16-bit storage, reached three ways: a checkpoint
    folder (read straight into 16 bits), a state dict (its arrays rounded
    by the engine, then overwritten by the caller) and, for the bf16
    checkpoint, dtype "auto": the same bits everywhere."""
    want = mambago.Model.from_pretrained(case_dir(name), device="cpu", dtype=dtype)
    assert want.dtype == dtype
    sd = read_safetensors(os.path.join(case_dir(name), "model.safetensors"))
    got = mambago.Model.from_state_dict(sd, case_dir(name), device="cpu", dtype=dtype)
    for v in sd.values():
        v[...] = np.nan
    assert got.dtype == dtype
    assert_same_model(got, want)
    if name == "bf16" and dtype == "bfloat16":
        assert_same_model(mambago.Model.from_pretrained(case_dir(name), device="cpu", dtype="auto"), want)


def test_from_state_dict_copies_and_widens():
    """float16 and float64 arrays load as their float32 values; changing the
    arrays after the load does not reach the model."""
    sd = read_safetensors(os.path.join(case_dir("base"), "model.safetensors"))
    half = {k: v.astype(np.float16) for k, v in sd.items()}
    up = {k: v.astype(np.float32) for k, v in half.items()}
    a = mambago.Model.from_state_dict(half, case_dir("base"), device="cpu")
    b = mambago.Model.from_state_dict(up, case_dir("base"), device="cpu")
    assert_same_model(a, b)
    wide = {k: v.astype(np.float64) for k, v in sd.items()}
    c = mambago.Model.from_state_dict(wide, case_dir("base"), device="cpu")
    want = mambago.Model.from_pretrained(case_dir("base"), device="cpu")
    for v in wide.values():
        v[...] = 0
    assert_same_model(c, want)


def test_config_of_numpy_scalars():
    """A config dict whose numbers are numpy scalars (dimensions computed with
    numpy) loads as the plain numbers would."""
    sd = read_safetensors(os.path.join(case_dir("base"), "model.safetensors"))
    with open(os.path.join(case_dir("base"), "config.json")) as f:
        config = json.load(f)
    npcfg = dict(config, hidden_size=np.int64(64), num_hidden_layers=np.int32(2),
                 layer_norm_epsilon=np.float32(config["layer_norm_epsilon"]), use_bias=np.bool_(False))
    got = mambago.Model.from_state_dict(sd, npcfg, device="cpu")
    want = mambago.Model.from_pretrained(case_dir("base"), device="cpu")
    assert got.config.hidden_size == 64 and got.config.num_hidden_layers == 2
    assert_same_model(got, want)


def test_from_state_dict_bad_input(tmp_path):
    sd = read_safetensors(os.path.join(case_dir("base"), "model.safetensors"))
    cfg = case_dir("base")
    with pytest.raises(TypeError, match="state_dict must be a mapping"):
        mambago.Model.from_state_dict(list(sd.items()), cfg)
    with pytest.raises(TypeError, match="keys must be str"):
        mambago.Model.from_state_dict({1: np.zeros(3, np.float32)}, cfg)
    bad = dict(sd, **{"backbone.norm_f.weight": np.arange(64)})
    with pytest.raises(TypeError, match=r"state_dict\['backbone.norm_f.weight'\]: want a float tensor"):
        mambago.Model.from_state_dict(bad, cfg)
    with pytest.raises(TypeError, match="config must be"):
        mambago.Model.from_state_dict(sd, 42)
    with pytest.raises(ValueError, match="config: cannot read"):
        mambago.Model.from_state_dict(sd, str(tmp_path))
    missing = {k: v for k, v in sd.items() if k != "backbone.layers.1.mixer.D"}
    with pytest.raises(ValueError, match=r"state dict does not match its config.*missing backbone.layers.1.mixer.D"):
        mambago.Model.from_state_dict(missing, cfg)
    extra = dict(sd, **{"backbone.layers.0.mixer.extra": np.zeros(2, np.float32)})
    with pytest.raises(ValueError, match="unexpected tensor backbone.layers.0.mixer.extra"):
        mambago.Model.from_state_dict(extra, cfg)
    shaped = dict(sd, **{"backbone.norm_f.weight": np.zeros((8, 8), np.float32)})
    with pytest.raises(ValueError, match=r"backbone.norm_f.weight has shape \[8 8\], want \[64\]"):
        mambago.Model.from_state_dict(shaped, cfg)
    with open(os.path.join(cfg, "config.json")) as f:
        config = json.load(f)
    with pytest.raises(ValueError, match="config"):
        mambago.Model.from_state_dict(sd, dict(config, hidden_size=0))
    with pytest.raises(ValueError, match='hidden_size = "64", want an integer'):
        mambago.Model.from_state_dict(sd, dict(config, hidden_size="64"))
    with pytest.raises(ValueError, match="hidden_size = 64.5, want an integer"):
        mambago.Model.from_state_dict(sd, dict(config, hidden_size=64.5))
    with pytest.raises(ValueError, match='use_bias = "no", want true or false'):
        mambago.Model.from_state_dict(sd, dict(config, use_bias="no"))
    with pytest.raises(ValueError, match="device"):
        mambago.Model.from_state_dict(sd, cfg, device="tpu")


def pickled_copy(tmp_path, name, torch):
    """A folder with the case's config.json and its weights as torch.save's
    pytorch_model.bin, no safetensors."""
    d = tmp_path / name
    d.mkdir()
    shutil.copy(os.path.join(case_dir(name), "config.json"), d)
    sd = read_safetensors(os.path.join(case_dir(name), "model.safetensors"))
    torch.save({k: torch.from_numpy(v) for k, v in sd.items()}, d / "pytorch_model.bin")
    return str(d)


def test_pickled_checkpoint_without_torch_says_so(tmp_path, monkeypatch):
    """A pytorch_model.bin folder needs torch; without it, a ValueError that
    says so and how to convert (torch hidden where it is installed)."""
    import builtins

    d = tmp_path / "bin"
    d.mkdir()
    shutil.copy(os.path.join(case_dir("base"), "config.json"), d)
    (d / "pytorch_model.bin").write_bytes(b"not read")
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("no torch here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(ValueError, match="needs torch to read.*safe_serialization=True"):
        mambago.Model.from_pretrained(str(d), device="cpu")


def test_pickled_checkpoint_loads_through_torch(tmp_path):
    """One pytorch_model.bin, and the same weights in two shards named by
    pytorch_model.bin.index.json."""
    torch = pytest.importorskip("torch", reason="torch is not installed: pytorch_model.bin needs it")
    want = mambago.Model.from_pretrained(case_dir("base"), device="cpu")
    got = mambago.Model.from_pretrained(pickled_copy(tmp_path, "base", torch), device="cpu")
    assert_same_model(got, want)
    d = tmp_path / "shards"
    d.mkdir()
    shutil.copy(os.path.join(case_dir("base"), "config.json"), d)
    sd = read_safetensors(os.path.join(case_dir("base"), "model.safetensors"))
    names = sorted(sd)
    weight_map = {}
    for i, part in enumerate((names[::2], names[1::2])):
        shard = f"pytorch_model-0000{i + 1}-of-00002.bin"
        torch.save({k: torch.from_numpy(sd[k]) for k in part}, d / shard)
        weight_map.update({k: shard for k in part})
    (d / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert_same_model(mambago.Model.from_pretrained(str(d), device="cpu"), want)


def test_torch_tensors_of_every_float_dtype():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    sd = read_safetensors(os.path.join(case_dir("base"), "model.safetensors"))
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        tensors = {k: torch.from_numpy(v).to(dt) for k, v in sd.items()}
        up = {k: t.float().numpy() for k, t in tensors.items()}
        got = mambago.Model.from_state_dict(tensors, case_dir("base"), device="cpu")
        assert_same_model(got, mambago.Model.from_state_dict(up, case_dir("base"), device="cpu"))
    with pytest.raises(TypeError, match="want a float tensor"):
        mambago.Model.from_state_dict(dict(sd, **{"backbone.norm_f.weight": torch.arange(64)}), case_dir("base"))
    # A meta-device model's state dict (accelerate's init_empty_weights) has no values to copy.
    with pytest.raises(ValueError, match="norm_f.weight.*meta device"):
        mambago.Model.from_state_dict(dict(sd, **{"backbone.norm_f.weight": torch.empty(64, device="meta")}),
                                      case_dir("base"))


def test_16bit_torch_state_dict_on_the_cpu():
    """bf16 and f16 torch tensors (and numpy float16 arrays) go to Go as
    their bits: with the model's dtype the CPU engine keeps them as given,
    the same bits as the checkpoint folder loaded in that dtype; with
    another dtype they are converted, as from the folder; changing the
    tensors after the call does not reach the model."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    sd = read_safetensors(os.path.join(case_dir("bf16"), "model.safetensors"))
    for dt, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
        tensors = {k: torch.from_numpy(v).to(dt) for k, v in sd.items()}
        up = {k: t.float().numpy() for k, t in tensors.items()}
        for want_dtype in ("float32", "bfloat16", "float16"):
            got = mambago.Model.from_state_dict(tensors, case_dir("bf16"), device="cpu", dtype=want_dtype)
            want = mambago.Model.from_state_dict(up, case_dir("bf16"), device="cpu", dtype=want_dtype)
            assert got.dtype == want_dtype
            assert_same_model(got, want)
        kept = mambago.Model.from_state_dict(tensors, case_dir("bf16"), device="cpu", dtype=name)
        ref = mambago.Model.from_state_dict(up, case_dir("bf16"), device="cpu", dtype=name)
        for t in tensors.values():
            t.fill_(float("nan"))
        assert_same_model(kept, ref)
    want = mambago.Model.from_pretrained(case_dir("bf16"), device="cpu", dtype="bfloat16")
    bf16 = {k: torch.from_numpy(v).to(torch.bfloat16) for k, v in sd.items()}
    assert_same_model(mambago.Model.from_state_dict(bf16, case_dir("bf16"), device="cpu", dtype="auto"), want)
    half = {k: v.astype(np.float16) for k, v in sd.items()}
    assert_same_model(mambago.Model.from_state_dict(half, case_dir("bf16"), device="cpu", dtype="float16"),
                      mambago.Model.from_state_dict({k: v.astype(np.float32) for k, v in half.items()},
                                                    case_dir("bf16"), device="cpu", dtype="float16"))


def test_transformers_model_hands_over():
    """A transformers model's own state_dict() and config, as a PyTorch
    script holds them."""
    pytest.importorskip("torch", reason="torch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    hf = transformers.AutoModelForCausalLM.from_pretrained(case_dir("base"))
    got = mambago.Model.from_state_dict(hf.state_dict(), hf.config, device="cpu")
    assert_same_model(got, mambago.Model.from_pretrained(case_dir("base"), device="cpu"))


@pytest.mark.skipif(not mambago.cuda_is_available(), reason=f"no GPU: {mambago.cuda_unavailable_reason()}")
@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_from_state_dict_on_the_gpu(dtype):
    sd = read_safetensors(os.path.join(case_dir("base"), "model.safetensors"))
    got = mambago.Model.from_state_dict(sd, case_dir("base"), device="cuda", dtype=dtype)
    want = mambago.Model.from_pretrained(case_dir("base"), device="cuda", dtype=dtype)
    assert got.device == "cuda" and got.dtype == want.dtype
    assert_same_model(got, want)


def test_tied_head_is_not_copied():
    """A state_dict that lists the embeddings again as lm_head.weight (one
    array, as tied PyTorch models do) loads as a tied model; a distinct
    lm_head array loads as the model's own head."""
    from mambago.model import _tied_head

    sd = read_safetensors(os.path.join(case_dir("base"), "model.safetensors"))
    tied = dict(sd, **{"lm_head.weight": sd["backbone.embeddings.weight"]})
    assert _tied_head(tied)
    own = dict(sd, **{"lm_head.weight": sd["backbone.embeddings.weight"].copy()})
    assert not _tied_head(own) and not _tied_head(sd)
    want = mambago.Model.from_pretrained(case_dir("base"), device="cpu")
    for d in (tied, own):
        got = mambago.Model.from_state_dict(d, case_dir("base"), device="cpu")
        h = got.prefill(np.arange(6).reshape(2, 3), output="all")
        assert np.array_equal(got.logits(h), want.logits(h))


def test_hub_ids_download_through_huggingface_hub(monkeypatch, tmp_path):
    """A Hub id that is not a folder here goes to huggingface_hub's
    snapshot_download (a stand-in module here: no network), safetensors
    first, then pickled weights; without huggingface_hub, or when the
    download fails, a ValueError that says so. A path that is not an id
    stays a plain error. transformers' download options (revision,
    cache_dir, token, local_files_only, force_download) reach the download,
    from Model.from_pretrained and mambago.hf's alike; a folder here
    ignores them."""
    import sys
    import types

    calls = []
    pickled_only = tmp_path / "pickled"  # a snapshot with no safetensors
    pickled_only.mkdir()

    def snapshot_download(repo_id, allow_patterns, **options):
        calls.append((repo_id, allow_patterns, options))
        if repo_id == "org/missing":
            raise OSError("404 Client Error: Repository Not Found")
        return str(pickled_only) if len(calls) == 1 else case_dir("base")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    got = mambago.Model.from_pretrained("org/mamba-tiny", device="cpu")
    assert_same_model(got, mambago.Model.from_pretrained(case_dir("base"), device="cpu"))
    assert [c[0] for c in calls] == ["org/mamba-tiny"] * 2
    assert "*.safetensors" in calls[0][1] and "pytorch_model*.bin" in calls[1][1]
    assert calls[0][2] == {} == calls[1][2]
    options = dict(revision="v1.2", cache_dir=str(tmp_path / "cache"), token="hf_x", local_files_only=True,
                   force_download=True)
    for load in (mambago.Model.from_pretrained, mambago.hf.MambaForCausalLM.from_pretrained):
        calls.clear()
        load("org/mamba-tiny", device="cpu", **options)
        assert [c[2] for c in calls] == [options] * 2, load
    calls.clear()
    mambago.hf.MambaModel.from_pretrained("org/mamba-tiny", device="cpu", revision="main", trust_remote_code=True,
                                          low_cpu_mem_usage=True)
    assert calls[-1][2] == {"revision": "main"}
    calls.clear()
    mambago.Model.from_pretrained(case_dir("base"), device="cpu", revision="v1.2", local_files_only=True)
    assert calls == []
    with pytest.raises(ValueError, match="downloading it from the Hugging Face Hub failed: 404"):
        mambago.Model.from_pretrained("org/missing", device="cpu")
    with pytest.raises(ValueError, match="is not a checkpoint folder$"):
        mambago.Model.from_pretrained(str(tmp_path / "no" / "such" / "folder"), device="cpu")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    with pytest.raises(ValueError, match="install huggingface_hub"):
        mambago.Model.from_pretrained("org/mamba-tiny", device="cpu")


def test_ml_dtypes_bfloat16_arrays():
    """numpy arrays of ml_dtypes' bfloat16 (as JAX and others hand out)
    load as their float32 values."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    sd = read_safetensors(os.path.join(case_dir("base"), "model.safetensors"))
    bf = {k: v.astype(ml_dtypes.bfloat16) for k, v in sd.items()}
    up = {k: v.astype(np.float32) for k, v in bf.items()}
    assert_same_model(mambago.Model.from_state_dict(bf, case_dir("base"), device="cpu"),
                      mambago.Model.from_state_dict(up, case_dir("base"), device="cpu"))
