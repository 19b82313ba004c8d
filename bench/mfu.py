"""Model FLOPs utilisation, one formula for linac's and fla's training rows.

FLOPs per token (training = forward + backward = 3x forward):
  6 * N_matmul                       every weight used in a matmul (all parameters except the input
                                     embedding, whose lookup is free); norms, convs and gates are
                                     counted too, a rounding error at 340m
  + 6 * L_attn * T * hidden          causal attention scores and values: 2 * 2 * T * d per token
                                     per layer forward (QK^T and PV), halved by causality, times 3
The linear-attention recurrences' own FLOPs (chunk products, O(T * C * d + T * dk * dv) per layer)
are not counted, as in fla/flame's and Megatron's MFU: MFU is useful work per second over peak,
and the same formula is applied to both implementations.
Peak: H200 SXM dense bf16, 989 TFLOP/s (NVIDIA's datasheet; DESIGN.md section 8 measured 687
TFLOP/s for a large bf16 matmul).
"""
import json
import sys

H200_BF16_PEAK_FLOPS = 989e12


def model_flops_per_token(params, vocab, hidden, n_attention_layers, seq_len):
    matmul_params = params - vocab * hidden  # the input embedding is a lookup
    return 6.0 * matmul_params + 6.0 * n_attention_layers * seq_len * hidden


def mfu(flops_per_token, tokens_per_s, peak=H200_BF16_PEAK_FLOPS):
    return flops_per_token * tokens_per_s / peak


def main():
    """`python3 mfu.py PARAMS VOCAB HIDDEN N_ATTN SEQ_LEN TOKENS_PER_S` prints the MFU as JSON."""
    if len(sys.argv) != 7:
        raise SystemExit("usage: mfu.py PARAMS VOCAB HIDDEN N_ATTN SEQ_LEN TOKENS_PER_S")
    params, vocab, hidden, n_attn, seq_len = map(int, sys.argv[1:6])
    tps = float(sys.argv[6])
    f = model_flops_per_token(params, vocab, hidden, n_attn, seq_len)
    print(json.dumps(dict(flops_per_token=f, tokens_per_s=tps, mfu=mfu(f, tps))))


if __name__ == "__main__":
    main()
