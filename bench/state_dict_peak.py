"""Peak RSS of Model.from_state_dict on the CPU engine, from a transformers
model in memory: python bench/state_dict_peak.py <checkpoint dir> <dtype>
[<the transformers model's torch dtype, default float32>]."""
import resource
import sys
import time

import torch
import transformers

import mambago

torch_dtype = getattr(torch, sys.argv[3] if len(sys.argv) > 3 else "float32")
hf = transformers.MambaForCausalLM.from_pretrained(sys.argv[1], dtype=torch_dtype)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
m = mambago.Model.from_state_dict(hf.state_dict(), hf.config, device="cpu", dtype=sys.argv[2])
t1 = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{torch_dtype} -> {sys.argv[2]}: from_state_dict {t1 - t0:.2f} s; peak RSS {base:.0f} MiB with the transformers model, "
      f"{peak:.0f} MiB after ({peak - base:+.0f} MiB)")
