"""Host transcription of runtime/kernels/cuda/hopper/unit_lower_inverse.cuh, phase by phase (the
phases between barriers run thread by thread), against numpy's inverse: checks the blockwise
algorithm and its in-place layout before the kernel runs on a GPU. Usage: python3 THIS."""
import numpy as np
C, NB, T, ld = 64, 16, 128, 68
nb = C // NB
rng = np.random.default_rng(0)
A = np.tril(rng.standard_normal((C, C)) * 0.3, -1).astype(np.float32)
a = np.zeros((C, ld), np.float32); a[:, :C] = A
def xAt(t, s):
    if t // NB == s // NB: return a[t, s] if t > s else (1.0 if t == s else 0.0)
    return a[s, t] if t > s else 0.0
# diagonal blocks
xs = {}
for tid in range(nb * NB):
    blk, j = divmod(tid, NB); r0 = blk * NB; x = [0.0] * NB
    for i in range(NB):
        s = sum(a[r0 + i, r0 + k] * x[k] for k in range(i)); x[i] = (1.0 if i == j else 0.0) - s
    xs[tid] = x
for tid, x in xs.items():
    blk, j = divmod(tid, NB); r0 = blk * NB
    for i in range(NB):
        if i > j: a[r0 + i, r0 + j] = x[i]
PB = NB * NB; per = ((nb - 1) * PB + T - 1) // T
for d in range(1, nb):
    items = (nb - d) * PB
    y = {}
    for tid in range(T):
        for e in range(per):
            item = tid + e * T
            if item >= items: continue
            b = item // PB; ab = b + d; t = ab * NB + (item % PB) // NB; s = b * NB + item % NB
            y[(tid, e)] = sum(a[t, k] * xAt(k, s) for k in range(b * NB, ab * NB))
    for (tid, e), v in y.items():
        item = tid + e * T; b = item // PB; ab = b + d; t = ab * NB + (item % PB) // NB; s = b * NB + item % NB
        a[s, t] = v
    y2 = {}
    for tid in range(T):
        for e in range(per):
            item = tid + e * T
            if item >= items: continue
            b = item // PB; ab = b + d; ti = (item % PB) // NB; t = ab * NB + ti; s = b * NB + item % NB
            acc = a[s, t] + sum(a[t, ab * NB + k] * a[s, ab * NB + k] for k in range(ti))
            y2[(tid, e)] = -acc
    for (tid, e), v in y2.items():
        item = tid + e * T; b = item // PB; ab = b + d; t = ab * NB + (item % PB) // NB; s = b * NB + item % NB
        a[s, t] = v
X = np.array([[xAt(t, s) for s in range(C)] for t in range(C)])
ref = np.linalg.inv(np.eye(C) + A.astype(np.float64))
print("max abs err", np.abs(X - ref).max(), "ref max", np.abs(ref).max())
assert np.abs(X - ref).max() < 1e-4 * max(1.0, np.abs(ref).max()), "blockwise inverse differs"
