#!/usr/bin/env python3
"""fla-format checkpoints whose linear layers are fla's own (real fla 0.6.0, Triton kernels, CUDA).

For the H200 (label gpu): like fla_reference.py, but every linear-attention layer is the module fla
itself builds (fla.layers.GatedLinearAttention / GatedDeltaNet / DeltaNet / MultiScaleRetention, random weights), run by
fla's kernels; the model around them (embeddings, pre-norm blocks, SwiGLU MLP as fla's GatedMLP,
final norm, LM head) is assembled under fla's parameter names, and the full-attention layers of the
hybrid are SDPA with fla's rotary (fla's Attention layer needs flash-attn, and fla's model classes
need transformers; the GPU machine has neither). The state_dict is saved as model.safetensors
(fla's names, fp32) with an fla config.json, and fla's logits as reference.safetensors, for
linac_interop_tests (LINAC_FLA_REFERENCE_DIR) to import and compare.

usage: PYTHONPATH=.fla/site python3 fla_real_reference.py OUT [--dtype fp32|bf16]
"""
import argparse
import importlib
import json
import os
import struct
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fla_reference import CASES, EPS, rotary  # noqa: E402  (the same configs as the CPU test)

T, B = 100, 2  # > 64 tokens: fla's chunk kernels (DeltaNet in fp32: its fused recurrent kernel)


def fla_layer(module, name):
    """fla.layers.<module>.<name> without fla/layers/__init__.py (some layers need transformers)."""
    if "fla.layers" not in sys.modules:
        import fla
        pkg = types.ModuleType("fla.layers")
        pkg.__path__ = [os.path.join(os.path.dirname(fla.__file__), "layers")]
        sys.modules["fla.layers"] = pkg
    return getattr(importlib.import_module(f"fla.layers.{module}"), name)


def fla_mixer(c, i):
    t = c['model_type']
    if t == 'gla':
        return fla_layer('gla', 'GatedLinearAttention')(
            mode='chunk', hidden_size=c['hidden_size'], expand_k=c['expand_k'], expand_v=c['expand_v'],
            num_heads=c['num_heads'], use_short_conv=c['use_short_conv'], conv_size=c['conv_size'],
            use_output_gate=True, gate_fn='swish', norm_eps=c['norm_eps'], fuse_norm=True, layer_idx=i)
    if t == 'gated_deltanet':
        return fla_layer('gated_deltanet', 'GatedDeltaNet')(
            hidden_size=c['hidden_size'], expand_v=c['expand_v'], head_dim=c['head_dim'], num_heads=c['num_heads'],
            mode='chunk', use_gate=True, use_short_conv=c['use_short_conv'], conv_size=c['conv_size'],
            norm_eps=c['norm_eps'], layer_idx=i)
    if t == 'delta_net':
        return fla_layer('delta_net', 'DeltaNet')(
            mode='chunk', hidden_size=c['hidden_size'], expand_k=c['expand_k'], expand_v=c['expand_v'],
            num_heads=c['num_heads'], use_gate=False, use_beta=True, use_short_conv=c['use_short_conv'],
            conv_size=c['conv_size'], qk_norm='l2', qk_activation='silu', norm_eps=c['norm_eps'], layer_idx=i)
    if t == 'retnet':
        return fla_layer('multiscale_retention', 'MultiScaleRetention')(
            mode='chunk', hidden_size=c['hidden_size'], expand_k=c['expand_k'], expand_v=c['expand_v'],
            num_heads=c['num_heads'], use_output_gate=True, gate_fn='swish', norm_eps=c['norm_eps'], fuse_norm=True,
            layer_idx=i)
    raise ValueError(t)


class Attention(nn.Module):
    """fla's Attention (layers/attn.py) parameters and maths, with SDPA for flash-attn."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        for n in 'qkvo':
            setattr(self, n + '_proj', nn.Linear(hidden, hidden, bias=False))

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = (getattr(self, n + '_proj')(x).view(b, t, self.heads, -1) for n in 'qkv')
        q, k = rotary(q.double()).to(x.dtype), rotary(k.double()).to(x.dtype)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, h))


class MLP(nn.Module):
    """fla's GatedMLP (swish): down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c, i):
        super().__init__()
        h = c['hidden_size']
        attn = c.get('attn') or {}
        self.attn_norm = nn.RMSNorm(h, eps=EPS)
        self.attn = Attention(h, attn['num_heads']) if i in attn.get('layers', []) else fla_mixer(c, i)
        self.mlp_norm = nn.RMSNorm(h, eps=EPS)
        self.mlp = MLP(h, 256 * ((int(h * c['hidden_ratio'] * 2 / 3) + 255) // 256))

    def forward(self, x):
        a = self.attn(self.attn_norm(x))
        x = x + (a[0] if isinstance(a, tuple) else a)
        return x + self.mlp(self.mlp_norm(x))


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = nn.Embedding(c['vocab_size'], c['hidden_size'])
        self.layers = nn.ModuleList(Block(c, i) for i in range(c['num_hidden_layers']))
        self.norm = nn.RMSNorm(c['hidden_size'], eps=EPS)


class ForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = Model(c)
        self.tie = c['tie_word_embeddings']
        if not self.tie:
            self.lm_head = nn.Linear(c['hidden_size'], c['vocab_size'], bias=False)

    def forward(self, tokens):
        x = self.model.embeddings(tokens)
        for layer in self.model.layers:
            x = layer(x)
        x = self.model.norm(x)
        return x @ (self.model.embeddings.weight if self.tie else self.lm_head.weight).T


def save_safetensors(path, tensors):
    """The safetensors format (fp32 / f64 only), so the script needs no package the GPU machine lacks."""
    names = {torch.float32: 'F32', torch.float64: 'F64'}
    header, blobs, offset = {'__metadata__': {'format': 'pt'}}, [], 0
    for name, t in tensors.items():
        data = bytes(t.detach().cpu().contiguous().clone().untyped_storage())  # no numpy needed
        header[name] = {'dtype': names[t.dtype], 'shape': list(t.shape), 'data_offsets': [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b' ' * (-len(text) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(text)) + text + b''.join(blobs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('out')
    ap.add_argument('--dtype', default='fp32', choices=['fp32', 'bf16'])
    args = ap.parse_args()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.dtype == 'bf16' else torch.float32
    for case, c in CASES.items():
        model = ForCausalLM(c)
        with torch.no_grad():  # larger than fla's 0.02 init, so every nonlinearity matters
            for name, p in model.named_parameters():
                if name.endswith('A_log') or name.endswith('dt_bias'):
                    continue
                if p.dim() == 1:
                    p.copy_(1 + 0.1 * torch.randn_like(p))
                else:
                    p.normal_(0, p.shape[-1] ** -0.5)
        d = os.path.join(args.out, case)
        os.makedirs(d, exist_ok=True)
        state = {n: t.float() for n, t in model.state_dict().items()}
        save_safetensors(os.path.join(d, 'model.safetensors'), state)
        with open(os.path.join(d, 'config.json'), 'w') as f:
            json.dump(c, f, indent=2)
        tokens = torch.randint(0, c['vocab_size'], (B, T))
        if dtype == torch.float32:  # fla's chunk delta rule refuses fp32 (an assert): its fused
            for m in model.modules():  # recurrent kernel, fp32 token by token, is fla's fp32 path
                if type(m).__name__ == 'DeltaNet':
                    m.mode = 'fused_recurrent'
        model = model.cuda().to(dtype).eval()
        with torch.no_grad():
            logits = model(tokens.cuda()).double().cpu()
        save_safetensors(os.path.join(d, 'reference.safetensors'), {'tokens': tokens.double(), 'logits': logits})
        print(f'{case}: fla {c["model_type"]} ({args.dtype}), {len(state)} tensors, |logits| max {logits.abs().max():.3f}')


if __name__ == '__main__':
    main()
