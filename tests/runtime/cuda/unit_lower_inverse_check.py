"""Host transcription of runtime/kernels/cuda/hopper/unit_lower_inverse.cuh's unitLowerInverse(),
phase by phase (the phases between barriers run thread by thread, in float32), against numpy's
inverse: checks the two-halves algorithm and its in-place layout before the kernel runs on a GPU.
Usage: python3 THIS."""
import numpy as np

C, H, T, ld = 64, 32, 128, 68
f32 = np.float32


def transcribe(A):
    a = np.zeros((C, ld), f32)
    a[:, :C] = A

    def column(r0, j):  # unitLowerColumn over the block at (r0, r0): four partial sums a row
        x = [f32(0)] * H
        for i in range(H):
            s = [f32(0)] * 4
            for e in range(i):
                s[e % 4] = f32(s[e % 4] + a[r0 + i, r0 + e] * x[e])
            x[i] = f32((1.0 if i == j else 0.0) - f32(f32(s[0] + s[1]) + f32(s[2] + s[3])))
        return x

    # warps 0 and 1: X11, X22 in place (strict lower part)
    cols = {(w, j): column(w * H, j) for w in range(2) for j in range(32)}
    for (w, j), x in cols.items():
        for i in range(H):
            if i > j:
                a[w * H + i, w * H + j] = x[i]

    def tile(tid):
        return 2 * (tid // 8), 4 * (tid % 8)

    # Y = A21 X11 into the upper-right block
    accs = {}
    for tid in range(T):
        r0, c0 = tile(tid)
        acc = a[H + r0:H + r0 + 2, c0:c0 + 4].copy()
        for k in range(H):
            acc = (acc + np.outer(a[H + r0:H + r0 + 2, k], a[k, c0:c0 + 4])).astype(f32)
        accs[tid] = acc
    for tid, acc in accs.items():
        r0, c0 = tile(tid)
        a[r0:r0 + 2, H + c0:H + c0 + 4] = acc
    # X21 = -(Y + lower(X22) Y) over A21
    out = {}
    for tid in range(T):
        r0, c0 = tile(tid)
        acc = accs[tid]
        for k in range(H):
            acc = (acc + np.outer(a[H + r0:H + r0 + 2, H + k], a[k, H + c0:H + c0 + 4])).astype(f32)
        out[tid] = -acc
    for tid, v in out.items():
        r0, c0 = tile(tid)
        a[H + r0:H + r0 + 2, c0:c0 + 4] = v
    return np.array([[a[t, s] if t > s else (1.0 if t == s else 0.0) for s in range(C)] for t in range(C)])


def main():
    rng = np.random.default_rng(0)
    worst = 0.0
    for scale in (0.1, 0.3, 0.5):  # |X| grows with A's entries: up to ~10 at 0.3
        A = np.tril(rng.standard_normal((C, C)) * scale, -1).astype(f32)
        X = transcribe(A)
        ref = np.linalg.inv(np.eye(C) + A.astype(np.float64))
        err = np.abs(X - ref).max() / max(1.0, np.abs(ref).max())
        print(f"A ~ N(0, {scale}^2): max |X - X_ref| / max(1, |X_ref|) = {err:.2e} (|X_ref| max {np.abs(ref).max():.1f})")
        worst = max(worst, err)
    assert worst < 1e-4, "the two-halves inverse differs from numpy's"
    print("PASS")


if __name__ == "__main__":
    main()
