"""Training throughput of the 340m hybrid built from fla's layers in PyTorch, beside `linac train`.

The model mirrors what `linac train SPEC --schedule R:1 --preset 340m` builds (DESIGN.md section 5):
token embedding, blocks of [R linear-attention layers, 1 full-attention layer] over 24 layers, each
block pre-norm (RMSNorm) mixer + pre-norm SwiGLU MLP (fla's GatedMLP), a final RMSNorm and an untied
LM head. The linear mixers are fla's own layers (fla.layers.GatedDeltaNet / GatedLinearAttention,
configured like specs/gated_deltanet.yaml and specs/gla.yaml); full attention is SDPA with RoPE, as
linac's is (fla's Attention layer needs flash-attn and transformers, which the GPU machine lacks).

One training step = bf16 autocast forward, fp32 cross-entropy, backward, clip to 1.0, AdamW
(0.9, 0.95, wd 0.1). --kernels linac runs the same model with fla's chunk kernels swapped for
linac's (bench/fla_swap.py): from the same --seed both runs see the same initialisation and tokens,
so their losses should agree within bf16 noise. Prints one JSON line: parameters, tokens/s (median over timed steps after
warm-up), the losses seen, and MFU by bench/mfu.py's formula, the one used for linac's rows.
Run on the GPU machine with fla's wheels unpacked on PYTHONPATH; never a dependency of linac.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mfu import model_flops_per_token, mfu  # noqa: E402

ROPE_THETA = 10000.0
INIT_STD = 0.02  # fla's _init_weights for embeddings and the LM head


def rope(x):
    """Rotary embedding over the last dim of x [B, T, H, D] (half-split layout, as linac's)."""
    T, D = x.shape[1], x.shape[-1]
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, D, 2, device=x.device, dtype=torch.float32) / D))
    ang = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * inv[None, :]  # [T, D/2]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):  # x [B, T, hidden]
        B, T, _ = x.shape
        q = rope(self.q_proj(x).view(B, T, self.heads, self.head_dim))
        k = rope(self.k_proj(x).view(B, T, self.heads, self.head_dim))
        v = self.v_proj(x).view(B, T, self.heads, self.head_dim)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))


def fla_layer_module(module):
    """fla.layers.<module> without running fla/layers/__init__.py, which imports every layer,
    some of them needing transformers (absent on the GPU machine; the two used here do not)."""
    import importlib
    import types
    if "fla.layers" not in sys.modules:
        import fla
        pkg = types.ModuleType("fla.layers")
        pkg.__path__ = [os.path.join(os.path.dirname(fla.__file__), "layers")]
        sys.modules["fla.layers"] = pkg
    return importlib.import_module(f"fla.layers.{module}")


def fla_layer(module, name):
    return getattr(fla_layer_module(module), name)


def linear_mixer(variant, hidden):
    if variant == "gated_deltanet":  # specs/gated_deltanet.yaml: 4 heads, head_dim 256, expand_v 2
        GatedDeltaNet = fla_layer("gated_deltanet", "GatedDeltaNet")
        return GatedDeltaNet(hidden_size=hidden, num_heads=4, head_dim=hidden // 4, expand_v=2.0,
                             mode="chunk", use_gate=True, use_short_conv=True, conv_size=4)
    if variant == "gla":  # specs/gla.yaml: 4 heads, expand_k 0.5, expand_v 1, low-rank 16 gate
        GatedLinearAttention = fla_layer("gla", "GatedLinearAttention")
        return GatedLinearAttention(mode="chunk", hidden_size=hidden, expand_k=0.5, expand_v=1.0, num_heads=4,
                                    use_short_conv=False, use_output_gate=True, gate_fn="swish",
                                    gate_low_rank_dim=16)
    raise SystemExit(f"unknown variant {variant!r} (gated_deltanet or gla)")


class Block(nn.Module):
    def __init__(self, variant, hidden, attn_heads, attention):
        super().__init__()
        from fla.modules import GatedMLP, RMSNorm
        self.attn_norm = RMSNorm(hidden)
        self.mixer = Attention(hidden, attn_heads) if attention else linear_mixer(variant, hidden)
        self.mlp_norm = RMSNorm(hidden)
        self.mlp = GatedMLP(hidden_size=hidden, hidden_ratio=4, hidden_act="swish")

    def forward(self, x):
        m = self.mixer(self.attn_norm(x))
        if isinstance(m, tuple):  # fla layers return (o, attentions, past_key_values)
            m = m[0]
        x = x + m
        return x + self.mlp(self.mlp_norm(x))


class HybridLM(nn.Module):
    def __init__(self, variant, ratio, layers, hidden, attn_heads, vocab):
        super().__init__()
        from fla.modules import RMSNorm
        self.attention = [(i + 1) % (ratio + 1) == 0 for i in range(layers)]  # r:1 blocks
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(variant, hidden, attn_heads, a) for a in self.attention)
        self.norm = RMSNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        nn.init.normal_(self.embed.weight, std=INIT_STD)
        nn.init.normal_(self.head.weight, std=INIT_STD)

    def hidden(self, tokens):  # tokens [B, T] -> the LM head's input [B, T, hidden]
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x)
        return self.norm(x)

    def forward(self, tokens):  # tokens [B, T] -> logits [B, T, vocab]
        return self.head(self.hidden(tokens))


def draw_tokens(kind, batch, length, vocab, device):
    """One step's tokens [batch, length]. "random": uniform ids (throughput does not depend on the
    text). "zipf-copy": Zipf-distributed ids (exponent 1.1) whose second half repeats the first, so
    the loss falls as the model learns the unigram and then the copy (which needs the mixers): a
    curve that separates two backends, where uniform ids give a flat ln(vocab)."""
    if kind == "random":
        return torch.randint(0, vocab, (batch, length), device=device)
    probs = torch.arange(1, vocab + 1, device=device, dtype=torch.float64).pow(-1.1)
    half = (length + 1) // 2
    first = torch.multinomial(probs.expand(batch, vocab), half, replacement=True)
    return torch.cat([first, first], dim=1)[:, :length]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variant", default="gated_deltanet")
    p.add_argument("--ratio", type=int, default=3)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--attn-heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=256, help="256 = linac's byte tokenizer")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--warmup", type=int, default=3, help="untimed steps (Triton compiles, autotuning)")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--kernels", choices=("fla", "linac"), default="fla",
                   help="linac: fla's layers with their chunk kernels swapped for linac's (bench/fla_swap.py; "
                        "linac's Python package on PYTHONPATH)")
    p.add_argument("--seed", type=int, default=0, help="the model's initialisation and the token draws")
    p.add_argument("--loss", choices=("fused", "plain"), default="fused",
                   help="fused: fla's FusedLinearCrossEntropyLoss (the LM head and the loss in chunks, as fla's "
                        "models train; linac's step fuses them too); plain: the logits, then F.cross_entropy")
    p.add_argument("--data", choices=("random", "zipf-copy"), default="random",
                   help="the tokens (draw_tokens): random for timing, zipf-copy for comparing loss curves")
    p.add_argument("--bypass-hopper-guard", action="store_true",
                   help="run fla's gated backward although it refuses this Triton on Hopper (wrong "
                        "results there, bench/fla_guard.py): for timing only")
    args = p.parse_args()
    if args.bypass_hopper_guard:
        from fla_guard import bypass_hopper_guard
        bypass_hopper_guard()

    if args.kernels == "linac":
        from fla_swap import swap
        swap(fla_layer_module)
    torch.manual_seed(args.seed)
    dev = "cuda"
    model = HybridLM(args.variant, args.ratio, args.layers, args.hidden, args.attn_heads, args.vocab).to(dev)
    params = sum(p.numel() for p in model.parameters())
    print(f"fla-layers {args.variant}: {params:,} parameters on {dev}", file=sys.stderr, flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    if args.loss == "fused":
        from fla.modules import FusedLinearCrossEntropyLoss
        criterion = FusedLinearCrossEntropyLoss()
    row = dict(backend="fla-layers" if args.kernels == "fla" else "fla-layers+linac-kernels", variant=args.variant, schedule=f"{args.ratio}:1", layers=args.layers,
               hidden=args.hidden, vocab=args.vocab, batch=args.batch, seq_len=args.seq_len, params=params,
               data=args.data, loss=args.loss)
    if args.bypass_hopper_guard and args.variant == "gated_deltanet":  # GLA's layer never hits the guard
        row["guard_bypassed"] = True
    tokens_per_step = args.batch * args.seq_len
    times, losses = [], []
    try:
        for step in range(args.warmup + args.steps):
            tokens = draw_tokens(args.data, args.batch, args.seq_len + 1, args.vocab, dev)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                if args.loss == "fused":
                    loss = criterion(model.hidden(tokens[:, :-1]), tokens[:, 1:], model.head.weight)
                else:
                    logits = model(tokens[:, :-1])
            if args.loss == "plain":
                loss = F.cross_entropy(logits.float().view(-1, args.vocab), tokens[:, 1:].reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            losses.append(round(loss.item(), 4))
            if step >= args.warmup:
                times.append(dt)
            print(f"fla-layers {args.variant} step {step}: {dt * 1e3:.1f} ms, loss {loss.item():.3f}",
                  file=sys.stderr, flush=True)
    except Exception as e:  # reported, never hidden
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    if times:
        med = statistics.median(times)
        row["step_ms"] = med * 1e3
        row["tokens_per_s"] = tokens_per_step / med
        n_attn = sum(model.attention)
        row["mfu"] = mfu(model_flops_per_token(params, args.vocab, args.hidden, n_attn, args.seq_len),
                         row["tokens_per_s"])
        row["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
    row["losses"] = losses
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
