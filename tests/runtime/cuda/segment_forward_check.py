#!/usr/bin/env python3
"""The additive rule's segmented Hopper forward (runtime/kernels/cuda/hopper/segment_scan.cuh,
forward_split.cuh runSegmentedStages, chunk_output.cuh kSegmented), transcribed in numpy with the
kernels' index arithmetic, against the float64 token sweep, before any device run.

The recurrence, per sequence and head (decay none / fixed / scalar, inclusive readout):
  S_t = exp(g_t) S_{t-1} + k_t v_t^T,  o_t = scale S_t^T q_t,  S_0 = h0, ht = S_T.
A padded batch [B, T] is cut into segments of L tokens (whole chunks), the pseudo-sequences
n' = b S + j of a packed batch over the same token rows (segmentBoundsKernel); each runs the
state pass from zero state (S_c^local per chunk slot coff + c, coff = bos / C + n', and its end
state E); segmentDecayKernel writes g_c (log-decay from the segment's start to chunk c's start)
per slot and G_j per segment; segmentStartKernel scans S_start(b S) = h0_b, S_start(n' + 1) =
exp(G_j) S_start(n') + E_n', ht_b = the value after the last; the output stage forms, per slot,
  O = scale e^{b_t} Q (S_c^local + exp(g_c) S_start) + (scale (Q K^T) . e^{b_t - b_s}, s <= t) V.
The fused form (runSegmentedFusedStages, segment_correct.cuh) forms O_local = scale e^{b_t} Q
S_c^local + A V in the fused stage and adds scale e^{g_c + b_t} Q S_start afterwards, skipping the
first segment of each sequence when there is no h0.
Checks, in exact arithmetic (rel-RMS below 1e-10 against the sweep, o and ht), over padded
batches whose T is and is not a multiple of the chunk and segment counts 2 .. chunks, for each
decay class, with and without h0: the slot map, the scan and the correction are the algebra.
Usage: python3 tests/runtime/cuda/segment_forward_check.py [--quick]
Exit 0 when every check passes.
"""
import argparse
import sys

import numpy as np

C = 64
EXACT = 1e-10


def sweep(q, k, v, g, h0, scale):
    """Token sweep of one (sequence, head): o [T, dv], ht [dk, dv]."""
    S = h0.copy()
    o = np.zeros((q.shape[0], v.shape[1]))
    for t in range(q.shape[0]):
        S = np.exp(g[t]) * S + np.outer(k[t], v[t])
        o[t] = scale * S.T @ q[t]
    return o, S


def segmented(q, k, v, g, h0, scale, B, T, H, segments, fused, with_h0):
    """The kernels' stages over the packed token rows [B T, H, d]: o [B T, H, dv], ht [B, H, dk, dv]."""
    chunks = (T + C - 1) // C
    per = (chunks + segments - 1) // segments          # runSegmentedStages
    segments = (chunks + per - 1) // per               # none empty
    L = per * C
    N = B * segments
    cu = [b * T + min(j * L, T) for b in range(B) for j in range(segments)] + [B * T]  # segmentBoundsKernel
    tokens = B * T
    slots = (tokens + C - 1) // C + N
    dk, dv = q.shape[2], v.shape[2]
    local = np.full((slots, H, dk, dv), np.nan)
    ends = np.zeros((N, H, dk, dv))
    chunk_start = np.full((slots, H), np.nan)
    total = np.zeros((N, H))
    for n in range(N):  # the state pass (from zero) and segmentDecayKernel, per pseudo-sequence
        bos, ln = cu[n], cu[n + 1] - cu[n]
        coff = bos // C + n
        for h in range(H):
            S = np.zeros((dk, dv))
            run = 0.0
            for c in range((ln + C - 1) // C):
                local[coff + c, h] = S
                chunk_start[coff + c, h] = run
                rows = min(C, ln - c * C)
                for t in range(bos + c * C, bos + c * C + rows):
                    S = np.exp(g[t, h]) * S + np.outer(k[t, h], v[t, h])
                    run += g[t, h]
            ends[n, h] = S
            total[n, h] = run
    starts = np.zeros((N, H, dk, dv))
    ht = np.zeros((B, H, dk, dv))
    for b in range(B):  # segmentStartKernel
        for h in range(H):
            run = h0[b, h].copy()
            for j in range(segments):
                n = b * segments + j
                starts[n, h] = run
                run = np.exp(total[n, h]) * run + ends[n, h]
            ht[b, h] = run
    o = np.full((tokens, H, dv), np.nan)
    for slot in range(slots):  # chunkOutputKernel<kSegmented>, slotToChunk over the pseudo-sequences
        n = max(i for i in range(N) if cu[i] // C + i <= slot)
        bos, ln = cu[n], cu[n + 1] - cu[n]
        chunk = slot - (bos // C + n)
        if chunk < 0 or chunk * C >= ln:
            continue
        rows = min(C, ln - chunk * C)
        t0 = bos + chunk * C
        for h in range(H):
            gt = g[t0:t0 + rows, h]
            bcum = np.cumsum(gt)
            Q, K, V = q[t0:t0 + rows, h], k[t0:t0 + rows, h], v[t0:t0 + rows, h]
            A = scale * (Q @ K.T) * np.exp(np.minimum(bcum[:, None] - bcum[None, :], 0.0))
            A = np.tril(A)
            if not fused:
                state = local[slot, h] + np.exp(chunk_start[slot, h]) * starts[n, h]
                o[t0:t0 + rows, h] = scale * np.exp(bcum)[:, None] * (Q @ state) + A @ V
                continue
            o[t0:t0 + rows, h] = scale * np.exp(bcum)[:, None] * (Q @ local[slot, h]) + A @ V  # the fused stage
            if n % segments != 0 or with_h0:  # segmentCorrectKernel
                f = scale * np.exp(chunk_start[slot, h] + bcum)
                o[t0:t0 + rows, h] += f[:, None] * (Q @ starts[n, h])
    return o, ht


def check(rng, decay, B, T, H, dk, dv, segments, with_h0, fused):
    q = rng.standard_normal((B * T, H, dk))
    k = rng.standard_normal((B * T, H, dk)) / np.sqrt(dk)
    v = rng.standard_normal((B * T, H, dv))
    if decay == "none":
        g = np.zeros((B * T, H))
    elif decay == "fixed":
        g = np.broadcast_to(-rng.uniform(0.01, 0.2, size=H), (B * T, H)).copy()
    else:
        g = np.minimum(np.log(1.0 / (1.0 + np.exp(-rng.standard_normal((B * T, H))))), 0.0)
    h0 = rng.standard_normal((B, H, dk, dv)) if with_h0 else np.zeros((B, H, dk, dv))
    scale = 1.0 / np.sqrt(dk)
    o_ref = np.zeros((B * T, H, dv))
    ht_ref = np.zeros((B, H, dk, dv))
    for b in range(B):
        for h in range(H):
            rows = slice(b * T, (b + 1) * T)
            o_ref[rows, h], ht_ref[b, h] = sweep(q[rows, h], k[rows, h], v[rows, h], g[rows, h], h0[b, h], scale)
    o, ht = segmented(q, k, v, g, h0, scale, B, T, H, segments, fused, with_h0)
    rel = lambda x, r: float(np.sqrt(np.mean((x - r) ** 2) / np.mean(r ** 2)))
    return rel(o, o_ref), rel(ht, ht_ref)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer shapes (ctest)")
    args = ap.parse_args()
    rng = np.random.default_rng(20261207)
    shapes = [(2, 150, 2, 8, 16), (1, 256, 1, 8, 8), (3, 200, 1, 4, 8)]
    if not args.quick:
        shapes += [(2, 640, 2, 16, 16), (1, 65, 3, 8, 8)]
    failed = 0
    for decay in ("none", "fixed", "scalar"):
        for (B, T, H, dk, dv) in shapes:
            chunks = (T + C - 1) // C
            for segments in sorted({2, chunks, max(2, chunks // 2)}):
                if segments > chunks:
                    continue
                for with_h0 in (True, False):
                    for fused in (False, True):
                        eo, eh = check(rng, decay, B, T, H, dk, dv, segments, with_h0, fused)
                        ok = eo < EXACT and eh < EXACT
                        failed += not ok
                        print(f"{decay:6s} B{B} T{T} H{H} dk{dk} dv{dv} segments {segments} "
                              f"{'h0' if with_h0 else 'noh0'} {'fused' if fused else 'split'}: "
                              f"o {eo:.2e}, ht {eh:.2e}  {'PASS' if ok else 'FAIL'}")
    print("ALL PASS" if not failed else f"FAIL: {failed} check(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
