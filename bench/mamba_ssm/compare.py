"""bf16 prefill and decode: mambago against mamba_ssm's kernels, on the same
GPU, with the same random weights and inputs, in one run.

    PYTHONPATH=<target of build.sh>:$PYTHONPATH python3 bench/mamba_ssm/compare.py --out r.json

mamba_ssm's prefill is the path Hugging Face's fast path runs at inference,
layer by layer:
- their fused add + RMSNorm (Triton), with the residual in f32;
- in_proj as a torch bf16 GEMM;
- causal_conv1d_fn;
- x_proj and dt_proj in torch;
- selective_scan_fn, with softplus, D and the z gate fused;
- out_proj.

Their decode step is Mamba.step: causal_conv1d_update and
selective_state_update with the GEMMs in torch, the whole step (all layers
and the LM head) captured in one CUDA graph, as generate(cg=True) runs it.
Its state is bf16, as allocate_inference_cache makes it.

mambago runs with dtype="bfloat16" through prefill_ptr (output "last"), its
whole prefill replayed as one cached CUDA graph per shape, and, for decode,
a captured step graph replayed with step_ptr, at each of --decode-batches
(1 and 8 sequences unless given). Both sides run on
torch's current stream and are timed with CUDA events: for prefill, the
median of repeats; for decode, the mean of 200 replays in a row.
"""

import argparse
import datetime
import importlib.util
import json
import os
import sys
import types

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import random_checkpoint  # noqa: E402
from cuda_timing import cuda_time, gemm_rate  # noqa: E402
from roofline import design_ceiling, gemm_flops_per_token  # noqa: E402


def import_kernels():
    """mamba_ssm's kernels, without running mamba_ssm/__init__.py (it imports
    Mamba2 and Mamba3, which need packages this benchmark does not)."""
    spec = importlib.util.find_spec("mamba_ssm")
    if spec is None:
        sys.exit("mamba_ssm is not importable: build it with bench/mamba_ssm/build.sh and put it on PYTHONPATH")
    pkg = types.ModuleType("mamba_ssm")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["mamba_ssm"] = pkg
    from causal_conv1d import causal_conv1d_fn, causal_conv1d_update
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    from mamba_ssm.ops.triton.layer_norm import layer_norm_fn
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update

    return types.SimpleNamespace(conv=causal_conv1d_fn, conv_update=causal_conv1d_update, scan=selective_scan_fn,
                                 norm=layer_norm_fn, scan_update=selective_state_update)


class Reference:
    """A Mamba-1 model on mamba_ssm's kernels, bf16 weights, from a checkpoint folder."""

    def __init__(self, path, k):
        from safetensors.torch import load_file

        self.k = k
        cfg = json.load(open(os.path.join(path, "config.json")))
        w = {n.removeprefix("backbone."): t for n, t in load_file(os.path.join(path, "model.safetensors")).items()}
        bf = lambda t: t.to("cuda", torch.bfloat16).contiguous()  # noqa: E731
        self.eps = cfg["layer_norm_epsilon"]
        self.R, self.N = cfg["time_step_rank"], cfg["state_size"]
        self.emb = bf(w["embeddings.weight"])
        self.norm_f = bf(w["norm_f.weight"])
        self.layers = []
        for i in range(cfg["num_hidden_layers"]):
            p = f"layers.{i}."
            self.layers.append({
                "norm": bf(w[p + "norm.weight"]),
                "in": bf(w[p + "mixer.in_proj.weight"]),
                "conv_w": bf(w[p + "mixer.conv1d.weight"][:, 0, :]),
                "conv_b": bf(w[p + "mixer.conv1d.bias"]),
                "x": bf(w[p + "mixer.x_proj.weight"]),
                "dt": bf(w[p + "mixer.dt_proj.weight"]),
                "dt_b": w[p + "mixer.dt_proj.bias"].to("cuda", torch.float32),
                "A": -torch.exp(w[p + "mixer.A_log"].to("cuda", torch.float32)),
                "D": w[p + "mixer.D"].to("cuda", torch.float32),
                "out": bf(w[p + "mixer.out_proj.weight"]),
            })

    def _norm(self, hidden, weight, residual, prenorm):
        return self.k.norm(hidden, weight, None, residual=residual, prenorm=prenorm, residual_in_fp32=True,
                           eps=self.eps, is_rms_norm=True)

    @torch.no_grad()
    def prefill(self, ids):
        """The last position's hidden state after norm_f, [B, d]."""
        hidden, residual = F.embedding(ids, self.emb), None
        for g in self.layers:
            hidden, residual = self._norm(hidden, g["norm"], residual, True)
            xz = F.linear(hidden, g["in"]).transpose(1, 2)  # [B, 2E, T]
            x, z = xz.chunk(2, dim=1)
            x = self.k.conv(x, g["conv_w"], g["conv_b"], activation="silu")
            dbl = F.linear(x.transpose(1, 2), g["x"])  # [B, T, R + 2N]
            dt, Bm, Cm = torch.split(dbl, [self.R, self.N, self.N], dim=-1)
            dt = F.linear(dt, g["dt"]).transpose(1, 2)  # [B, E, T]
            Bm, Cm = Bm.transpose(1, 2).contiguous(), Cm.transpose(1, 2).contiguous()
            y = self.k.scan(x, dt, g["A"], Bm, Cm, g["D"], z=z, delta_bias=g["dt_b"], delta_softplus=True)
            hidden = F.linear(y.transpose(1, 2), g["out"])
        return self._norm(hidden, self.norm_f, residual, False)[:, -1]

    def new_cache(self, B):
        """A zeroed decode cache for B sequences: each layer's conv window and SSM state, bf16."""
        E, K = self.layers[0]["conv_w"].shape
        return [(torch.zeros(B, E, K, device="cuda", dtype=torch.bfloat16),
                 torch.zeros(B, E, self.N, device="cuda", dtype=torch.bfloat16)) for _ in self.layers]

    @torch.no_grad()
    def step(self, ids, cache):
        """Logits [B, V] for one token per sequence, updating cache in place."""
        hidden, residual = F.embedding(ids, self.emb), None
        for g, (conv_state, ssm_state) in zip(self.layers, cache):
            hidden, residual = self._norm(hidden, g["norm"], residual, True)
            x, z = F.linear(hidden, g["in"]).chunk(2, dim=-1)
            x = self.k.conv_update(x, conv_state, g["conv_w"], g["conv_b"], "silu")
            dt, Bm, Cm = torch.split(F.linear(x, g["x"]), [self.R, self.N, self.N], dim=-1)
            dt = F.linear(dt, g["dt"])
            y = self.k.scan_update(ssm_state, x, dt, g["A"], Bm, Cm, g["D"], z=z, dt_bias=g["dt_b"], dt_softplus=True)
            hidden = F.linear(y, g["out"])
        hidden = self._norm(hidden, self.norm_f, residual, False)
        return F.linear(hidden, self.emb)


def replay_ms(fn, n=200):
    """Mean ms of n back-to-back calls, timed with CUDA events."""
    for _ in range(10):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def main():
    """Parse the arguments, time mambago and mamba_ssm on each shape and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    random_checkpoint.add_matrix_args(p)
    p.add_argument("--commit", default="unknown")
    p.add_argument("--decode-batches", type=lambda v: [int(b) for b in v.split(",")], default=[1, 8],
                   help="decode step batch sizes, comma-separated (default 1,8)")
    a = p.parse_args()
    import mambago

    k = import_kernels()
    rate = gemm_rate(torch.bfloat16)
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}: torch bf16 GEMM {rate / 1e12:.0f} TFLOP/s", flush=True)
    rows, decode = [], []

    def save():
        """Writes what has been measured so far, so that a run cut short keeps its rows."""
        result = {"bench": "bf16 prefill and decode: mambago vs mamba_ssm kernels, random weights",
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "commit": a.commit, "gpu": gpu, "bf16_gemm_flops": rate, "torch": torch.__version__,
                  "timing": f"CUDA events; prefill: median of {a.repeats} after 0.5 s of warm-up; "
                  "decode: mean of 200 graph replays", "prefill": rows, "decode": decode}
        with open(a.out, "w") as f:
            json.dump(result, f, indent=2)

    stream = torch.cuda.current_stream()
    for shape in a.shapes:
        d, L = random_checkpoint.SHAPES[shape]
        path = random_checkpoint.cached(shape)
        mg = mambago.Model.from_pretrained(path, device="cuda", dtype="bfloat16")
        mg.set_prefill_graphs(4)  # the whole prefill as one graph per shape
        ref = Reference(path, k)
        V = mg.config.vocab_size
        flops_per_token = gemm_flops_per_token(d, L)
        for B in a.batches:
            state = mg.new_state(B)
            for T in a.lengths:
                mg.reserve(B, T)
                ids = torch.randint(0, V, (B, T), device="cuda")
                out = torch.empty(B, d, device="cuda")

                def run_mg():
                    mg.prefill_ptr(ids.data_ptr(), (B, T), out_ptr=out.data_ptr(), state=state,
                                   stream=stream.cuda_stream)

                def run_ref():
                    return ref.prefill(ids)

                ms, times = cuda_time(run_mg, a.repeats, warm_seconds=0.5)
                rms, rtimes = cuda_time(run_ref, a.repeats, warm_seconds=0.5)
                state.reset()
                out.fill_(float("nan"))
                run_mg()
                want = run_ref().float()
                err = float((out - want).abs().max() / want.abs().max())
                row = {"shape": shape, "d": d, "layers": L, "B": B, "T": T,
                       "mambago_ms": ms, "mambago_tok_s": B * T / (ms / 1e3), "mambago_times_ms": times,
                       "mamba_ssm_ms": rms, "mamba_ssm_tok_s": B * T / (rms / 1e3), "mamba_ssm_times_ms": rtimes,
                       "speedup": rms / ms, "roofline_tok_s": rate / flops_per_token,
                       "roofline_fraction": B * T / (ms / 1e3) / (rate / flops_per_token),
                       "design_ceiling_tok_s": design_ceiling(d, L, rate),
                       "design_ceiling_fraction": B * T / (ms / 1e3) / design_ceiling(d, L, rate),
                       "max_rel_err_vs_mamba_ssm": err}
                rows.append(row)
                save()
                print(f"{shape} B={B} T={T}: mambago {ms:.2f} ms ({row['mambago_tok_s']:,.0f} tok/s, "
                      f"{100 * row['roofline_fraction']:.0f}% of roofline), mamba_ssm {rms:.2f} ms: "
                      f"{row['speedup']:.2f}x, last-hidden rel diff {err:.1e}", flush=True)
        # Decode, graphs on both sides, at each of --decode-batches.
        for B in a.decode_batches:
            tok = torch.randint(0, V, (B,), device="cuda")
            st = mg.new_state(B)
            graph = mg.capture_step(st)
            logits = torch.empty(B, V, device="cuda")
            ours = replay_ms(lambda: graph.step_ptr(tok.data_ptr(), logits_ptr=logits.data_ptr(),
                                                    stream=stream.cuda_stream))
            cache = ref.new_cache(B)
            side = torch.cuda.Stream()
            side.wait_stream(stream)
            with torch.cuda.stream(side):
                for _ in range(3):
                    ref.step(tok, cache)
            stream.wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                ref_logits = ref.step(tok, cache)
            theirs = replay_ms(g.replay)
            decode.append({"shape": shape, "B": B, "mambago_step_ms": ours, "mamba_ssm_step_ms": theirs,
                           "speedup": theirs / ours})
            save()
            print(f"{shape} decode step B={B} (graphs): mambago {ours * 1e3:.0f} us, mamba_ssm {theirs * 1e3:.0f} us: "
                  f"{theirs / ours:.2f}x", flush=True)
        del ref_logits, g, graph, mg, ref
        torch.cuda.empty_cache()
    save()


if __name__ == "__main__":
    main()
