"""mambago: fast Mamba-1 inference for models trained in PyTorch.

Load a Hugging Face checkpoint folder and run it from numpy::

    import mambago
    model = mambago.Model.from_pretrained("path/to/checkpoint")
    hidden = model.prefill(input_ids, output="all")   # [B, T, d]
    tokens = model.generate(input_ids, max_new_tokens=32)

Weights already in PyTorch load with Model.from_state_dict, and
mambago.hf.MambaForCausalLM stands in for transformers' class in inference
scripts.

The engine is Go (github.com/mambago/mambago), called through a gopy
extension; Python never runs in the hot loop.
"""

from .model import (BeamSearchOutput, Config, Graph, Model, State, cuda_is_available, cuda_unavailable_reason, get_num_threads,
                    set_num_threads)

__all__ = ["BeamSearchOutput", "Config", "Graph", "Model", "State", "cuda_is_available", "cuda_unavailable_reason", "get_num_threads",
           "set_num_threads", "__version__"]


def _version():
    from ._native import bindings, call

    return call(bindings.Version)


__version__ = _version()
