#!/usr/bin/env python3
"""`linac import` / `linac export` on the command line, over fla_reference.py's checkpoints.

For each case: import into a run directory, continue a prompt from it with `linac generate`,
export it back and check that the exported folder holds fla's tensors (same names, same fp32
values, read with the safetensors package) and the config fields that decide the model; a bf16
export stores bf16. A config the spec cannot express (GLA with a feature map) is refused with
exit code 2, naming the field, and leaves no run directory behind.

usage: fla_cli_test.py LINAC REFERENCE_DIR WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file

MODEL_FIELDS = ['model_type', 'hidden_size', 'num_hidden_layers', 'vocab_size', 'tie_word_embeddings', 'num_heads',
                'expand_k', 'expand_v', 'head_dim', 'use_short_conv', 'conv_size', 'use_gate', 'norm_eps']


def run(*args, expect=0):
    p = subprocess.run(list(args), capture_output=True, text=True, errors='replace')
    if p.returncode != expect:
        sys.exit(f'{" ".join(args)}: exit {p.returncode}, expected {expect}\n{p.stdout}\n{p.stderr}')
    return p


def main():
    linac, ref, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cases = sorted(d for d in os.listdir(ref) if os.path.exists(os.path.join(ref, d, 'config.json')))
    assert cases, f'no checkpoints under {ref}'
    for case in cases:
        src, rundir, hf = os.path.join(ref, case), os.path.join(work, 'run_' + case), os.path.join(work, 'hf_' + case)
        run(linac, 'import', src, '--out', rundir, '--tokenizer', 'byte')
        out = run(linac, 'generate', rundir, '--prompt', 'ab', '--max-new', '4', '--device', 'cpu').stdout
        assert 'decode:' in out, out
        run(linac, 'export', rundir, '--out', hf)
        want, got = load_file(os.path.join(src, 'model.safetensors')), load_file(os.path.join(hf, 'model.safetensors'))
        assert sorted(want) == sorted(got), f'{case}: tensor names differ: {sorted(set(want) ^ set(got))}'
        for name, t in want.items():
            assert got[name].dtype == torch.float32 and torch.equal(got[name], t), f'{case}: {name} differs'
        with open(os.path.join(src, 'config.json')) as f:
            c0 = json.load(f)
        with open(os.path.join(hf, 'config.json')) as f:
            c1 = json.load(f)
        for key in MODEL_FIELDS:
            if key in c0:
                assert c1.get(key) == c0[key], f'{case}: config {key} {c1.get(key)!r}, fla wrote {c0[key]!r}'
        assert (c1.get('attn') or {}).get('layers') == (c0.get('attn') or {}).get('layers'), f'{case}: attn layers'
        run(linac, 'export', rundir, '--out', hf + '_bf16', '--dtype', 'bf16')
        bf = load_file(os.path.join(hf + '_bf16', 'model.safetensors'))
        assert all(t.dtype == torch.bfloat16 for t in bf.values()), f'{case}: bf16 export'
        print(f'{case}: import, generate, export ok ({len(want)} tensors)')

    bad = os.path.join(work, 'gla_feature_map')
    shutil.copytree(os.path.join(ref, 'gla_pure'), bad)
    with open(os.path.join(bad, 'config.json')) as f:
        c = json.load(f)
    c['feature_map'] = 'relu'
    with open(os.path.join(bad, 'config.json'), 'w') as f:
        json.dump(c, f)
    err = run(linac, 'import', bad, '--out', os.path.join(work, 'run_bad'), '--tokenizer', 'byte', expect=2).stderr
    assert "'feature_map'" in err, err
    assert not os.path.exists(os.path.join(work, 'run_bad')), 'a refused import left a run directory'
    print('refusal ok:', err.strip())


if __name__ == '__main__':
    main()
