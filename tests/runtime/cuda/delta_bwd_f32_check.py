#!/usr/bin/env python3
"""fp32 emulation of the mma.sync delta-rule backward (runtime/kernels/cuda/chunk_backward_delta.cu)
against the float64 token reverse sweep of delta_bwd_host_check.py, run before any device run.

The five passes are transcribed as the kernels compute them: every workspace and shared-memory
value in fp32, products as 3xTF32 mma.sync (operands split into tf32 hi + lo; the three products
lo*hi, hi*lo, hi*hi of each k-step of 8 summed exactly and added to the fp32 accumulator, rounding
toward zero: the tensor cores truncate their fp32 accumulation (Fasi et al., "Numerical behavior
of NVIDIA tensor cores", PeerJ CS 2021, for V100 / T4 / A100; Khattak and Mikaitis, arXiv
2512.07004, for H100); --rn rounds to nearest instead), the in-chunk cumsum b in double, exp in
fp32, X by fp32 forward substitution, the row sums (per column half, added by the reader) and
the reductions in the kernels' order, dg's reverse cumsum in double. Every named value can be made exact (float64)
alone, to attribute the error (--attribute).
FIXES, the kernels' changes for strong gates (--unfixed models the kernels before them):
  dbdiag   dA'_tt (q_t.k_t), in q_t.dq_t and k_t.dk_t alike, is left out of db's row sums;
  kdsplit  the Kd rows kd_t = k_t.dk_Kd_t are summed apart from db and Z and meet them only in
           dg's double sum;
  staged   tileProduct: each k-step's products go to a zeroed fragment, added to the tile with one
           fp32 add (round to nearest), so no truncation acts on the running sum.
The fixed class (one g per head) runs as the scalar class with g at every token, d_g[h] the sum
of the per-token dg in double; --unfixed models its former path, the exact per-token kernel of
chunk_backward.cu (fp32 token recurrence and adjoint, dg accumulated in double).
Cases: the kernel lab's strong-gate backward (lab_backward.cu runBwdCase, B2 T130 H2 dk64 dv64, g =
max(-20, 10 logsigmoid(N))) and verify's (kernel_section.cpp, B1 T130 H1 dk256 dv128, g =
max(-20, logsigmoid(16 N))), a near-zero-gate case, and verify's fixed-class draw (issue 11 item 7:
B2 T150 H2 dk64 dv192, one g = max(-20, logsigmoid(16 N)) per head); rel-RMS pooled over
(sequence, head) as the lab's relRms, the fixed class's dg as verify's compareTotal. Checks: 1. the transcription with every value exact against the token sweep
(~1e-15); 2. the fp32 emulation against --margin (default 5e-6, half the fp32 gate 1e-5).
Usage: python3 tests/runtime/cuda/delta_bwd_f32_check.py [--seeds 0 1 2] [--quick] [--attribute]
                                                          [--unfixed] [--fp32b] [--rn]
  --attribute  the max errors over the seeds before the fixes, with each alone, with the db split
               (dbdiag + kdsplit), with all; then, before them, one named value exact at a time
  --fp32b      b and its differences in fp32 (the kernels before ba68802)
Exit 0 when every check passes (--unfixed fails: the lab case's dg is ~1e-5 and more).
"""
import argparse
import sys

import numpy as np

from delta_bwd_host_check import C, TRI_INCL, TRI_STRICT, chunked, logsigmoid, reverse_tokens, round_f32

F32 = np.float32


def round_rz(x):
    """float64 -> fp32 rounding toward zero (returned as fp32)."""
    x = np.asarray(x, dtype=np.float64)
    x32 = x.astype(F32)
    over = np.abs(x32.astype(np.float64)) > np.abs(x)
    x32[over] = np.nextafter(x32[over], F32(0))
    return x32


def tf32(x):
    """cvt.rna.tf32.f32: round to nearest (ties away) to a 10-bit mantissa, kept in fp32."""
    u = np.asarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    u = (u + 0x1000) & 0xFFFFE000
    return u.astype(np.uint32).view(F32)


class Kernel:
    """The kernels' arithmetic; a name in `exact` is computed (and kept) in float64 instead."""

    def __init__(self, exact=frozenset(), fixed=frozenset(), rz=True):
        self.exact = exact
        self.fixed = fixed  # candidate fixes switched on (see FIXES)
        self.rz = rz  # the tensor cores' accumulation truncates (round toward zero); else nearest

    def on(self, name):
        return name not in self.exact

    def r(self, x, name):
        """A value stored in fp32 (workspace, shared memory, register)."""
        return round_f32(x) if self.on(name) else np.asarray(x, dtype=np.float64)

    def mm(self, a, b, name, acc=None):
        """acc + a @ b as warpTileProduct<Precise=true>: fp32 operands, 3xTF32 per k-step of 8."""
        if not self.on(name):
            out = a @ b
            return out if acc is None else acc + out
        a32, b32 = np.asarray(a, F32), np.asarray(b, F32)
        ahi, bhi = tf32(a32), tf32(b32)
        alo, blo = tf32(a32 - ahi), tf32(b32 - bhi)
        c = np.zeros((a.shape[0], b.shape[1]), F32) if acc is None else np.asarray(acc, F32)
        staged = "staged" in self.fixed  # tileProduct: each k-step in a zeroed fragment, one FADD
        for k0 in range(0, a.shape[1], 8):
            ks = slice(k0, k0 + 8)
            d = np.zeros_like(c) if staged else c
            for x, y in ((alo, bhi), (ahi, blo), (ahi, bhi)):
                p = x[:, ks].astype(np.float64) @ y[ks, :].astype(np.float64)  # exact products
                d = d.astype(np.float64) + p
                d = round_rz(d) if self.rz else d.astype(F32)
            c = (c.astype(np.float64) + d).astype(F32) if staged else d  # FADD: nearest
        return c.astype(np.float64)

    def seqsum(self, terms, name, start=None):
        """start + terms[0] + terms[1] + ... (axis 0), one fp32 rounding per addition."""
        if not self.on(name):
            s = terms.sum(0)
            return s if start is None else start + s
        acc = np.zeros(terms.shape[1:], F32) if start is None else np.asarray(start, F32)
        for t in np.asarray(terms, F32):
            acc = acc + t
        return acc.astype(np.float64)

    def rowsum_halves(self, y, name, halves):
        """rowSumsInto on a 64 x 64 tile of products y (fp32): per lane 8 sequential terms, a
        4-lane xor tree, then each column half's warp adds its sums to its own row of halves [2, C]
        (the reader adds the two halves, half 0 first)."""
        halves = np.array(halves, dtype=np.float64)
        if not self.on(name):
            return halves + np.stack([y[:, :32].sum(1), y[:, 32:].sum(1)])
        y32 = np.asarray(y, F32)
        for j, n0 in enumerate((0, 32)):
            lanes = []
            for q in range(4):
                cols = [n0 + 8 * jj + 2 * q + e for jj in range(4) for e in range(2)]
                lanes.append(self.seqsum(y32[:, cols].T, name).astype(F32))
            a = [lanes[0] + lanes[1], lanes[1] + lanes[0], lanes[2] + lanes[3], lanes[3] + lanes[2]]
            tot = a[0] + a[2]
            halves[j] = (np.asarray(halves[j], F32) + tot).astype(np.float64)
        return halves

    def halves_sum(self, halves, name, start=None):
        """start + halves[0] + halves[1], one fp32 rounding per addition (exact when name is)."""
        if not self.on(name):
            return halves.sum(0) if start is None else start + halves.sum(0)
        acc = np.asarray(halves[0], F32) if start is None else np.asarray(start, F32) + np.asarray(halves[0], F32)
        return (acc + np.asarray(halves[1], F32)).astype(np.float64)

    def warp_reduce(self, x, name):
        """Per-thread values [256]: xor-shuffle tree in each warp, then warps 0..7 in order."""
        if not self.on(name):
            return float(x.sum())
        w = np.asarray(x, F32).reshape(8, 32)
        while w.shape[1] > 1:
            h = w.shape[1] // 2
            w = w[:, :h] + w[:, h:]
        return float(self.seqsum(w[:, 0], name))

    def exp(self, x, name):
        return round_f32(np.exp(round_f32(x))) if self.on(name) else np.exp(x)


# Candidate fixes (Kernel.fixed), each modelled here exactly as the kernel computes it.
FIXES = ("dbdiag", "kdsplit", "staged")
# Values that can be made exact, by pass.
NAMES = ["eb", "ratio", "KK", "QK", "L", "Ap", "X", "Tm", "W", "U", "dDl",  # 1 prep
         "D", "S",                                                             # 2 fwd scan
         "dD", "dS",                                                           # 3 bwd scan
         "aq", "ak", "aw", "ada", "dA", "dq", "dkkd", "zdot", "dbq", "dbk", "z",  # 4 dqdk
         "dbsum", "dTm", "G", "dbeta1", "Y", "dL", "E", "rb", "dM", "tdw", "dbw", "dk",  # 5 wy
         "out"]  # the fp32 outputs


def chunk_scalars(K, g):
    """b (double cumsum of fp32 g), exp(b), exp(b_C - b), ratio[t][s] = exp(b_t - b_s), s <= t."""
    if "fp32b" in K.fixed:  # before ba68802: fp32 shuffle scan, fp32 differences
        x = np.asarray(g, F32).reshape(2, 32).copy()
        for off in (1, 2, 4, 8, 16):
            x[:, off:] = x[:, off:] + x[:, :-off].copy()
        b = np.concatenate([x[0], x[1] + x[0, 31]]).astype(np.float64)
        sub = lambda a, c: round_f32(a - c)
    else:
        b = np.cumsum(g)  # chunkCumsum: double, the differences before the rounding
        sub = lambda a, c: a - c
    eb = K.exp(b, "eb")
    ec = K.exp(sub(b[-1], b), "eb")
    diff = sub(b[:, None], b[None, :])
    ratio = np.where(np.tril(np.ones((C, C), bool)), K.exp(np.minimum(diff, 0.0), "ratio"), 0.0)
    return b, eb, ec, ratio


def forward_substitution(K, L):
    """X = (I + L)^-1, one column per thread: x[i] -= L[i][j] x[j] for j ascending (fp32 FMA)."""
    if not K.on("X"):
        return np.linalg.inv(np.eye(C) + L)
    X = np.eye(C)
    for j in range(C - 1):
        # fma(-l, xj, x): the product is exact in double before the one rounding
        X[j + 1:, :] = round_f32(X[j + 1:, :] - L[j + 1:, j:j + 1] * X[j:j + 1, :])
    return X


def sequence_backward(K, x, scale):
    """One (sequence, head): the five passes. x as delta_bwd_host_check.make_inputs."""
    T = len(x["g"])
    (q, k, v, do, g, beta), nc, sl = chunked(x)
    dk_, dv_ = q.shape[1], v.shape[1]
    nks = dk_ // 64
    tri_s, tri_i = TRI_STRICT, TRI_INCL
    sc = [chunk_scalars(K, g[s]) for s in sl]

    # Pass 1, prepKernel.
    X, W, UD, dDl = [], [], [], []
    for c, s in enumerate(sl):
        b, eb, ec, ratio = sc[c]
        Kc, Qc, Vc, dO, bt = k[s], q[s], v[s], do[s], beta[s]
        ag = K.mm(Kc, Kc.T, "KK")
        aa = K.mm(Qc, Kc.T, "QK")
        L = np.where(tri_s, K.r(K.r(bt[:, None] * ag, "L") * ratio, "L"), 0.0)
        Ap = np.where(tri_i, K.r(K.r(scale * aa, "Ap") * ratio, "Ap"), 0.0)
        Xc = forward_substitution(K, L)
        Tm = K.r(Xc * bt[None, :], "Tm")
        X.append(Xc)
        W.append(K.mm(Tm, K.r(Kc * eb[:, None], "W"), "W"))
        UD.append(K.mm(Tm, Vc, "U"))
        dDl.append(K.mm(Ap.T, dO, "dDl"))

    # Pass 2, fwdScanKernel: S_c, D = U - W S_c, S_{c+1}.
    S = x["h0"].copy()
    Sc, D = [], []
    for c, s in enumerate(sl):
        b, eb, ec, ratio = sc[c]
        Sc.append(S)
        Dc = K.mm(-W[c], S, "D", acc=UD[c])
        D.append(Dc)
        S = K.mm(K.r(k[s] * ec[:, None], "S").T, Dc, "S", acc=K.r(S * eb[-1], "S"))
    # Pass 3, bwdScanKernel: dD, dS_{c+1}, dS_c.
    dS = x["dht"].copy()
    dSn, dD = [None] * nc, [None] * nc
    for c in range(nc - 1, -1, -1):
        s = sl[c]
        b, eb, ec, ratio = sc[c]
        dSn[c] = dS
        dD[c] = K.mm(K.r(k[s] * ec[:, None], "dD"), dS, "dD", acc=dDl[c])
        dS = K.mm(-W[c].T, dD[c], "dS", acc=K.r(dS * eb[-1], "dS"))
        dS = K.mm(K.r(q[s] * K.r(scale * eb, "dS")[:, None], "dS").T, do[s], "dS", acc=dS)
    dh0 = dS

    out = {n: np.zeros_like(a) for n, a in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta))}
    for c, s in enumerate(sl):
        b, eb, ec, ratio = sc[c]
        Kc, Qc, Vc, dO, bt = k[s], q[s], v[s], do[s], beta[s]
        Sop, dSop, Dc, dDc, Xc = Sc[c], dSn[c], D[c], dD[c], X[c]
        # Pass 4, dqdkKernel, per key slice.
        dbpart, kdpart, zpart = [], [], []
        dkpart, dW = np.zeros_like(Kc), np.zeros_like(Kc)
        dq = np.zeros_like(Qc)
        for ks in range(nks):
            cs = slice(64 * ks, 64 * ks + 64)
            aq = K.mm(dO, Sop[cs].T, "aq")
            ak = K.mm(Dc, dSop[cs].T, "ak")
            aw = K.mm(dDc, Sop[cs].T, "aw")
            ada = K.mm(dO, Dc.T, "ada")
            # zdot: thread tid sums elements e = tid + 256 i of each 64 x 64 value block in order
            prods = K.r(Sop[cs] * dSop[cs], "zdot")  # [64, dv]
            blocks = [prods[:, v0:v0 + 64].reshape(-1) for v0 in range(0, dv_, 64)]
            terms = np.concatenate([bk.reshape(16, 256) for bk in blocks])  # [16 nvb, 256 threads]
            zdot = K.seqsum(terms, "zdot")
            dA = np.where(tri_i, K.r(K.r(scale * ada, "dA") * ratio, "dA"), 0.0)
            diag = "dbdiag" in K.fixed  # dA's diagonal added after the db row sums
            dAp = np.where(tri_s, dA, 0.0) if diag else dA
            aq = K.r(aq * K.r(scale * eb, "dq")[:, None], "dq")
            aq = K.mm(dAp, Kc[:, cs], "dq", acc=aq)
            ak = K.r(ak * ec[:, None], "dkkd")
            zk_terms = K.r(Kc[:, cs] * ak, "z")
            kd = np.zeros(C)
            if "kdsplit" in K.fixed:
                # k_s.dk_kd_s as rows of their own (kdpart; dg_t gets their sum over s < t), not in
                # Z nor in db; the intra part in a fresh accumulator for db's row sums
                kd = K.halves_sum(K.rowsum_halves(zk_terms, "z", np.zeros((2, C))), "z")
                zk_terms = np.zeros_like(zk_terms)
                ai = K.mm(dAp.T, Qc[:, cs], "dkkd")
            else:
                ak = K.mm(dAp.T, Qc[:, cs], "dkkd", acc=ak)
                ai = ak
            rows = K.rowsum_halves(K.r(aq * Qc[:, cs], "dbq"), "dbq", np.zeros((2, C)))
            rows = K.rowsum_halves(K.r(-ai * Kc[:, cs], "dbk"), "dbk", rows)
            row = K.halves_sum(rows, "dbq")
            if "kdsplit" in K.fixed:
                ak = K.r(ak + ai, "dkkd")
            if diag:  # x += dA'_tt k_t (one fp32 FMA)
                dd = np.diag(dA)[:, None]
                aq = K.r(aq + dd * Kc[:, cs], "dq")
                ak = K.r(ak + dd * Qc[:, cs], "dkkd")
            dq[:, cs] = aq
            dkpart[:, cs] = ak
            dW[:, cs] = -aw
            dbpart.append(row)
            kdpart.append(kd)
            # z: per thread zdot * ebc + zk, warp trees, warps in order
            zl = K.r(K.r(zdot * eb[-1], "z") + K.seqsum(zk_terms.reshape(-1, 256), "z"), "z")
            zpart.append(K.warp_reduce(zl, "z"))
        out["q"][s] = K.r(dq, "out")
        # Pass 5, wyBwdKernel.
        sDb = K.seqsum(np.array(dbpart), "dbsum")
        Tm = K.r(Xc * bt[None, :], "Tm")
        at = K.mm(dDc, Vc.T, "dTm")
        at = K.mm(dW, K.r(Kc * eb[:, None], "dTm").T, "dTm", acc=at)
        dTm = np.where(tri_i, at, 0.0)
        agm = K.mm(Kc, Kc.T, "G")
        G = np.where(tri_s, K.r(agm * ratio, "G"), 0.0)
        # dbeta_s = sum_{t >= s} dTm[t][s] X[t][s], one thread per s (fp32 FMA chain)
        if K.on("dbeta1"):
            dbeta = np.zeros(C, F32)
            for t in range(C):
                dbeta = (dbeta.astype(np.float64) + dTm[t] * Xc[t]).astype(F32)
            dbeta = dbeta.astype(np.float64)
        else:
            dbeta = (dTm * Xc).sum(0)
        Y = K.mm(dTm, Tm.T, "Y")
        dL = np.where(tri_s, K.mm(-Xc.T, Y, "dL"), 0.0)
        E = np.where(tri_s, K.r(K.r(dL * bt[:, None], "E") * G, "E"), 0.0)
        # E's column sums (one thread a column, a ascending), its row sums and those of x.gv by
        # column half (rowSumsInto's layout), added when db and dbeta are read
        colE = K.seqsum(E, "E")
        rbt = np.where(tri_s, K.r(dL * G, "rb"), 0.0)
        dbeta = K.halves_sum(K.rowsum_halves(rbt, "rb", np.zeros((2, C))), "rb", start=dbeta)
        dbRows = K.rowsum_halves(E, "E", np.zeros((2, C)))
        dM = np.where(tri_s, K.r(K.r(dL * bt[:, None], "dM") * ratio, "dM"), 0.0)
        dk = np.zeros_like(Kc)
        for ks in range(nks):
            cs = slice(64 * ks, 64 * ks + 64)
            acc = K.mm(Tm.T, dW[:, cs], "tdw")
            acc = K.r(acc * eb[:, None], "tdw")
            dbRows = K.rowsum_halves(K.r(Kc[:, cs] * acc, "dbw"), "dbw", dbRows)
            acc = K.mm(dM, Kc[:, cs], "dk", acc=acc)
            acc = K.mm(dM.T, Kc[:, cs], "dk", acc=acc)
            dk[:, cs] = K.r(acc + dkpart[:, cs], "dk")
        out["k"][s] = dk
        out["v"][s] = K.r(K.mm(Tm.T, dDc, "dk"), "out")
        out["beta"][s] = K.r(dbeta, "out")
        # db_t = pass 4's partials + the row halves - E's column sums, in double (fp32 values)
        sDb = sDb + dbRows[0] + dbRows[1] - colE
        # dg_t = Z + sum_{t' >= t} db_t' (+ sum_{s < t} kd_s), in double
        sKd = K.seqsum(np.array(kdpart), "dbsum")
        acc = float(np.sum(zpart)) + float(np.sum(sKd))
        dg = np.zeros(C)
        for t in range(C - 1, -1, -1):
            acc += sDb[t] - sKd[t]
            dg[t] = acc
        out["g"][s] = K.r(dg, "out")
    res = {n: a[:T] for n, a in out.items()}
    res["h0"] = K.r(dh0, "out")
    return res


def exact_kernel_fixed_dg(x, scale, ft=F32):
    """The fixed class's d_g of one (sequence, head) as the exact per-token kernel forms it
    (chunk_backward.cu runBwd, the fixed class's path before it ran here): the token recurrence
    and its adjoint in fp32 (ft), dg = sum_t lam <S_{t-1}, dS_P,t> accumulated in double."""
    q, k, v, beta, do = (np.asarray(x[n], ft) for n in ("q", "k", "v", "beta", "do"))
    lam = ft(np.exp(ft(x["g"][0])))
    S = np.asarray(x["h0"], ft)
    states = [S]
    for t in range(len(beta)):
        P = lam * S
        S = P + np.outer(k[t], beta[t] * (v[t] - P.T @ k[t]))
        states.append(S)
    dS, dg = np.asarray(x["dht"], ft), 0.0
    for t in range(len(beta) - 1, -1, -1):
        dS = dS + ft(scale) * np.outer(q[t], do[t])
        dS = dS + np.outer(k[t], -beta[t] * (dS.T @ k[t]))
        dg += float(lam) * (states[t].astype(np.float64) * dS.astype(np.float64)).sum()
        dS = lam * dS
    return dg


# ---- inputs and cases ------------------------------------------------------------------------
def gate(rng, n, gspread, gmul):
    return round_f32(np.maximum(-20.0, gmul * logsigmoid(gspread * rng.standard_normal(n))))


def draw(rng, T, dk, dv, gspread, gmul, h0sd, gfix=None):
    """One (sequence, head) of inputs, fp32 values: unit q, k rows; g = max(-20, gmul
    logsigmoid(gspread N)) per token, or gfix at every token (the fixed class); beta = sigmoid(N);
    h0 ~ h0sd N; dO, d_ht ~ N."""
    q = rng.standard_normal((T, dk))
    k = rng.standard_normal((T, dk))
    q /= np.sqrt((q * q).sum(1, keepdims=True) + 1e-6)
    k /= np.sqrt((k * k).sum(1, keepdims=True) + 1e-6)
    return dict(q=round_f32(q), k=round_f32(k), v=round_f32(rng.standard_normal((T, dv))),
                g=gate(rng, T, gspread, gmul) if gfix is None else np.full(T, gfix),
                beta=round_f32(1.0 / (1.0 + np.exp(-rng.standard_normal(T)))),
                h0=round_f32(h0sd * rng.standard_normal((dk, dv))),
                do=round_f32(rng.standard_normal((T, dv))),
                dht=round_f32(rng.standard_normal((dk, dv))))


# (label, sequences x heads, T, dk, dv, g spread, g multiplier, h0 sd, fixed-class heads or 0)
CASES = [("lab B2 T130 H2 dk64 dv64 g>=-20", 4, 130, 64, 64, 1.0, 10.0, 0.5, 0),
         ("verify B1 T130 H1 dk256 dv128 g>=-20", 1, 130, 256, 128, 16.0, 1.0, 1.0, 0),
         ("lab B2 T150 H2 dk64 dv128 g=ls(N)", 4, 150, 64, 128, 1.0, 1.0, 0.5, 0),
         ("verify fixed B2 T150 H2 dk64 dv192 g>=-20", 4, 150, 64, 192, 16.0, 1.0, 1.0, 2)]
GRADS = ("q", "k", "v", "g", "beta", "h0")


def run_case(case, seed, kernel):
    """Pooled rel-RMS per gradient of one case (the lab's relRms over all sequences and heads).
    Fixed class (one g per head, the kernels run it as the scalar class with g at every token and
    sum dg per head in double): dg is verify's compareTotal, ||total - ref|| / max(||ref||,
    ||per-token terms||) over the heads."""
    label, nseq, T, dk, dv, spread, gmul, h0sd, nfix = case
    rng = np.random.default_rng([seed, T, dk, dv])
    num = dict.fromkeys(GRADS, 0.0)
    den = dict.fromkeys(GRADS, 0.0)
    gh = gate(rng, nfix, spread, gmul) if nfix else None
    tot_got, tot_ref, terms = np.zeros(max(nfix, 1)), np.zeros(max(nfix, 1)), 0.0
    for i in range(nseq):
        x = draw(rng, T, dk, dv, spread, gmul, h0sd, None if gh is None else gh[i % nfix])
        scale = 1.0 / np.sqrt(dk)
        ref = reverse_tokens(x, scale)
        got = sequence_backward(kernel, x, scale)
        for n in GRADS:
            num[n] += ((got[n] - ref[n]) ** 2).sum()
            den[n] += (ref[n] ** 2).sum()
        if nfix:
            unfixed = "dbdiag" not in kernel.fixed  # --unfixed: the exact per-token kernel's d_g
            ft = F32 if kernel.on("S") else np.float64
            tot_got[i % nfix] += exact_kernel_fixed_dg(x, scale, ft) if unfixed else got["g"].sum()
            tot_ref[i % nfix] += ref["g"].sum()
            terms += (ref["g"] ** 2).sum()
    errs = {n: np.sqrt(num[n] / den[n]) for n in GRADS}
    if nfix:
        errs["g"] = np.linalg.norm(tot_got - tot_ref) / max(np.linalg.norm(tot_ref), np.sqrt(terms))
    return errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--attribute", action="store_true")
    ap.add_argument("--quick", action="store_true", help="the two strong-gate cases only")
    ap.add_argument("--margin", type=float, default=5e-6)
    ap.add_argument("--unfixed", action="store_true", help="the kernels before FIXES")
    ap.add_argument("--fp32b", action="store_true",
                    help="also b and its differences in fp32 (the kernels before ba68802)")
    ap.add_argument("--rn", action="store_true",
                    help="model the tensor cores' accumulation as round-to-nearest, not truncation")
    args = ap.parse_args()
    fixed = frozenset() if args.unfixed else frozenset(FIXES)
    if args.fp32b:
        fixed |= {"fp32b"}
    rz = not args.rn
    cases = CASES[:2] if args.quick else CASES
    ok = True

    print("1. the transcription in float64 (every value exact) vs the token sweep (gate 1e-10)")
    for case in cases:
        errs = run_case(case, args.seeds[0], Kernel(frozenset(NAMES), fixed - {"fp32b"}, rz))
        worst = max(errs.values())
        ok &= worst < 1e-10
        print(f"  {case[0]:<40} max rel-RMS {worst:.1e}  {'ok' if worst < 1e-10 else 'FAIL'}")

    print(f"2. fp32 emulation ({'before the fixes' if args.unfixed else 'as the kernels are'}, "
          f"accumulation {'to nearest' if args.rn else 'truncating'}), rel-RMS vs the token sweep; "
          f"margin {args.margin:.0e} (gate 1e-5)")
    print(f"  {'case':<40} {'seed':>4} " + " ".join(f"{'d' + n:>9}" for n in GRADS))
    for case in cases:
        for seed in args.seeds:
            errs = run_case(case, seed, Kernel(fixed=fixed, rz=rz))
            bad = [n for n, e in errs.items() if not e < args.margin]
            ok &= not bad
            cols = " ".join(f"{errs[n]:9.2e}" for n in GRADS)
            print(f"  {case[0]:<40} {seed:>4} {cols}  {'OVER ' + ','.join(bad) if bad else 'ok'}")
    if args.attribute:
        attribute(cases[:2], args.seeds, rz)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def attribute(cases, seeds, rz):
    """The fixes one at a time over the seeds; then, before them, one value exact at a time."""
    print("3. max rel-RMS over the seeds: before the fixes, each alone, the db split, all")
    variants = [("before", ())] + [(f, (f,)) for f in FIXES] + [("db split", FIXES[:2]),
                                                               ("all", FIXES)]
    for case in cases:
        print(f"  {case[0]}")
        print(f"    {'fixes':<10} " + " ".join(f"{'d' + n:>9}" for n in GRADS))
        for label, fx in variants:
            e = [run_case(case, s, Kernel(fixed=frozenset(fx), rz=rz)) for s in seeds]
            print(f"    {label:<10} " + " ".join(f"{max(x[n] for x in e):9.2e}" for n in GRADS))
    print(f"4. before the fixes, seed {seeds[0]}: one value exact (float64) at a time")
    for case in cases:
        print(f"  {case[0]}")
        print(f"    {'exact':<8} " + " ".join(f"{'d' + n:>9}" for n in GRADS))
        for name in ["(none)"] + NAMES:
            exact = frozenset() if name == "(none)" else frozenset({name})
            errs = run_case(case, seeds[0], Kernel(exact, rz=rz))
            print(f"    {name:<8} " + " ".join(f"{errs[n]:9.2e}" for n in GRADS))


if __name__ == "__main__":
    sys.exit(main())
