"""fla's Hopper guard, bypassed for timing only.

fla 0.6 refuses its gated backward (chunk_bwd_dqkwg: Mamba-2's simple GLA, Gated DeltaNet) on
Hopper with Triton >= 3.4 and < 3.7.1, because that Triton miscompiles it (fla issue #640); the GPU
machine has Triton 3.6. `bypass_hopper_guard()` lets the kernels run so their speed can be measured
beside linac's; their results are wrong there, so rows timed this way say `guard_bypassed` and are
never used for accuracy.
"""


def bypass_hopper_guard():
    import fla.ops.common.chunk_o as chunk_o
    chunk_o.TRITON_ABOVE_3_7_1 = True
