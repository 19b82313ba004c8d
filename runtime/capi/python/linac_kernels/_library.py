"""The torch.library fragment the package's ops live in ("linac"), and the registration every op
family shares (_recurrence.py for matrix states, _scan.py for vector states)."""
import torch

LIBRARY = torch.library.Library("linac", "FRAGMENT")


def register(op, variant):
    """Registers op's kernels for linac::<variant>_fwd and linac::<variant>_bwd, which op defined
    on LIBRARY: op._forward / op._backward on CPU and CUDA (the C API picks its backend by the
    tensors' device), their fake kernels for torch.compile, and the forward's autograd formula
    (op._autograd_backward with op._setup_context). Returns the two ops."""
    for device in ("CPU", "CUDA"):
        LIBRARY.impl(f"{variant}_fwd", op._forward, device)
        LIBRARY.impl(f"{variant}_bwd", op._backward, device)
    qualified = f"linac::{variant}"
    torch.library.register_fake(f"{qualified}_fwd", op._forward_fake, lib=LIBRARY)
    torch.library.register_fake(f"{qualified}_bwd", op._backward_fake, lib=LIBRARY)
    torch.library.register_autograd(f"{qualified}_fwd", op._autograd_backward,
                                    setup_context=op._setup_context, lib=LIBRARY)
    ops = getattr(torch.ops.linac, f"{variant}_fwd"), getattr(torch.ops.linac, f"{variant}_bwd")
    return ops[0].default, ops[1].default
