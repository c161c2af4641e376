"""A FalconMamba-7B-shaped model (d=4096, 64 layers, d_inner 8192, dt_rank 256,
V=65,024, untied head; random weights) in bfloat16 on the CPU engine:
the 14.5 GB checkpoint does not fit a 24 GB machine as float32 (29 GB).

    python bench/big_cpu.py write DIR    # the bf16 checkpoint, a tensor at a time
    python bench/big_cpu.py run DIR OUT.json [float32|bfloat16|auto]

run loads DIR on the CPU engine (dtype auto keeps the checkpoint's bf16),
then times a prefill of 64 positions and 4 greedy tokens, and reports the
load's time and the process's peak RSS.
"""

import json
import math
import os
import resource
import struct
import sys
import time

import numpy as np

D, LAYERS, E, N, K, R, V = 4096, 64, 8192, 16, 4, 256, 65024


def specs():
    """(name, shape, std) of every tensor; std None marks the special ones."""
    out = [("backbone.embeddings.weight", (V, D), 0.02), ("backbone.norm_f.weight", (D,), None),
           ("lm_head.weight", (V, D), 0.02)]
    for i in range(LAYERS):
        p = f"backbone.layers.{i}."
        out += [(p + "norm.weight", (D,), None), (p + "mixer.in_proj.weight", (2 * E, D), 0.02),
                (p + "mixer.conv1d.weight", (E, 1, K), 0.2), (p + "mixer.conv1d.bias", (E,), 0.02),
                (p + "mixer.x_proj.weight", (R + 2 * N, E), 0.02), (p + "mixer.dt_proj.weight", (E, R), R ** -0.5),
                (p + "mixer.dt_proj.bias", (E,), None), (p + "mixer.A_log", (E, N), None), (p + "mixer.D", (E,), None),
                (p + "mixer.out_proj.weight", (D, E), 0.02 / math.sqrt(LAYERS))]
    return out


def values(name, shape, std, rng):
    """The float32 values of one tensor."""
    if std is not None:
        return rng.standard_normal(shape, np.float32) * np.float32(std)
    if name.endswith("A_log"):
        return np.log(np.tile(np.arange(1, N + 1, dtype=np.float32), (E, 1)))
    if name.endswith("dt_proj.bias"):
        dt = np.exp(rng.uniform(math.log(1e-3), math.log(1e-1), E)).astype(np.float32)
        return (dt + np.log(-np.expm1(-dt))).astype(np.float32)
    return np.ones(shape, np.float32)


def write(out_dir):
    """Write the bf16 checkpoint, generating and writing one tensor at a time."""
    os.makedirs(out_dir, exist_ok=True)
    config = {"architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba", "hidden_size": D,
              "num_hidden_layers": LAYERS, "intermediate_size": E, "state_size": N, "expand": 2, "conv_kernel": K,
              "time_step_rank": R, "vocab_size": V, "use_bias": False, "use_conv_bias": True,
              "layer_norm_epsilon": 1e-5, "mixer_rms_eps": 1e-6, "residual_in_fp32": True,
              "tie_word_embeddings": False, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 11,
              "torch_dtype": "bfloat16"}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in specs():
        n = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    rng = np.random.default_rng(0)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for i, (name, shape, std) in enumerate(specs()):
            v = values(name, shape, std, rng)
            f.write((v.view(np.uint32) >> 16).astype("<u2").tobytes())  # bf16 by truncation: random data
            if i % 50 == 0:
                print(f"wrote {name}", flush=True)
    print(f"{offset / 1e9:.1f} GB in {out_dir}")


def run(out_dir, out_json, dtype):
    """Load, prefill and decode on the CPU engine; write the timings."""
    import mambago

    t0 = time.perf_counter()
    m = mambago.Model.from_pretrained(out_dir, device="cpu", dtype=dtype)
    load = time.perf_counter() - t0
    rss_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"{dtype} ({m.dtype}): loaded in {load:.1f} s; peak RSS {rss_load:.1f} GiB", flush=True)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, V, size=(1, 64))
    state = m.new_state(1)
    t0 = time.perf_counter()
    m.prefill(ids, state=state)
    prefill = time.perf_counter() - t0
    print(f"prefill of 64 positions: {prefill:.2f} s", flush=True)
    steps, tok = [], ids[:, -1]
    for _ in range(4):
        t0 = time.perf_counter()
        logits = m.step(tok, state)
        steps.append(time.perf_counter() - t0)
        tok = logits.argmax(-1)
    print(f"steps: {', '.join(f'{s:.2f}' for s in steps)} s", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    result = {"dtype": m.dtype, "load_s": load, "peak_rss_after_load_gib": rss_load, "prefill_64_s": prefill,
              "step_s": steps, "peak_rss_gib": peak, "cpus": os.cpu_count()}
    with open(out_json, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        run(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "auto")
