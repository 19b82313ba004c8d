#!/usr/bin/env python3
"""Float64 host transcription of the Hopper delta-rule backward (runtime/kernels/cuda/hopper/,
delta_*.cuh), checked before any device run.

The recurrence (recurrence.h, inclusive readout, decay None or Scalar), per sequence and head:
    S_t = (I - beta_t k_t k_t^T) exp(g_t) S_{t-1} + beta_t k_t v_t^T,   o_t = scale S_t^T q_t
with the loss L = <dO, o> + <d_ht, S_T>. Three checks:
  1. the token-by-token reverse sweep (the lab's reference, lab_backward.cu runBwdCase) against
     central finite differences of the forward, on a tiny case;
  2. the chunk algorithm, stage by stage as the kernels run it, in float64, against that sweep on
     the lab's backward shapes (partial chunks, several chunks, strong gates): ~1e-12 expected;
  3. the same chunk algorithm with every value the kernels round rounded to bf16 / fp16 where the
     kernels round it (workspaces, shared-memory operands of wgmma, outputs), fp32 elsewhere: the
     relative RMS errors it predicts for the device, against the lab's gate (5e-3);
  4. dg of the lab's varlen case at dk 256 x dv 512 over many random draws (it sits near the gate);
  5. dg of the lab's T130 dk64 dv64 g >= -5 case at the draws that crossed the gate while Tm in
     Y = dTm Tm^T and D in stage 2's K^T D were rounded once (both hi + lo since session 28).
Usage: python3 tests/runtime/cuda/delta_bwd_host_check.py [--seed N] [--quick] [--attribute]
  --attribute  also prints, for bf16, the error each rounded value causes alone (how
               KERNEL_PRECISE was chosen), and every value rounded (fla's storage) for comparison
Exit 0 when every check passes (the gate applies to the kernels' roundings).
"""
import argparse
import sys

import numpy as np

C = 64  # chunk length


# ---- rounding -------------------------------------------------------------------------------
def round_bf16(x):
    """Round-to-nearest-even to bfloat16 (through float32), returned as float64."""
    f = np.asarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def round_f16(x):
    return np.asarray(x, dtype=np.float16).astype(np.float64)


def round_f32(x):
    return np.asarray(x, dtype=np.float32).astype(np.float64)


# Values the kernels hold as hi + lo pairs of the input dtype, or in fp32 (~2^-16 relative or
# better: modelled as exact). Every other value named in chunk_backward is rounded to the input
# dtype where the kernels round it. The names, by stage:
#   1 prepare  Tm1 (Tm in U = Tm V), Tw (X diag(beta exp b) in W), W, U, A (A' in A'^T dO), dDl, L, X
#   2 forward  S2 (S in W S), Dop (D exp(b_C - b) in K^T D)
#   3 reverse  dS3 (dS in K dS), dOs (scale exp(b) dO), dDop (dD in W^T dD)
#   4 grad     S4q (dO S^T), S4w (dD S^T), SZ / dSZ (Z), D4a (dO D^T), D4k / dS4k (D dS^T),
#              dD4w (dD S^T), dA, dW
#   5 wy       Tm4 (Tm^T dD, Tm^T dW), dD4v (Tm^T dD), dD4t (dD V^T), dTm, TmY (Y = dTm Tm^T), Y,
#              Xop (X^T Y), dM
KERNEL_PRECISE = {"Tm1", "U", "Dop", "dS3", "dSZ", "D4a", "D4k", "dS4k", "dA", "Tm4", "dD4v", "dD4t", "TmY"}


def kernel_precise(dk):
    """KERNEL_PRECISE at key dim dk: stage 2 takes D's low half in K^T D at dk <= 128 only (at dk
    256 its second product spilled the state kernel, +4% on the 340m heads' backward, and this
    model's dg did not move: at dk 256 x dv 512, 60 pools of two T130 draws at g >= -5 gave the
    same worst pool, 5.6e-3, with and without it)."""
    return KERNEL_PRECISE if dk <= 128 else KERNEL_PRECISE - {"Dop"}
ROUNDED_NAMES = ["Tm1", "Tw", "W", "U", "A", "dDl", "L", "X", "S2", "Dop", "dS3", "dOs", "dDop",
                 "S4q", "S4w", "SZ", "dSZ", "D4a", "D4k", "dS4k", "dD4w", "dA", "dW", "Tm4", "dD4v",
                 "dD4t", "dTm", "TmY", "Y", "Xop", "dM", "out"]


class Rounding:
    """Where the kernels round: r(x, name) rounds the value `name` to the input dtype (`low`: bf16 /
    fp16; None for exact) and r.f32(x, name) to fp32, unless `name` is in `precise`; `only` (a set
    of names) restricts the rounding further, for attributing the error."""

    def __init__(self, low, precise=frozenset(), only=None):
        self.low = low
        self.precise = precise
        self.only = only

    def _on(self, name):
        return (self.low is not None and name not in self.precise
                and (self.only is None or name in self.only))

    def __call__(self, x, name):  # stored or read as a tensor-core operand in the input dtype
        return self.low(x) if self._on(name) else x

    def f32(self, x, name):  # stored in fp32 (workspace or shared memory)
        return round_f32(x) if self._on(name) else x


# ---- inputs (as lab_common.cu makeInputs) -----------------------------------------------------
def logsigmoid(x):
    return -np.logaddexp(0.0, -x)


def make_inputs(rng, T, dk, dv, decay, gmul, gclamp, rnd_in):
    q = rng.standard_normal((T, dk))
    k = rng.standard_normal((T, dk))
    q /= np.sqrt((q * q).sum(1, keepdims=True) + 1e-6)
    k /= np.sqrt((k * k).sum(1, keepdims=True) + 1e-6)
    v = rng.standard_normal((T, dv))
    beta = round_f32(1.0 / (1.0 + np.exp(-rng.standard_normal(T))))
    g = np.zeros(T)
    if decay:
        g = round_f32(np.maximum(gclamp, gmul * logsigmoid(rng.standard_normal(T))))
    h0 = round_f32(0.5 * rng.standard_normal((dk, dv)))
    do = rng.standard_normal((T, dv))
    dht = round_f32(rng.standard_normal((dk, dv)))
    return dict(q=rnd_in(q), k=rnd_in(k), v=rnd_in(v), g=g, beta=beta, h0=h0, do=rnd_in(do), dht=dht)


# ---- token recurrence and its reverse sweep (lab_backward.cu runBwdCase) ------------------------
def forward_tokens(x, scale):
    q, k, v, g, beta = x["q"], x["k"], x["v"], x["g"], x["beta"]
    S = x["h0"].copy()
    o = np.zeros_like(v)
    for t in range(len(g)):
        S = np.exp(g[t]) * S
        d = beta[t] * (v[t] - S.T @ k[t])
        S = S + np.outer(k[t], d)
        o[t] = scale * S.T @ q[t]
    return o, S


def loss(x, scale):
    o, S = forward_tokens(x, scale)
    return (o * x["do"]).sum() + (S * x["dht"]).sum()


def reverse_tokens(x, scale):
    q, k, v, g, beta, do = x["q"], x["k"], x["v"], x["g"], x["beta"], x["do"]
    T = len(g)
    states = [x["h0"].copy()]
    for t in range(T):
        S = np.exp(g[t]) * states[-1]
        S = S + np.outer(k[t], beta[t] * (v[t] - S.T @ k[t]))
        states.append(S)
    gr = {n: np.zeros_like(x[n]) for n in ("q", "k", "v", "g", "beta")}
    dS = x["dht"].copy()
    for t in range(T - 1, -1, -1):
        P = np.exp(g[t]) * states[t]
        res = v[t] - P.T @ k[t]
        xw = beta[t] * res
        St = P + np.outer(k[t], xw)
        gr["q"][t] = scale * St @ do[t]
        dS = dS + scale * np.outer(q[t], do[t])
        dxw = dS.T @ k[t]
        gr["k"][t] = dS @ xw
        gr["beta"][t] = dxw @ res
        gr["v"][t] = beta[t] * dxw
        dw = -beta[t] * dxw
        gr["k"][t] += P @ dw
        dS = dS + np.outer(k[t], dw)
        gr["g"][t] = (P * dS).sum()
        dS = np.exp(g[t]) * dS
    gr["h0"] = dS
    return gr


def finite_difference_check(rng):
    T, dk, dv, scale = 9, 4, 3, 0.5
    x = make_inputs(rng, T, dk, dv, True, 1.0, -1e30, lambda a: a)
    gr = reverse_tokens(x, scale)
    eps, worst = 1e-6, 0.0
    for name in ("q", "k", "v", "g", "beta", "h0"):
        num = np.zeros_like(x[name])
        for idx in np.ndindex(*x[name].shape):
            xp = {n: a.copy() for n, a in x.items()}
            xm = {n: a.copy() for n, a in x.items()}
            xp[name][idx] += eps
            xm[name][idx] -= eps
            num[idx] = (loss(xp, scale) - loss(xm, scale)) / (2 * eps)
        err = np.abs(num - gr[name]).max() / max(np.abs(num).max(), 1e-30)
        worst = max(worst, err)
        print(f"  finite differences d{name:<5} max rel {err:.2e}")
    return worst < 1e-6


# ---- the chunk algorithm, stage by stage -------------------------------------------------------
def chunk_scalars(g, lc):
    """b (inclusive cumsum), exp(b), exp(b_C - b), Gam (lower incl.) of one padded chunk."""
    b = np.cumsum(g)
    diff = b[:, None] - b[None, :]
    gam = np.where(np.tril(np.ones((C, C), bool)), np.exp(np.minimum(diff, 0.0)), 0.0)
    return b, np.exp(b), np.exp(b[-1] - b), gam


def chunked(x):
    """One (sequence, head)'s inputs zero-padded to whole chunks: (q, k, v, do, g, beta), the chunk
    count and the chunks' slices."""
    T = len(x["g"])
    nc = (T + C - 1) // C
    pad = nc * C - T

    def padded(a):
        return np.concatenate([a, np.zeros((pad,) + a.shape[1:])]) if pad else a

    return tuple(padded(x[n]) for n in ("q", "k", "v", "do", "g", "beta")), nc, \
        [slice(c * C, (c + 1) * C) for c in range(nc)]


TRI_STRICT = np.tril(np.ones((C, C), bool), -1)  # strict lower
TRI_INCL = np.tril(np.ones((C, C), bool))        # lower incl.


def chunk_backward(x, scale, r):
    """The Hopper stages in float64 with the kernels' roundings r (Rounding)."""
    T = len(x["g"])
    (q, k, v, do, g, beta), nc, sl = chunked(x)
    dk_, dv_ = q.shape[1], v.shape[1]
    tri_s, tri_i = TRI_STRICT, TRI_INCL
    sc = [chunk_scalars(g[s], 0) for s in sl]

    # Stage 1, delta_bwd_prepare: X, W, U, dD_local = A'^T dO per chunk.
    X, W, U, dDl = [], [], [], []
    for c, s in enumerate(sl):
        b, e, ec, gam = sc[c]
        K, Q, V, dO, bt = k[s], q[s], v[s], do[s], beta[s]
        G = np.where(tri_s, (K @ K.T) * gam, 0.0)
        L = r.f32(bt[:, None] * G, 'L')
        Xc = r.f32(np.linalg.inv(np.eye(C) + L), 'X')  # fp32 substitution (error ~1e-7, not modelled)
        Tm = r(Xc * bt[None, :], 'Tm1')           # bf16 tile
        Tw = r(Xc * (bt * e)[None, :], 'Tw')            # T diag(exp(b)) as the forward's preparation
        X.append(Xc)
        W.append(r(Tw @ K, 'W'))
        U.append(r(Tm @ V, 'U'))
        Ap = r(np.where(tri_i, scale * (Q @ K.T) * gam, 0.0), 'A')
        dDl.append(r.f32(Ap.T @ dO, 'dDl'))

    # Stage 2, delta_bwd_state (forward): S_c, D = U - W S_c, S_{c+1}.
    S = x["h0"].copy()
    Sc, D = [], []
    for c, s in enumerate(sl):
        b, e, ec, gam = sc[c]
        Sc.append(S)                               # the workspace
        Dc = U[c] - W[c] @ r(S, 'S2')              # the state's operand copy
        D.append(Dc)
        S = e[-1] * S + k[s].T @ r(Dc * ec[:, None], 'Dop')
    # Stage 3, delta_bwd_state (reverse): dD = dD_local + Kd dS_{c+1}, dS_{c+1}, dS_c, d_h0.
    dS = x["dht"].copy()
    dSn, dD = [None] * nc, [None] * nc
    for c in range(nc - 1, -1, -1):
        s = sl[c]
        b, e, ec, gam = sc[c]
        dSn[c] = dS
        dDc = dDl[c] + ec[:, None] * (k[s] @ r(dS, 'dS3'))
        dD[c] = dDc
        dS = e[-1] * dS + q[s].T @ r(scale * e[:, None] * do[s], 'dOs') - W[c].T @ r(dDc, 'dDop')
    dh0 = dS

    # Stage 4, delta_bwd_grad: every chunk-local gradient.
    out = {n: np.zeros_like(a) for n, a in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta))}
    for c, s in enumerate(sl):
        b, e, ec, gam = sc[c]
        K, Q, V, dO, bt = k[s], q[s], v[s], do[s], beta[s]
        Sop, dSop, Dc, dDc, Xc = Sc[c], dSn[c], D[c], dD[c], X[c]
        Tm = Xc * bt[None, :]
        G = np.where(tri_s, (K @ K.T) * gam, 0.0)  # fp32 from the K K^T accumulator
        dAp = r(np.where(tri_i, scale * (dO @ r(Dc, 'D4a').T) * gam, 0.0), 'dA')
        dq_inter = scale * e[:, None] * (dO @ r(Sop, 'S4q').T)
        dq = dq_inter + dAp @ K
        dk_kd = ec[:, None] * (r(Dc, 'D4k') @ r(dSop, 'dS4k').T)
        dk_intra = dAp.T @ Q
        dW = r(-r(dDc, "dD4w") @ r(Sop, "S4w").T, "dW")  # operand of Tm^T dW and dW K^T
        dv = r(Tm, 'Tm4').T @ r(dDc, 'dD4v')
        tdw = r(Tm, "Tm4").T @ dW  # (Tm^T dW), scaled by exp(b) per row below
        dTm = np.where(tri_i, e[None, :] * (dW @ K.T) + r(dDc, 'dD4t') @ V.T, 0.0)
        dbeta = (dTm * Xc).sum(0)
        Y = r(r(dTm, 'dTm') @ r(Tm, 'TmY').T, 'Y')
        dL = np.where(tri_s, -r(Xc, 'Xop').T @ Y, 0.0)
        dM = r(dL * bt[:, None] * gam, 'dM')
        dk = dk_kd + dk_intra + e[:, None] * tdw + dM @ K + dM.T @ K
        dbeta += (dL * G).sum(1)
        E = dL * bt[:, None] * G
        db = ((Q * dq).sum(1) - (K * (dk_kd + dk_intra)).sum(1) + (K * e[:, None] * tdw).sum(1)
              + E.sum(1) - E.sum(0))
        # a sequence's first state is h0, which the kernel reads in fp32 for this sum
        Z = e[-1] * ((Sop if c == 0 else r(Sop, 'SZ')) * r(dSop, 'dSZ')).sum() + (K * dk_kd).sum()
        dg = Z + np.cumsum(db[::-1])[::-1]
        out["q"][s], out["k"][s], out["v"][s] = r(dq, "out"), r(dk, "out"), r(dv, "out")
        out["g"][s], out["beta"][s] = r.f32(dg, "out"), r.f32(dbeta, "out")
    res = {n: a[:T] for n, a in out.items()}
    res["h0"] = r.f32(dh0, "out")
    return res


def rel_rms(a, ref):
    return np.sqrt(((a - ref) ** 2).sum() / max((ref ** 2).sum(), 1e-300))


# ---- cases (the lab's backward cases the Hopper path takes) ------------------------------------
def cases(quick):
    # (label, T, dk, dv, decay, gmul, gclamp, h0)
    base = [("T150 dk64 dv128", 150, 64, 128, True, 1.0, -1e30, True),
            ("T150 dk64 dv128 none", 150, 64, 128, False, 1.0, -1e30, True),
            ("T100 dk128 dv64", 100, 128, 64, True, 1.0, -1e30, True),
            ("T130 dk64 dv64 g>=-5", 130, 64, 64, True, 10.0, -5.0, True),
            ("T130 dk64 dv64 g>=-20", 130, 64, 64, True, 10.0, -20.0, True),
            ("T128 dk128 dv128 noh0", 128, 128, 128, True, 1.0, -1e30, False)]
    return base[:2] if quick else base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--attribute", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    ok = True

    print("1. token reverse sweep vs finite differences")
    ok &= finite_difference_check(rng)

    names = ("q", "k", "v", "g", "beta", "h0")
    print("2. chunk algorithm (float64) vs token sweep; 3. with the kernels' roundings (gate 5e-3)")
    print(f"  {'case':<26} {'dtype':<5} " + " ".join(f"{'d' + n:>9}" for n in names))
    for label, T, dk, dv, decay, gmul, gclamp, with_h0 in cases(args.quick):
        for dtype, low in (("exact", None), ("bf16", round_bf16), ("f16", round_f16)):
            rnd_in = low if low is not None else round_bf16
            x = make_inputs(np.random.default_rng(args.seed * 7919 + T + dk), T, dk, dv, decay,
                            gmul, gclamp, rnd_in)
            if not with_h0:
                x["h0"][:] = 0
                x["dht"][:] = 0
            scale = 1.0 / np.sqrt(dk)
            ref = reverse_tokens(x, scale)
            got = chunk_backward(x, scale, Rounding(low, kernel_precise(dk)))
            errs = {n: rel_rms(got[n], ref[n]) for n in names if not (n == "g" and not decay)
                    and not (n == "h0" and not with_h0)}
            gate = 1e-10 if low is None else 5e-3
            bad = [n for n, e in errs.items() if not e < gate]
            ok &= not bad
            cols = " ".join(f"{errs[n]:9.2e}" if n in errs else f"{'-':>9}" for n in names)
            print(f"  {label:<26} {dtype:<5} {cols}  {'FAIL ' + ','.join(bad) if bad else 'PASS'}")
    ok &= varlen_seed_check(10 if args.quick else 40)
    ok &= gated_tail_check()
    if args.attribute:
        attribute(args.seed, args.quick)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def varlen_seed_check(seeds):
    """The lab's bf16 case at Gated DeltaNet's 340m heads (dk 256 x dv 512, sequences of 1, 63, 65,
    71 and 100 tokens, each from its own h0) over many draws: its dg sits near the gate, so one
    draw says little. With S_0 = h0 rounded to bf16 in Z, 25 of 200 draws crossed 5e-3 (up to
    1.7e-2; most of it the one-token sequence, whose dg is almost all Z)."""
    lengths, dk, dv = (1, 63, 65, 71, 100), 256, 512
    scale = 1.0 / np.sqrt(dk)
    errs = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        got, ref = [], []
        for T in lengths:
            x = make_inputs(rng, T, dk, dv, True, 1.0, -1e30, round_bf16)
            got.append(chunk_backward(x, scale, Rounding(round_bf16, kernel_precise(dk)))["g"])
            ref.append(reverse_tokens(x, scale)["g"])
        errs.append(rel_rms(np.concatenate(got), np.concatenate(ref)))
    worst = max(errs)
    ok = worst < 5e-3
    print(f"4. bf16 dk256 dv512, sequences {lengths}, {seeds} draws: dg median {np.median(errs):.2e}, "
          f"max {worst:.2e}  {'PASS' if ok else 'FAIL'}")
    return ok


def gated_tail_check():
    """The lab's bf16 case T130 dk64 dv64 with gates g >= -5 (B2 x H2: four draws pooled, as the
    lab's rel-RMS pools them). Over 800 such pools, 3 crossed 5e-3 with the kernels' roundings of
    session 27, up to 1.4e-2 (the H100 lab hit one); rounded alone, Tm in Y (pool 669) and D in
    K^T D (pool 689) each put dg past the gate. With both as hi + lo, 1 pool in 800 reaches
    5.3e-3 (pool 73: S_c's bf16 copy in dO S_c^T, as fla stores h); with stage 4's dA' as hi + lo
    too, the median falls from 1.1e-3 to 2.8e-4 and pool 73 stays at 5.2e-3. The two pools must
    pass."""
    T, dk, dv = 130, 64, 64
    scale = 1.0 / np.sqrt(dk)
    ok = True
    for pool in (669, 689):
        rng = np.random.default_rng(pool)
        got, ref = [], []
        for _ in range(4):
            x = make_inputs(rng, T, dk, dv, True, 10.0, -5.0, round_bf16)
            got.append(chunk_backward(x, scale, Rounding(round_bf16, kernel_precise(dk)))["g"])
            ref.append(reverse_tokens(x, scale)["g"])
        err = rel_rms(np.concatenate(got), np.concatenate(ref))
        ok &= err < 5e-3
        print(f"5. bf16 T130 dk64 dv64 g>=-5, pool {pool}: dg {err:.2e}  {'PASS' if err < 5e-3 else 'FAIL'}")
    return ok


def attribute(seed, quick):
    """bf16 errors with one value rounded alone, then with every value rounded."""
    names = ("q", "k", "v", "g", "beta", "h0")
    print("5. bf16, one rounded value at a time (the rest exact), and all rounded")
    for label, T, dk, dv, decay, gmul, gclamp, with_h0 in cases(quick):
        x = make_inputs(np.random.default_rng(seed * 7919 + T + dk), T, dk, dv, decay, gmul, gclamp,
                        round_bf16)
        scale = 1.0 / np.sqrt(dk)
        ref = reverse_tokens(x, scale)
        print(f"  {label}")
        for name in ROUNDED_NAMES + ["(all)"]:
            only = None if name == "(all)" else {name}
            got = chunk_backward(x, scale, Rounding(round_bf16, frozenset(), only))
            cols = " ".join(f"{rel_rms(got[n], ref[n]):9.2e}" for n in names
                            if (decay or n != "g") and (with_h0 or n != "h0"))
            print(f"    {name:<6} {cols}")


if __name__ == "__main__":
    sys.exit(main())
