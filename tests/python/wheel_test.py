"""The installed Python package (`pip install .`; run by wheel_check.sh in a fresh virtual
environment): linac.ops holds every linear variant of generated/ at the spec version generated/
was compiled from, its ops match a float64 recurrence written here (outputs, final states and
gradients), linac.nn's layers equal the runtime's own (layer_dump.cpp writes a layer's parameters,
input and output for every variant), and linac.compile builds a spec that is not in generated/,
caches the build, returns linac.ops for a variant it already has and refuses a changed spec under a
taken name.

usage: LINAC_SOURCE_DIR=... LINAC_EXECUTABLE=.../linac LINAC_LAYER_DUMP=.../linac_layer_dump
       LINAC_CACHE_DIR=... python3 wheel_test.py
(LINAC_TEST_SEED=N repeats a seed; the seed is printed on failure)
"""
import json
import os
import random
import subprocess
import tempfile
import unittest
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open

import linac

SOURCE = Path(os.environ["LINAC_SOURCE_DIR"])
CACHE = Path(os.environ["LINAC_CACHE_DIR"]) / "python"
ON_DEMAND_SPEC = SOURCE / "tests" / "runtime" / "ondemand" / "delta_bonus.yaml"
SEED = int(os.environ.get("LINAC_TEST_SEED", random.randrange(2**31)))
TOL_F32 = 1e-5  # rel-RMS against float64, as the kernel tests' kTolF32
# Two chunks of delta_bonus's 32 tokens (the second partial); gated_deltanet's chunk is 64.
B, T, H, K, V = 2, 45, 2, 8, 16


def rel_rms(got, want):
    got, want = got.double(), want.double()
    return ((got - want).pow(2).mean().sqrt() / want.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def inputs(dtype=torch.float32):
    """Unit-norm keys, log-space g <= 0, beta in (0, 1), a bonus u and an initial state."""
    q = torch.randn(B, T, H, K, dtype=dtype)
    k = F.normalize(torch.randn(B, T, H, K), dim=-1).to(dtype)
    v = torch.randn(B, T, H, V, dtype=dtype)
    g = F.logsigmoid(torch.randn(B, T, H)).to(dtype)
    beta = torch.rand(B, T, H, dtype=dtype)
    u = 0.5 * torch.randn(H, K, dtype=dtype)
    h0 = torch.randn(B, H, K, V, dtype=dtype)
    return q, k, v, g, beta, u, h0


def delta_reference(q, k, v, g, beta, h0, scale, bonus=None):
    """The delta rule with a scalar decay in float64, token by token:
    S_t = (I - beta_t k_t k_t^T) exp(g_t) S_{t-1} + beta_t k_t v_t^T, and the readout
    o_t = scale * S_t^T q_t, or with a bonus u (RWKV-6's exclusive readout)
    o_t = scale * (S_{t-1}^T q_t + (q_t . (u * k_t)) v_t)."""
    q, k, v, g, beta, S = (t.double() for t in (q, k, v, g, beta, h0))
    rows = []
    for t in range(q.shape[1]):
        previous = S
        S = S * g[:, t].exp()[..., None, None]
        error = v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], S)
        S = S + beta[:, t][..., None, None] * k[:, t][..., :, None] * error[..., None, :]
        if bonus is None:
            rows.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
        else:
            weight = (q[:, t] * bonus.double() * k[:, t]).sum(-1, keepdim=True)
            rows.append(scale * (torch.einsum("bhk,bhkv->bhv", q[:, t], previous) + weight * v[:, t]))
    return torch.stack(rows, dim=1), S


def check_against_reference(case, op, reference, arguments):
    """Forward and every gradient of `op` against the float64 `reference` on the same inputs."""
    leaves = [a.clone().requires_grad_() for a in arguments]
    o, ht = op(*leaves)
    want = [a.double().detach().requires_grad_() for a in arguments]
    want_o, want_ht = reference(*want)
    case.assertLess(rel_rms(o, want_o), TOL_F32, f"o (seed {SEED})")
    case.assertLess(rel_rms(ht, want_ht), TOL_F32, f"final state (seed {SEED})")
    d_o, d_ht = torch.randn_like(o), torch.randn_like(ht)
    ((o * d_o).sum() + (ht * d_ht).sum()).backward()
    ((want_o * d_o.double()).sum() + (want_ht * d_ht.double()).sum()).backward()
    for index, (got, expected) in enumerate(zip(leaves, want)):
        case.assertLess(rel_rms(got.grad, expected.grad), TOL_F32, f"gradient of argument {index} (seed {SEED})")


class InstalledOps(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(SEED)

    def test_every_linear_variant_of_generated_at_its_spec_version(self):
        want = {}
        for manifest in (SOURCE / "generated").glob("*/manifest.json"):
            fields = json.loads(manifest.read_text())
            if fields["kind"] == "linear":
                want[fields["name"]] = fields["sha256"]
        self.assertEqual(linac.ops.SPEC_SHA256, want)
        self.assertEqual(sorted(linac.ops.__all__), sorted(f"chunk_{name}" for name in want))

    def test_gated_deltanet_matches_the_float64_recurrence(self):
        q, k, v, g, beta, _, h0 = inputs()
        scale = K ** -0.5

        def op(q, k, v, g, beta, h0):
            return linac.ops.chunk_gated_deltanet(q, k, v, g, beta, initial_state=h0, output_final_state=True)

        def reference(q, k, v, g, beta, h0):
            return delta_reference(q, k, v, g, beta, h0, scale)

        check_against_reference(self, op, reference, [q, k, v, g, beta, h0])


class Layers(unittest.TestCase):
    """linac.nn.LinearAttention against the runtime's LinearMixer with the same parameters."""

    HIDDEN = 64

    def runtime_layer(self, variant, folder):
        path = Path(folder) / f"{variant}.safetensors"
        subprocess.run([os.environ["LINAC_LAYER_DUMP"], variant, str(self.HIDDEN), str(path)], check=True)
        with safe_open(str(path), "pt") as f:
            return {name: f.get_tensor(name) for name in f.keys()}, f.metadata()

    def test_every_variant_equals_the_runtime_layer(self):
        with tempfile.TemporaryDirectory() as folder:
            for variant in sorted(linac.ops.SPEC_SHA256):  # those the runtime build has
                with self.subTest(variant=variant):
                    tensors, meta = self.runtime_layer(variant, folder)
                    x, y = tensors.pop("x"), tensors.pop("y")
                    layer = linac.nn.LinearAttention(variant, self.HIDDEN, layer_idx=int(meta["layer_idx"]),
                                                     num_layers=int(meta["num_layers"]))
                    self.assertEqual(sorted(name for name, _ in layer.named_parameters()), sorted(tensors))
                    layer.load_state_dict(tensors)
                    with torch.no_grad():
                        got = layer(x)
                    self.assertLess(rel_rms(got, y), TOL_F32, variant)

    def test_cached_calls_equal_the_whole_sequence(self):
        """A prompt, a second prompt and single tokens through make_cache's cache give the outputs
        of one call over the whole sequence, for every variant (conv, token shift, RoPE included)."""
        for variant in sorted(linac.ops.SPEC_SHA256):
            with self.subTest(variant=variant):
                torch.manual_seed(SEED)
                layer = linac.nn.LinearAttention(variant, self.HIDDEN)
                x = torch.randn(2, 40, self.HIDDEN)
                with torch.no_grad():
                    whole = layer(x)
                    cache = layer.make_cache(2)
                    self.assertIsInstance(cache, linac.nn.LayerCache)
                    parts = [layer(x[:, :30], cache=cache), layer(x[:, 30:37], cache=cache)]
                    parts += [layer(x[:, t:t + 1], cache=cache) for t in range(37, 40)]
                self.assertEqual(cache.position, 40)
                self.assertLess(rel_rms(torch.cat(parts, 1), whole), TOL_F32, variant)
        with self.assertRaisesRegex(ValueError, "the cache holds 2 sequences, x has 3"):
            layer(torch.randn(3, 1, self.HIDDEN), cache=cache)

    def test_packed_sequences_equal_each_alone(self):
        """cu_seqlens (fla's packed layout): each sequence's output is its output alone, for every
        variant; sequences of one token and of fewer tokens than a conv's taps included."""
        cu = torch.tensor([0, 9, 10, 12, 27, 40])
        for variant in sorted(linac.ops.SPEC_SHA256):
            with self.subTest(variant=variant):
                torch.manual_seed(SEED)
                layer = linac.nn.LinearAttention(variant, self.HIDDEN)
                x = torch.randn(1, 40, self.HIDDEN)
                with torch.no_grad():
                    packed = layer(x, cu_seqlens=cu)
                    alone = torch.cat([layer(x[:, int(a):int(b)]) for a, b in zip(cu[:-1], cu[1:])], 1)
                self.assertLess(rel_rms(packed, alone), TOL_F32, variant)
        with self.assertRaisesRegex(ValueError, "cu_seqlens packs sequences"):
            layer(torch.randn(2, 40, self.HIDDEN), cu_seqlens=cu)

    def test_a_layer_trains(self):
        torch.manual_seed(SEED)
        layer = linac.nn.LinearAttention("gated_deltanet", self.HIDDEN)
        x = torch.randn(2, 45, self.HIDDEN)
        layer(x).pow(2).mean().backward()
        for name, p in layer.named_parameters():
            self.assertIsNotNone(p.grad, name)
            self.assertTrue(torch.isfinite(p.grad).all(), name)
        with self.assertRaisesRegex(ValueError, "no variant 'no_such'"):
            linac.nn.LinearAttention("no_such", self.HIDDEN)
        with self.assertRaisesRegex(ValueError, "x must be"):
            layer(torch.randn(2, 45, self.HIDDEN + 1))


class Compile(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(SEED)

    def test_a_spec_outside_generated_is_built_once_and_matches_the_recurrence(self):
        ops = linac.compile(ON_DEMAND_SPEC)
        builds = sorted(CACHE.glob("delta_bonus-*"))
        self.assertEqual(len(builds), 1, builds)
        self.assertIs(linac.compile(ON_DEMAND_SPEC), ops)
        self.assertEqual(sorted(CACHE.glob("delta_bonus-*")), builds)
        self.assertEqual(ops.__all__, ["chunk_delta_bonus"])
        q, k, v, g, beta, u, h0 = inputs()  # the op takes the log-decay itself (the spec's decay's value)
        scale = K ** -0.5

        def op(q, k, v, g, beta, u, h0):
            return ops.chunk_delta_bonus(q, k, v, g, beta, u, initial_state=h0, output_final_state=True)

        def reference(q, k, v, g, beta, u, h0):
            return delta_reference(q, k, v, g, beta, h0, scale, bonus=u)

        check_against_reference(self, op, reference, [q, k, v, g, beta, u, h0])
        layer = linac.nn.LinearAttention("delta_bonus", 64)
        self.assertEqual(layer(torch.randn(2, 45, 64)).shape, (2, 45, 64))

    def test_a_variant_of_generated_comes_from_linac_ops_without_a_build(self):
        self.assertIs(linac.compile(SOURCE / "specs" / "gla.yaml"), linac.ops)
        self.assertEqual(sorted(CACHE.glob("gla-*")), [])

    def test_a_changed_spec_under_a_taken_name_is_refused(self):
        changed = (SOURCE / "specs" / "gla.yaml").read_text().replace("logsigmoid(gk) / 16", "logsigmoid(gk) / 8")
        self.assertIn("logsigmoid(gk) / 8", changed)
        with tempfile.TemporaryDirectory() as folder:
            spec = Path(folder) / "gla.yaml"
            spec.write_text(changed)
            with self.assertRaisesRegex(ValueError, "a variant named 'gla' is in linac.ops"):
                linac.compile(spec)

    def test_bad_arguments_are_named(self):
        with self.assertRaises(FileNotFoundError):
            linac.compile(SOURCE / "specs" / "no_such_spec.yaml")
        with self.assertRaisesRegex(ValueError, "backends"):
            linac.compile(ON_DEMAND_SPEC, backends="tpu")
        with self.assertRaisesRegex(RuntimeError, "linac emit failed"):
            linac.compile(SOURCE / "specs" / "attention.yaml")


if __name__ == "__main__":
    unittest.main()
