"""Roofline measures of a bf16 prefill, per token (design.md §9)."""


def gemm_flops_per_token(d, layers):
    """The GEMMs' FLOPs per token: in_proj, x_proj, dt_proj and out_proj."""
    return 2 * layers * (6.25 * d * d + 64 * d)


def design_ceiling(d, layers, gemm_flops):
    """Tokens/s ceiling by design.md §9: the GEMM FLOPs at gemm_flops, plus
    one exp per scan update (2·d·16 a layer) at 4.2e12/s, plus about 45·d
    bytes of activations a layer (the middle of §9's 30–60) at 4.3 TB/s,
    taken one after the other."""
    return 1 / (gemm_flops_per_token(d, layers) / gemm_flops + layers * 2 * d * 16 / 4.2e12
                + 45 * d * layers / 4.3e12)
