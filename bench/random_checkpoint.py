"""Write a random-weight Mamba-1 checkpoint of a given shape, as HF's
save_pretrained would (config.json + model.safetensors, F32), with numpy only.

    python3 bench/random_checkpoint.py OUT_DIR --d 768 --layers 24

The weights follow Mamba's initialisation closely enough for realistic
activations: linear layers N(0, 0.02), A_log = log(1..N), D = 1, and a dt_proj
bias that puts softplus(dt) in [1e-3, 1e-1].
"""

import argparse
import json
import math
import os
import struct

import numpy as np

SHAPES = {"130m": (768, 24), "370m": (1024, 48), "1.4b": (2048, 48), "2.8b": (2560, 64)}


def add_matrix_args(p):
    """Adds the benchmark matrix to an argparse parser: --shapes (names in
    SHAPES), --lengths and --batches (comma-separated, parsed to lists) and
    --repeats."""
    ints = lambda v: [int(x) for x in v.split(",")]  # noqa: E731
    p.add_argument("--shapes", default=",".join(SHAPES), type=lambda v: v.split(","))
    p.add_argument("--lengths", default="128,512,2048,8192", type=ints)
    p.add_argument("--batches", default="1,8", type=ints)
    p.add_argument("--repeats", type=int, default=10)


def write(out_dir, d, layers, vocab=50280, state=16, conv=4, expand=2, seed=0):
    """Write a random Mamba checkpoint of width d and layers layers (HF layout, safetensors) to out_dir."""
    rng = np.random.default_rng(seed)
    E, R = expand * d, math.ceil(d / 16)
    tensors = {"backbone.embeddings.weight": rng.standard_normal((vocab, d), np.float32) * 0.02,
               "backbone.norm_f.weight": np.ones(d, np.float32)}
    for i in range(layers):
        p = f"backbone.layers.{i}."
        dt = np.exp(rng.uniform(math.log(1e-3), math.log(1e-1), E)).astype(np.float32)
        tensors.update({
            p + "norm.weight": np.ones(d, np.float32),
            p + "mixer.in_proj.weight": rng.standard_normal((2 * E, d), np.float32) * 0.02,
            p + "mixer.conv1d.weight": rng.standard_normal((E, 1, conv), np.float32) * 0.2,
            p + "mixer.conv1d.bias": rng.standard_normal(E, np.float32) * 0.02,
            p + "mixer.x_proj.weight": rng.standard_normal((R + 2 * state, E), np.float32) * 0.02,
            p + "mixer.dt_proj.weight": rng.standard_normal((E, R), np.float32) * R ** -0.5,
            p + "mixer.dt_proj.bias": (dt + np.log(-np.expm1(-dt))).astype(np.float32),
            p + "mixer.A_log": np.log(np.tile(np.arange(1, state + 1, dtype=np.float32), (E, 1))),
            p + "mixer.D": np.ones(E, np.float32),
            p + "mixer.out_proj.weight": rng.standard_normal((d, E), np.float32) * 0.02 / math.sqrt(layers),
        })
    os.makedirs(out_dir, exist_ok=True)
    config = {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": d,
              "num_hidden_layers": layers, "intermediate_size": E, "state_size": state, "expand": expand,
              "conv_kernel": conv, "time_step_rank": R, "vocab_size": vocab, "use_bias": False,
              "use_conv_bias": True, "layer_norm_epsilon": 1e-5, "residual_in_fp32": True,
              "tie_word_embeddings": True, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a, np.float32).tobytes())
    return out_dir


def cached(shape):
    """The directory of a random checkpoint of a SHAPES shape, written to
    /tmp/mambago-bench-<shape> the first time (seed 0, so every benchmark
    of a machine runs the same weights)."""
    d, layers = SHAPES[shape]
    path = f"/tmp/mambago-bench-{shape}"
    if not os.path.exists(os.path.join(path, "model.safetensors")):
        write(path, d, layers)
    return path


def main():
    """Write the checkpoint the arguments describe."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--shape", choices=sorted(SHAPES), help="a named shape (sets --d and --layers)")
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--vocab", type=int, default=50280)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    d, layers = SHAPES[a.shape] if a.shape else (a.d, a.layers)
    write(a.out_dir, d, layers, vocab=a.vocab, seed=a.seed)
    print(f"wrote {a.out_dir}: d={d} layers={layers}")


if __name__ == "__main__":
    main()
