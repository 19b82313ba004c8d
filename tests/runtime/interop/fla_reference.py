#!/usr/bin/env python3
"""Tiny fla checkpoints with random weights and an independent float64 reference of their logits.

Writes, under OUT, one folder per case in fla's exact save_pretrained layout (config.json +
model.safetensors with fla's parameter names) plus reference.safetensors {tokens, logits}, which
linac_interop_tests imports and compares (runtime/interop/fla_checkpoint.h). The forward below is a
plain-PyTorch reimplementation of fla 0.6.0's models (fla/models/*/modeling_*.py, fla/layers/*.py)
with the naive recurrences of fla/ops/*/naive.py; it does not import fla or linac.

usage: fla_reference.py OUT
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

EPS = 1e-6          # config norm_eps (fla's default)
ROPE_THETA = 10000.0
T = 24              # tokens per sequence
B = 2


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def l2norm(x):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + EPS)


def short_conv(x, w):
    """fla's ShortConvolution (no bias) then SiLU: x [B, T, C], w [C, 1, W]."""
    W = w.shape[-1]
    y = F.conv1d(x.transpose(1, 2), w, padding=W - 1, groups=x.shape[-1])[..., : x.shape[1]]
    return F.silu(y.transpose(1, 2))


def heads(x, d):
    return x.reshape(*x.shape[:-1], -1, d)


def naive_gla(q, k, v, gk):
    """fla/ops/gla/naive.py: h = h * exp(gk) + k v^T, o = (q * K^-0.5) h; [B, T, H, *]."""
    Bn, Tn, H, K = q.shape
    h = q.new_zeros(Bn, H, K, v.shape[-1])
    o = []
    for t in range(Tn):
        h = h * gk[:, t].exp()[..., None] + k[:, t][..., None] * v[:, t][..., None, :]
        o.append(((q[:, t] * K ** -0.5)[..., None] * h).sum(-2))
    return torch.stack(o, 1)


def naive_gated_delta(q, k, v, beta, g):
    """fla/ops/gated_delta_rule/naive.py; g [B, T, H] log decay, beta [B, T, H]."""
    Bn, Tn, H, K = q.shape
    h = q.new_zeros(Bn, H, K, v.shape[-1])
    o = []
    for t in range(Tn):
        h = h * g[:, t].exp()[..., None, None]
        vt = (v[:, t] - (h * k[:, t][..., None]).sum(-2)) * beta[:, t][..., None]
        h = h + k[:, t][..., None] * vt[..., None, :]
        o.append(torch.einsum('bhd,bhdm->bhm', q[:, t] * K ** -0.5, h))
    return torch.stack(o, 1)


def rotary(x):
    """fla's RotaryEmbedding (non-interleaved, rotate halves) at positions 0..T-1; x [B, T, H, D]."""
    D = x.shape[-1]
    inv = ROPE_THETA ** (-torch.arange(0, D, 2, dtype=torch.float64, device=x.device) / D)
    f = torch.outer(torch.arange(x.shape[1], dtype=torch.float64, device=x.device), inv)
    cos, sin = f.cos()[None, :, None], f.sin()[None, :, None]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def attention(p, x, num_heads):
    D = x.shape[-1] // num_heads
    q, k, v = (heads(x @ p[n + '_proj.weight'].T, D) for n in 'qkv')
    q, k = rotary(q), rotary(k)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    return o.transpose(1, 2).flatten(2) @ p['o_proj.weight'].T


def gla(p, x, c):
    H = c['num_heads']
    dk, dv = int(c['hidden_size'] * c['expand_k']) // H, int(c['hidden_size'] * c['expand_v']) // H
    q, k, v = (heads(x @ p[n + '_proj.weight'].T, d) for n, d in (('q', dk), ('k', dk), ('v', dv)))
    gk = (x @ p['gk_proj.0.weight'].T) @ p['gk_proj.1.weight'].T + p['gk_proj.1.bias']
    gk = F.logsigmoid(heads(gk, dk)) / 16  # gate_logit_normalizer
    o = naive_gla(q, k, v, gk)
    g = heads(x @ p['g_proj.weight'].T, dv)
    o = rms_norm(o, p['g_norm_swish_gate.weight']) * F.silu(g)
    return o.flatten(2) @ p['o_proj.weight'].T


def delta_inputs(p, x, dk, dv):
    q, k, v = (heads(short_conv(x @ p[n + '_proj.weight'].T, p[n + '_conv1d.weight']), d)
               for n, d in (('q', dk), ('k', dk), ('v', dv)))
    return l2norm(q), l2norm(k), v


def gated_deltanet(p, x, c):
    dk = c['head_dim']
    dv = int(dk * c['expand_v'])
    q, k, v = delta_inputs(p, x, dk, dv)
    g = -p['A_log'].exp() * F.softplus(x @ p['a_proj.weight'].T + p['dt_bias'])  # [B, T, H]
    beta = torch.sigmoid(x @ p['b_proj.weight'].T)
    o = naive_gated_delta(q, k, v, beta, g)
    o = rms_norm(o, p['o_norm.weight']) * F.silu(heads(x @ p['g_proj.weight'].T, dv))
    return o.flatten(2) @ p['o_proj.weight'].T


def delta_net(p, x, c):
    H = c['num_heads']
    dk, dv = int(c['hidden_size'] * c['expand_k']) // H, int(c['hidden_size'] * c['expand_v']) // H
    q, k, v = delta_inputs(p, x, dk, dv)
    beta = torch.sigmoid(x @ p['b_proj.weight'].T)
    o = naive_gated_delta(q, k, v, beta, torch.zeros_like(beta))
    return rms_norm(o, p['o_norm.weight']).flatten(2) @ p['o_proj.weight'].T


def retnet(p, x, c):
    """fla's MultiScaleRetention: rotary q, k; per-head decay log(1 - 2^(-5 - h)); swish-gated norm."""
    H = c['num_heads']
    dk, dv = int(c['hidden_size'] * c['expand_k']) // H, int(c['hidden_size'] * c['expand_v']) // H
    q, k, v = (heads(x @ p[n + '_proj.weight'].T, d) for n, d in (('q', dk), ('k', dk), ('v', dv)))
    q, k = rotary(q), rotary(k)
    decay = torch.log(1 - 2.0 ** (-5.0 - torch.arange(H, dtype=torch.float64)))  # [H]
    o = naive_gla(q, k, v, decay[None, None, :, None].expand_as(q))
    o = rms_norm(o, p['g_norm_swish_gate.weight']) * F.silu(heads(x @ p['g_proj.weight'].T, dv))
    return o.flatten(2) @ p['o_proj.weight'].T


MIXERS = {'gla': gla, 'gated_deltanet': gated_deltanet, 'delta_net': delta_net, 'retnet': retnet}


def forward(c, w, tokens):
    def sub(prefix):
        return {n[len(prefix):]: t for n, t in w.items() if n.startswith(prefix)}
    attn_layers = set(c['attn']['layers']) if c.get('attn') else set()
    x = w['model.embeddings.weight'][tokens]
    for i in range(c['num_hidden_layers']):
        lw = sub(f'model.layers.{i}.')
        n = rms_norm(x, lw['attn_norm.weight'])
        mix = attention(sub(f'model.layers.{i}.attn.'), n, c['attn']['num_heads']) if i in attn_layers \
            else MIXERS[c['model_type']](sub(f'model.layers.{i}.attn.'), n, c)
        x = x + mix
        n = rms_norm(x, lw['mlp_norm.weight'])
        x = x + (F.silu(n @ lw['mlp.gate_proj.weight'].T) * (n @ lw['mlp.up_proj.weight'].T)) @ lw['mlp.down_proj.weight'].T
    x = rms_norm(x, w['model.norm.weight'])
    head = w['model.embeddings.weight'] if c['tie_word_embeddings'] else w['lm_head.weight']
    return x @ head.T


def common(model_type, arch, hidden, layers, tie, attn):
    return {'architectures': [arch], 'model_type': model_type, 'hidden_size': hidden, 'num_hidden_layers': layers,
            'vocab_size': 256, 'hidden_ratio': 4, 'intermediate_size': None, 'hidden_act': 'swish',
            'norm_eps': EPS, 'max_position_embeddings': 512, 'tie_word_embeddings': tie, 'attn': attn,
            'fuse_norm': True, 'fuse_swiglu': True, 'fuse_cross_entropy': True, 'initializer_range': 0.02,
            'bos_token_id': 1, 'eos_token_id': 2, 'use_cache': True}


# The cases: fla configs whose layers linac's specs describe at hidden 64 (specs/<variant>.yaml).
CASES = {
    'gla_pure': dict(common('gla', 'GLAForCausalLM', 64, 2, False, None), num_heads=4, expand_k=0.5, expand_v=1.0,
                     use_short_conv=False, conv_size=4, use_output_gate=True, feature_map=None, clamp_min=None,
                     elementwise_affine=True, attn_mode='chunk'),
    'gated_deltanet_hybrid': dict(common('gated_deltanet', 'GatedDeltaNetForCausalLM', 64, 4, True,
                                         {'layers': [1, 3], 'num_heads': 4, 'num_kv_heads': 4, 'qkv_bias': False,
                                          'window_size': None, 'rope_theta': ROPE_THETA}),
                                  num_heads=4, head_dim=16, expand_v=2, use_gate=True, use_short_conv=True,
                                  conv_size=4, allow_neg_eigval=False, output_gate_activation='swish',
                                  attn_mode='chunk'),
    'delta_net_pure': dict(common('delta_net', 'DeltaNetForCausalLM', 64, 2, False, None), num_heads=8,
                           expand_k=1.0, expand_v=1.0, use_gate=False, use_short_conv=True, conv_size=4, use_beta=True,
                           use_output_norm=True, qk_norm='l2', qk_activation='silu', allow_neg_eigval=False,
                           attn_mode='chunk'),
    'retnet_pure': dict(common('retnet', 'RetNetForCausalLM', 64, 2, False, None), num_heads=4, expand_k=1.0,
                        expand_v=2.0, use_short_conv=False, conv_size=4, use_output_gate=True, feature_map=None,
                        elementwise_affine=True, attn_mode='chunk'),
}


def shapes(c):
    """fla's parameter names and shapes for config c."""
    h, L, V = c['hidden_size'], c['num_hidden_layers'], c['vocab_size']
    inter = 256 * ((int(h * c['hidden_ratio'] * 2 / 3) + 255) // 256)
    out = {'model.embeddings.weight': (V, h), 'model.norm.weight': (h,)}
    if not c['tie_word_embeddings']:
        out['lm_head.weight'] = (V, h)
    attn_layers = set(c['attn']['layers']) if c['attn'] else set()
    for i in range(L):
        p = f'model.layers.{i}.'
        out.update({p + 'attn_norm.weight': (h,), p + 'mlp_norm.weight': (h,), p + 'mlp.gate_proj.weight': (inter, h),
                    p + 'mlp.up_proj.weight': (inter, h), p + 'mlp.down_proj.weight': (h, inter)})
        a = p + 'attn.'
        if i in attn_layers:
            out.update({a + n + '_proj.weight': (h, h) for n in 'qkvo'})
            continue
        t = c['model_type']
        if t in ('gla', 'retnet'):
            H = c['num_heads']
            K, Vd = int(h * c['expand_k']), int(h * c['expand_v'])
            out.update({a + 'q_proj.weight': (K, h), a + 'k_proj.weight': (K, h), a + 'v_proj.weight': (Vd, h),
                        a + 'g_proj.weight': (Vd, h), a + 'g_norm_swish_gate.weight': (Vd // H,),
                        a + 'o_proj.weight': (h, Vd)})
            if t == 'gla':
                out.update({a + 'gk_proj.0.weight': (16, h), a + 'gk_proj.1.weight': (K, 16), a + 'gk_proj.1.bias': (K,)})
        else:
            H = c['num_heads']
            if t == 'gated_deltanet':
                dk = c['head_dim']
                dv = int(dk * c['expand_v'])
            else:
                dk, dv = int(h * c['expand_k']) // H, int(h * c['expand_v']) // H
            K, Vd, W = H * dk, H * dv, c['conv_size']
            out.update({a + 'q_proj.weight': (K, h), a + 'k_proj.weight': (K, h), a + 'v_proj.weight': (Vd, h),
                        a + 'b_proj.weight': (H, h), a + 'q_conv1d.weight': (K, 1, W), a + 'k_conv1d.weight': (K, 1, W),
                        a + 'v_conv1d.weight': (Vd, 1, W), a + 'o_norm.weight': (dv,), a + 'o_proj.weight': (h, Vd)})
            if t == 'gated_deltanet':
                out.update({a + 'a_proj.weight': (H, h), a + 'g_proj.weight': (Vd, h), a + 'A_log': (H,),
                            a + 'dt_bias': (H,)})
    return out


def random_weights(c, gen):
    w = {}
    for name, shape in shapes(c).items():
        if name.endswith('A_log'):
            t = torch.log(torch.empty(shape, dtype=torch.float64).uniform_(1, 16, generator=gen))
        elif name.endswith('norm.weight') or 'norm_swish_gate' in name:
            t = 1 + 0.1 * torch.randn(shape, dtype=torch.float64, generator=gen)
        elif len(shape) == 1:  # biases, dt_bias
            t = 0.5 * torch.randn(shape, dtype=torch.float64, generator=gen)
        else:  # projections and conv kernels: unit-variance outputs, so the nonlinearities matter
            t = torch.randn(shape, dtype=torch.float64, generator=gen) / math.sqrt(shape[-1])
            if 'embeddings' in name or 'lm_head' in name:
                t = t * 0.5
        # fp32 is what the checkpoint stores; the reference runs on exactly those values in float64.
        w[name] = t.to(torch.float32).to(torch.float64)
    return w


def main():
    from safetensors.torch import save_file  # here: fla_real_reference.py imports this module without it
    out = sys.argv[1]
    gen = torch.Generator().manual_seed(0)
    for case, c in CASES.items():
        d = os.path.join(out, case)
        os.makedirs(d, exist_ok=True)
        w = random_weights(c, gen)
        tokens = torch.randint(0, c['vocab_size'], (B, T), generator=gen)
        with torch.no_grad():
            logits = forward(c, w, tokens)
        with open(os.path.join(d, 'config.json'), 'w') as f:
            json.dump(c, f, indent=2)
        save_file({n: t.to(torch.float32).contiguous() for n, t in w.items()}, os.path.join(d, 'model.safetensors'),
                  metadata={'format': 'pt'})
        save_file({'tokens': tokens.to(torch.float64), 'logits': logits.contiguous()},
                  os.path.join(d, 'reference.safetensors'))
        print(f'{case}: {len(w)} tensors, logits {tuple(logits.shape)}, |logits| max {logits.abs().max():.3f}')


if __name__ == '__main__':
    main()
