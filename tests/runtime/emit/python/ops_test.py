"""The PyTorch package of an emitted gated_deltanet + hgrn package (linac_kernels on PYTHONPATH;
run by emit_package_test.cpp after it installs the package): chunk_gated_deltanet and chunk_hgrn
against float64 per-token recurrences written here, autograd against those recurrences'
gradients and against finite differences, the torch.library registration, and the refusals of
bad arguments.

The C API computes in float32, bfloat16 or float16 (no float64), so gradcheck runs in float32
with loose tolerances; the float64 reference checks the gradients tightly.

usage: python3 ops_test.py   (LINAC_TEST_SEED=N repeats a seed; the seed is printed on failure)
"""
import os
import random
import unittest
import warnings

import torch
import torch.nn.functional as F

import linac_kernels
from linac_kernels.ops import chunk_gated_deltanet, chunk_hgrn

SEED = int(os.environ.get("LINAC_TEST_SEED", random.randrange(2**31)))
# rel-RMS gates against the float64 reference (the C++ kernel tests' kTolF32 and kTolHalf).
TOL_F32 = 1e-5
TOL_BF16 = 2e-2
# gradcheck in float32: central differences with step EPS are accurate to about
# EPS^2 + float32 rounding / EPS, about 1e-4 for inputs of size 1.
GRADCHECK = dict(eps=1e-3, atol=1e-2, rtol=1e-2)
# Two chunks of the spec's 64 tokens, the second partial.
B, T, H, K, V = 2, 70, 2, 8, 16


def rel_rms(got, want):
    got, want = got.double(), want.double()
    return ((got - want).pow(2).mean().sqrt() / want.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def inputs(batch=B, tokens=T, heads=H, key_dim=K, value_dim=V, states=None, dtype=torch.float32):
    """fla's Gated DeltaNet inputs: unit-norm keys, g = logsigmoid (log-space, <= 0), beta in (0, 1)."""
    q = torch.randn(batch, tokens, heads, key_dim).to(dtype)
    k = F.normalize(torch.randn(batch, tokens, heads, key_dim), dim=-1).to(dtype)
    v = torch.randn(batch, tokens, heads, value_dim).to(dtype)
    g = F.logsigmoid(torch.randn(batch, tokens, heads))
    beta = torch.rand(batch, tokens, heads)
    h0 = torch.randn(batch if states is None else states, heads, key_dim, value_dim)
    return q, k, v, g, beta, h0


def reference(q, k, v, g, beta, scale, initial_state=None, cu_seqlens=None):
    """The recurrence of the package's kernels/common/recurrence.h in float64, token by token:
    S_t = (I - beta_t k_t k_t^T) exp(g_t) S_{t-1} + beta_t k_t v_t^T, o_t = scale * S_t^T q_t."""
    q, k, v, g, beta = (t.double() for t in (q, k, v, g, beta))
    batch, tokens, heads, key_dim = q.shape
    spans = [(b, 0, tokens) for b in range(batch)] if cu_seqlens is None else \
        [(0, int(s), int(e)) for s, e in zip(cu_seqlens[:-1], cu_seqlens[1:])]
    rows = [[None] * tokens for _ in range(batch)]
    states = []
    for n, (b, start, end) in enumerate(spans):
        S = torch.zeros(heads, key_dim, v.shape[-1], dtype=torch.float64) if initial_state is None \
            else initial_state[n].double()
        for t in range(start, end):
            S = S * g[b, t].exp()[:, None, None]
            kt = k[b, t]
            error = v[b, t] - torch.einsum("hk,hkv->hv", kt, S)
            S = S + beta[b, t][:, None, None] * kt[:, :, None] * error[:, None, :]
            rows[b][t] = scale * torch.einsum("hk,hkv->hv", q[b, t], S)
        states.append(S)
    o = torch.stack([torch.stack(row) for row in rows])
    return o, torch.stack(states)


class ChunkGatedDeltaNet(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(SEED)

    def test_forward_matches_the_float64_recurrence(self):
        q, k, v, g, beta, h0 = inputs()
        o, ht = chunk_gated_deltanet(q, k, v, g, beta, initial_state=h0, output_final_state=True)
        want_o, want_ht = reference(q, k, v, g, beta, K ** -0.5, h0)
        self.assertEqual((o.dtype, ht.dtype), (torch.float32, torch.float32))
        self.assertLess(rel_rms(o, want_o), TOL_F32)
        self.assertLess(rel_rms(ht, want_ht), TOL_F32)
        o_only, none = chunk_gated_deltanet(q, k, v, g, beta, scale=0.5)
        self.assertIsNone(none)
        self.assertLess(rel_rms(o_only, reference(q, k, v, g, beta, 0.5)[0]), TOL_F32)

    def test_packed_sequences_follow_cu_seqlens(self):
        q, k, v, g, beta, h0 = inputs(batch=1, states=2)
        cu_seqlens = torch.tensor([0, 30, T])
        o, ht = chunk_gated_deltanet(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                     cu_seqlens=cu_seqlens)
        want_o, want_ht = reference(q, k, v, g, beta, K ** -0.5, h0, cu_seqlens)
        self.assertLess(rel_rms(o, want_o), TOL_F32)
        self.assertLess(rel_rms(ht, want_ht), TOL_F32)

    def test_bfloat16_inputs_give_bfloat16_outputs(self):
        q, k, v, g, beta, h0 = inputs(dtype=torch.bfloat16)
        o, ht = chunk_gated_deltanet(q, k, v, g, beta, initial_state=h0, output_final_state=True)
        want_o, want_ht = reference(q, k, v, g, beta, K ** -0.5, h0)
        self.assertEqual((o.dtype, ht.dtype), (torch.bfloat16, torch.float32))
        self.assertLess(rel_rms(o, want_o), TOL_BF16)
        self.assertLess(rel_rms(ht, want_ht), TOL_BF16)

    def test_gradients_match_the_float64_recurrence(self):
        leaves = [t.requires_grad_() for t in inputs()]
        d_o, d_ht = torch.randn(B, T, H, V), torch.randn(B, H, K, V)
        o, ht = chunk_gated_deltanet(*leaves[:5], initial_state=leaves[5], output_final_state=True)
        got = torch.autograd.grad((o * d_o).sum() + (ht * d_ht).sum(), leaves)
        want_o, want_ht = reference(*leaves[:5], K ** -0.5, leaves[5])
        want = torch.autograd.grad((want_o * d_o.double()).sum() + (want_ht * d_ht.double()).sum(), leaves)
        for name, a, b in zip(("q", "k", "v", "g", "beta", "initial_state"), got, want):
            self.assertEqual(a.dtype, torch.float32, name)
            self.assertLess(rel_rms(a, b), TOL_F32, f"d {name}")

    def test_gradcheck_float32(self):
        leaves = [t.requires_grad_() for t in inputs(batch=1, tokens=5, heads=1, key_dim=4, value_dim=4)]

        def call(q, k, v, g, beta, h0):
            return chunk_gated_deltanet(q, k, v, g, beta, initial_state=h0, output_final_state=True)

        with warnings.catch_warnings():  # gradcheck's advice to use float64, which the kernels lack
            warnings.filterwarnings("ignore", message=r"Input #\d+ requires gradient and is not a double")
            self.assertTrue(torch.autograd.gradcheck(call, leaves, **GRADCHECK))

    def test_ops_are_registered_for_torch_compile(self):
        q, k, v, g, beta, h0 = inputs(batch=1, tokens=5, heads=1, key_dim=4, value_dim=4)
        for t in (q, k, v, g, beta):
            t.requires_grad_()
        args = (q, k, v, g, beta, K ** -0.5, h0, None)
        # schema, fake (meta) kernel, autograd registration, AOT dispatch.
        torch.library.opcheck(torch.ops.linac.gated_deltanet_fwd.default, args)
        compiled = torch.compile(chunk_gated_deltanet, backend="eager", fullgraph=True)
        o, _ = compiled(q, k, v, g, beta)
        self.assertLess(rel_rms(o, reference(q, k, v, g, beta, q.shape[-1] ** -0.5)[0]), TOL_F32)

    def test_bad_arguments_are_refused_naming_them(self):
        q, k, v, g, beta, h0 = inputs()
        one = inputs(batch=1)
        refusals = [
            (TypeError, r"chunk_gated_deltanet: q is torch\.float64", (q.double(), k, v, g, beta), {}),
            (TypeError, r"chunk_gated_deltanet: g is torch\.int64, expected a floating-point", (q, k, v, g.long(), beta), {}),
            (ValueError, r"k has shape \[2, 70, 2, 9\], expected \[B, T, H, dk\]", (q, torch.randn(B, T, H, K + 1), v, g, beta), {}),
            (ValueError, r"q has shape \[2, 70, 16\], expected \[B, T, H, dk\]", (q.flatten(2), k, v, g, beta), {}),
            (ValueError, r"v is not row-major contiguous", (q, k, v.transpose(1, 2).contiguous().transpose(1, 2), g, beta), {}),
            (ValueError, r"k is on meta but q is on cpu", (q, k.to("meta"), v, g, beta), {}),
            (ValueError, r"initial_state has shape \[3, 2, 8, 16\]", (q, k, v, g, beta), {"initial_state": torch.randn(3, H, K, V)}),
            (ValueError, r"cu_seqlens ends at 69, expected T = 70", one[:5], {"cu_seqlens": torch.tensor([0, 30, T - 1])}),
            (ValueError, r"cu_seqlens decreases at index 2", one[:5], {"cu_seqlens": torch.tensor([0, 40, 30, T])}),
            (ValueError, r"cu_seqlens\[0\] is 1, expected 0", one[:5], {"cu_seqlens": torch.tensor([1, T])}),
            (ValueError, r"B must be 1", (q, k, v, g, beta), {"cu_seqlens": torch.tensor([0, T])}),
            (TypeError, r"cu_seqlens is torch\.float32, expected an integer", one[:5], {"cu_seqlens": torch.tensor([0.0, T])}),
            (ValueError, r"q has an empty dimension \[2, 0, 2, 8\]", tuple(t[:, :0] for t in (q, k, v, g, beta)), {}),
        ]
        for error, pattern, args, kwargs in refusals:
            with self.subTest(pattern=pattern), self.assertRaisesRegex(error, pattern):
                chunk_gated_deltanet(*args, **kwargs)

class ChunkHgrn(unittest.TestCase):
    """The vector-state scan: x, g, h [B, T, D], states [N, D]."""

    D = 24

    def setUp(self):
        torch.manual_seed(SEED)

    @staticmethod
    def reference(x, g, initial_state, cu_seqlens=None):
        """h_t = exp(g_t) * h_{t-1} + x_t per channel, in float64."""
        x, g = x.double(), g.double()
        batch, tokens, _ = x.shape
        spans = [(b, 0, tokens) for b in range(batch)] if cu_seqlens is None else \
            [(0, int(s), int(e)) for s, e in zip(cu_seqlens[:-1], cu_seqlens[1:])]
        rows = [[None] * tokens for _ in range(batch)]
        states = []
        for n, (b, start, end) in enumerate(spans):
            h = initial_state[n].double()
            for t in range(start, end):
                h = g[b, t].exp() * h + x[b, t]
                rows[b][t] = h
            states.append(h)
        return torch.stack([torch.stack(row) for row in rows]), torch.stack(states)

    def inputs(self, batch=B, tokens=T, states=None):
        x = torch.randn(batch, tokens, self.D)
        g = F.logsigmoid(torch.randn(batch, tokens, self.D))
        return x, g, torch.randn(batch if states is None else states, self.D)

    def test_forward_and_gradients_match_the_float64_scan(self):
        leaves = [t.requires_grad_() for t in self.inputs()]
        h, ht = chunk_hgrn(*leaves[:2], initial_state=leaves[2], output_final_state=True)
        want_h, want_ht = self.reference(*leaves)
        self.assertLess(rel_rms(h, want_h), TOL_F32)
        self.assertLess(rel_rms(ht, want_ht), TOL_F32)
        d_h, d_ht = torch.randn_like(h), torch.randn_like(ht)
        got = torch.autograd.grad((h * d_h).sum() + (ht * d_ht).sum(), leaves)
        want = torch.autograd.grad((want_h * d_h.double()).sum() + (want_ht * d_ht.double()).sum(), leaves)
        for name, a, b in zip(("x", "g", "initial_state"), got, want):
            self.assertLess(rel_rms(a, b), TOL_F32, f"d {name}")

    def test_packed_sequences_follow_cu_seqlens(self):
        x, g, h0 = self.inputs(batch=1, states=2)
        cu_seqlens = torch.tensor([0, 30, T])
        h, ht = chunk_hgrn(x, g, initial_state=h0, output_final_state=True, cu_seqlens=cu_seqlens)
        want_h, want_ht = self.reference(x, g, h0, cu_seqlens)
        self.assertLess(rel_rms(h, want_h), TOL_F32)
        self.assertLess(rel_rms(ht, want_ht), TOL_F32)

    def test_gradcheck_float32(self):
        leaves = [t.requires_grad_() for t in self.inputs(batch=1, tokens=5)]
        with warnings.catch_warnings():  # gradcheck's advice to use float64, which the kernels lack
            warnings.filterwarnings("ignore", message=r"Input #\d+ requires gradient and is not a double")
            self.assertTrue(torch.autograd.gradcheck(
                lambda x, g, h0: chunk_hgrn(x, g, initial_state=h0, output_final_state=True), leaves, **GRADCHECK))

    def test_bad_arguments_are_refused_naming_them(self):
        x, g, _ = self.inputs()
        refusals = [
            (TypeError, r"chunk_hgrn: x is torch\.float64", (x.double(), g), {}),
            (ValueError, r"g has shape \[2, 70, 23\], expected \[B, T, D\]", (x, g[..., 1:]), {}),
            (ValueError, r"chunk_hgrn: g is on meta but x is on cpu", (x, g.to("meta")), {}),
            (ValueError, r"cu_seqlens ends at 69, expected T = 70", (x[:1], g[:1]),
             {"cu_seqlens": torch.tensor([0, T - 1])}),
        ]
        for error, pattern, args, kwargs in refusals:
            with self.subTest(pattern=pattern), self.assertRaisesRegex(error, pattern):
                chunk_hgrn(*args, **kwargs)


class Package(unittest.TestCase):
    def test_the_package_reports_its_backends(self):
        self.assertRegex(linac_kernels.__version__, r"^\d+\.\d+\.\d+$")
        self.assertFalse(linac_kernels.has_cuda(), "the CI package is built for the CPU only")


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    if not result.wasSuccessful():
        print(f"seed {SEED} (LINAC_TEST_SEED={SEED} repeats it)")
    raise SystemExit(0 if result.wasSuccessful() else 1)
