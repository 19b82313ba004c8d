"""One linear-attention layer of a compiled variant as a torch.nn.Module, built as linac's runtime
builds it (runtime/model/linear_layer.cpp), with the same parameter names, shapes and
initialisation, from what the compiler wrote for the variant (layers/<variant>.py: its kind, its
layer description LAYER and its prologue functions MAPS) and this package's chunk_<variant> op:

    layer = LinearAttention("gated_deltanet", hidden_size=1024)   # x [B, T, 1024] -> [B, T, 1024]

    cache = layer.make_cache(batch=2)                              # inference: continue sequences
    y = layer(prompt, cache=cache)                                 # prefill
    y = layer(next_token, cache=cache)                             # one token, from the cached state

The steps, as the runtime's: per input a token shift, a low-rank or full projection (+ bias), a
short causal depthwise conv, an activation, an L2 norm over the head dim and RoPE (each where the
spec asks); the roles (q, k, v, decay, beta, gate, residual) read an input, a parameter or an index
as it is or through their prologue function (in float32); the recurrence through the package's op;
the residual, the output norm (RMSNorm over each head's values, GroupNorm or LayerNorm), the gate
and the output projection o_proj. Parameters: shift_<input> [hidden], down_<input> [rank, hidden]
and proj_<input> [width, rank] (or proj_<input> [width, hidden]), bias_<input> [width],
conv_<input> [width, 1, size], param_<name> [H or 1, d or 1], norm_weight (and norm_bias),
o_proj [hidden, H * dv].
"""
import importlib
import math

import torch
import torch.nn.functional as F

from . import _recurrence

# The runtime's constants (runtime/model/layers.h, linear_layer.h): fla's norm eps and
# initializer range, the RoPE base of inputs with `rope: true`.
NORM_EPS = 1e-6
INIT_STD = 0.02
ROPE_THETA = 10000.0


def load_layer(variant):
    """The compiled description of `variant` (layers/<variant>.py of this package)."""
    try:
        return importlib.import_module(f"{__package__}.layers.{variant}")
    except ModuleNotFoundError:
        raise ValueError(f"no variant '{variant}' in {__package__} (it has: {', '.join(variants())})") from None


def variants():
    """The variants this package was emitted with."""
    from . import ops
    return sorted(ops.SPEC_SHA256)


def _dim(rule, hidden, heads, what):
    if "absolute" in rule:
        return rule["absolute"]
    width = rule["expand"] * hidden
    if width != int(width) or int(width) % heads:
        raise ValueError(f"{what} = {rule['expand']} * hidden_size {hidden} is not a whole number divisible "
                         f"by the {heads} heads")
    return int(width) // heads


def _param_init(kind, args, shape):
    """A layer parameter's initial values (specs/README.md, params.init; runtime/model/layers.cpp)."""
    a, b = (list(args) + [0.0, 0.0])[:2]
    uniform = lambda lo, hi: lo + (hi - lo) * torch.rand(shape)  # noqa: E731
    if kind == "zeros":
        return torch.zeros(shape)
    if kind == "ones":
        return torch.ones(shape)
    if kind == "constant":
        return torch.full(shape, a)
    if kind == "normal":
        return a * torch.randn(shape)
    if kind == "uniform":
        return uniform(a, b)
    if kind == "log_uniform":
        return torch.log(uniform(a, b))
    if kind == "dt_bias":  # Mamba: dt log-uniform in [a, b], stored as its inverse softplus
        dt = torch.exp(uniform(math.log(a), math.log(b)))
        return dt + torch.log(-torch.expm1(-dt))
    raise ValueError(f"unknown parameter init '{kind}'")


def _activate(x, name):
    if name == "none":
        return x
    if name == "silu":
        return F.silu(x)
    if name == "sigmoid":
        return torch.sigmoid(x)
    if name == "relu":
        return torch.relu(x)
    if name == "tanh":
        return torch.tanh(x)
    if name == "elu1":
        return F.elu(x) + 1.0
    raise ValueError(f"unknown activation '{name}'")


def _rope(x, theta=ROPE_THETA, offset=0, positions=None):
    """fla's RotaryEmbedding, non-interleaved (rotate halves), on x [B, T, H, D] at positions
    offset..offset + T - 1, or at `positions` [1, T] (packed sequences counting from their starts)."""
    T, D = x.shape[1], x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, D, 2, dtype=torch.float64, device=x.device) / D)
    if positions is None:
        positions = torch.arange(offset, offset + T, device=x.device)
    freqs = positions.reshape(T, 1).to(torch.float64) * inv_freq  # [T, D/2]
    cos = freqs.cos().to(x.dtype).view(1, T, 1, D // 2)
    sin = freqs.sin().to(x.dtype).view(1, T, 1, D // 2)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class LayerCache:
    """What a LinearAttention layer keeps to continue sequences one call after another (inference,
    as the runtime's LinearLayerCache): the recurrent state (float32 [B, H, dk, dv], or [B, H * dv]
    for a vector state), each short conv's last W - 1 projected values [B, W - 1, width], the last
    token-shift input [B, hidden_size] and the tokens seen (RoPE's offset). A fresh cache is zeros:
    the start of a sequence. forward(x, cache=...) replaces its tensors with detached new ones."""

    def __init__(self, state, conv, shift):
        self.state, self.conv, self.shift, self.position = state, conv, shift, 0


class LinearAttention(torch.nn.Module):
    """A linear-attention layer of `variant` (a name this package has, see variants()) at width
    hidden_size: forward(x [B, T, hidden_size]) -> [B, T, hidden_size]. layer_idx and num_layers
    are the values of the spec's `layer` and `num_layers` indices (HGRN's per-layer bounds).
    forward(x, cache=make_cache(B)) continues the cached sequences instead: a prompt, then one
    token per call, equal to forward() over the whole sequences."""

    def __init__(self, variant, hidden_size, layer_idx=0, num_layers=1):
        super().__init__()
        self.spec = self._resolve(variant)
        self.op = self._op(self.spec.NAME)
        layer = self.spec.LAYER
        self.vector_state = self.spec.KIND["state"] == "vector"
        self.hidden_size, self.layer_idx, self.num_layers = hidden_size, layer_idx, num_layers
        self.num_heads = layer["heads"]
        self.value_dim = _dim(layer["value_dim"], hidden_size, self.num_heads, "value_dim")
        self.key_dim = 0 if self.vector_state else _dim(layer["key_dim"], hidden_size, self.num_heads, "key_dim")
        for spec_input in layer["inputs"]:
            name, width = spec_input["name"], self._width(spec_input["extent"], spec_input["name"])
            if spec_input.get("token_shift"):  # RWKV's mix coefficients, in [0, 1]
                self._parameter(f"shift_{name}", torch.rand(hidden_size))
            rank = spec_input.get("low_rank", 0)
            if rank:
                self._parameter(f"down_{name}", INIT_STD * torch.randn(rank, hidden_size))
            self._parameter(f"proj_{name}", INIT_STD * torch.randn(width, rank or hidden_size))
            if spec_input.get("bias"):
                self._parameter(f"bias_{name}", torch.zeros(width))
            if spec_input.get("conv"):
                self._parameter(f"conv_{name}", INIT_STD * torch.randn(width, 1, spec_input["conv"]))
        for param in layer["params"]:
            shape = self._field_shape(param["extent"], 1, 1, param["name"])[2:]
            self._parameter(f"param_{param['name']}", _param_init(param["init"], param["init_args"], shape))
        width = self.num_heads * self.value_dim
        if layer["norm"] == "rmsnorm":  # fla's g_norm: one weight over dv, shared by the heads
            self._parameter("norm_weight", torch.ones(self.value_dim))
        elif layer["norm"] in ("groupnorm", "layernorm"):
            self._parameter("norm_weight", torch.ones(width))
            self._parameter("norm_bias", torch.zeros(width))
        self._parameter("o_proj", INIT_STD * torch.randn(hidden_size, width))

    @staticmethod
    def _resolve(variant):
        return load_layer(variant)

    @staticmethod
    def _op(name):
        return getattr(importlib.import_module(f"{__package__}.ops"), f"chunk_{name}")

    def _parameter(self, name, value):
        self.register_parameter(name, torch.nn.Parameter(value))

    def _width(self, extent, name):
        widths = {"scalar": 1, "head": self.num_heads, "key": self.num_heads * self.key_dim,
                  "value": self.num_heads * self.value_dim}
        if extent not in widths:
            raise ValueError(f"'{name}' has extent {extent}, which the linear layer does not support")
        return widths[extent]

    def _field_shape(self, extent, batch, tokens, name):
        shapes = {"scalar": (1, 1), "head": (self.num_heads, 1), "key": (self.num_heads, self.key_dim),
                  "value": (self.num_heads, self.value_dim)}
        if extent not in shapes:
            raise ValueError(f"'{name}' has extent {extent}, which the linear layer does not support")
        return (batch, tokens, *shapes[extent])

    def make_cache(self, batch, device=None, dtype=None):
        """A fresh LayerCache for `batch` sequences on `device` (default: the parameters'), its conv
        and token-shift inputs in `dtype` (default: the parameters'), the state in float32."""
        like = self.o_proj
        device, dtype = device or like.device, dtype or like.dtype
        if self.vector_state:
            state = torch.zeros(batch, self.num_heads * self.value_dim, device=device)
        else:
            state = torch.zeros(batch, self.num_heads, self.key_dim, self.value_dim, device=device)
        conv, shifted = {}, False
        for spec_input in self.spec.LAYER["inputs"]:
            if spec_input.get("conv"):
                width = self._width(spec_input["extent"], spec_input["name"])
                conv[spec_input["name"]] = torch.zeros(batch, spec_input["conv"] - 1, width, device=device, dtype=dtype)
            shifted = shifted or bool(spec_input.get("token_shift"))
        shift = torch.zeros(batch, self.hidden_size, device=device, dtype=dtype) if shifted else None
        return LayerCache(state, conv, shift)

    def _input(self, spec_input, x, cache, positions):
        """positions [1, T] (packed sequences, cu_seqlens) or None: each token's offset in its
        sequence; the token shift, the conv and RoPE then restart at every sequence."""
        name, (batch, tokens) = spec_input["name"], x.shape[:2]
        h = x
        if spec_input.get("token_shift"):  # x + mix * (x_{t-1} - x), x_{-1} = 0 (or the cached input)
            if cache is None:
                previous = F.pad(x, (0, 0, 1, 0))[:, :tokens]
            else:
                previous = torch.cat([cache.shift.to(x.dtype).unsqueeze(1), x[:, :tokens - 1]], 1)
            if positions is not None:
                previous = previous * (positions > 0).unsqueeze(-1).to(x.dtype)
            h = x + getattr(self, f"shift_{name}") * (previous - x)
        if spec_input.get("low_rank"):
            h = F.linear(h, getattr(self, f"down_{name}"))
        h = F.linear(h, getattr(self, f"proj_{name}"), getattr(self, f"bias_{name}", None))
        if spec_input.get("conv"):  # short causal depthwise conv
            weight = getattr(self, f"conv_{name}")
            if positions is not None:  # out_t = sum_lag w[W-1-lag] x_{t-lag}, lag <= positions_t
                width = weight.shape[-1]
                conv = torch.zeros_like(h)
                for lag in range(min(width, tokens)):
                    earlier = F.pad(h, (0, 0, lag, 0))[:, :tokens]
                    inside = (positions >= lag).unsqueeze(-1).to(h.dtype)
                    conv = conv + earlier * inside * weight[:, 0, width - 1 - lag].to(h.dtype)
                h = conv
            elif cache is None:
                h = F.conv1d(h.transpose(1, 2), weight, padding=weight.shape[-1] - 1,
                             groups=h.shape[-1])[..., :tokens].transpose(1, 2)
            else:  # the cached last W - 1 values in place of the zero padding
                full = torch.cat([cache.conv[name].to(h.dtype), h], 1)  # [B, W - 1 + T, width]
                cache.conv[name] = full[:, tokens:].detach().clone()
                h = F.conv1d(full.transpose(1, 2), weight, groups=h.shape[-1]).transpose(1, 2)
        f = _activate(h, spec_input.get("activation", "none"))
        f = f.reshape(self._field_shape(spec_input["extent"], batch, tokens, name))
        if spec_input.get("l2norm"):
            f = f * torch.rsqrt(f.pow(2).sum(-1, keepdim=True) + NORM_EPS)
        if spec_input.get("rope"):
            f = _rope(f, offset=cache.position if cache is not None else 0, positions=positions)
        return f

    def _environment(self, x, cache=None, positions=None):
        env = {spec_input["name"]: self._input(spec_input, x, cache, positions)
               for spec_input in self.spec.LAYER["inputs"]}
        for param in self.spec.LAYER["params"]:
            shape = self._field_shape(param["extent"], 1, 1, param["name"])
            env[param["name"]] = getattr(self, f"param_{param['name']}").to(x.dtype).view(shape)
        index = dict(layer=self.layer_idx, num_layers=self.num_layers, key_dim=self.key_dim,
                     value_dim=self.value_dim, hidden=self.hidden_size)
        for name, value in index.items():
            env[name] = torch.full((1, 1, 1, 1), float(value), dtype=x.dtype, device=x.device)
        env["head"] = torch.arange(self.num_heads, dtype=x.dtype, device=x.device).view(1, 1, -1, 1)
        return env

    def _role(self, role, env, like):
        source = self.spec.LAYER["roles"][role]
        if source != "map":
            return env[source]
        function, names = self.spec.MAPS[role]
        return function(*(env[name].float() for name in names)).to(like.device, like.dtype)

    def _layout(self, role, t, batch, tokens):
        """The role in the kernel's layout (runtime/prologue roleLayout)."""
        H, dk, dv = self.num_heads, self.key_dim, self.value_dim
        if self.vector_state:
            return t.expand(batch, tokens, H, dv).reshape(batch, tokens, H * dv)
        if role in ("q", "k"):
            return t.expand(batch, tokens, H, dk).contiguous()
        if role == "v":
            return t.expand(batch, tokens, H, dv).contiguous()
        if role == "beta":
            return t.expand(batch, tokens, H, 1).reshape(batch, tokens, H)
        if role == "u":
            return t.expand(1, 1, H, dk).reshape(H, dk)
        decay = self.spec.KIND["decay"]
        if decay == "fixed":
            return t.expand(1, 1, H, 1).reshape(H)
        if decay == "scalar":
            return t.expand(batch, tokens, H, 1).reshape(batch, tokens, H)
        return t.expand(batch, tokens, H, dk).contiguous()

    def _norm(self, o):
        kind, H, dv = self.spec.LAYER["norm"], self.num_heads, self.value_dim
        if kind == "none":
            return o
        if kind == "rmsnorm":
            return F.rms_norm(o, (dv,), self.norm_weight.to(o.dtype), NORM_EPS)
        weight, bias = self.norm_weight.to(o.dtype), self.norm_bias.to(o.dtype)
        if kind == "groupnorm":  # a layer norm per head, affine over all H * dv channels
            mean = o.mean(-1, keepdim=True)
            y = (o - mean) * torch.rsqrt((o - mean).pow(2).mean(-1, keepdim=True) + NORM_EPS)
            return y * weight.view(H, dv) + bias.view(H, dv)
        flat = o.reshape(*o.shape[:2], H * dv)
        mean = flat.mean(-1, keepdim=True)
        y = (flat - mean) * torch.rsqrt((flat - mean).pow(2).mean(-1, keepdim=True) + NORM_EPS)
        return (y * weight + bias).view(o.shape)

    def forward(self, x, cache=None, cu_seqlens=None):
        """x [B, T, hidden_size] -> [B, T, hidden_size]; with `cache` (make_cache), the next T tokens
        of the sequences it holds, updating it; with cu_seqlens (int64 [N + 1], B = 1: fla's packed
        sequences), each sequence on its own (state, token shift, conv and RoPE restart at each)."""
        if x.dim() != 3 or x.shape[-1] != self.hidden_size:
            raise ValueError(f"x must be [B, T, {self.hidden_size}], got {list(x.shape)}")
        batch, tokens = x.shape[:2]
        if cache is not None and cache.state.shape[0] != batch:
            raise ValueError(f"the cache holds {cache.state.shape[0]} sequences, x has {batch}")
        positions = None
        if cu_seqlens is not None:
            if cache is not None or batch != 1:
                raise ValueError("cu_seqlens packs sequences into x [1, T, hidden_size], without a cache")
            starts = cu_seqlens.to(x.device, torch.long)
            index = torch.arange(tokens, device=x.device)
            sequence = torch.searchsorted(starts[1:], index, right=True).clamp(max=starts.numel() - 2)
            positions = (index - starts[sequence]).view(1, tokens)
        env = self._environment(x, cache, positions)
        kind, layer = self.spec.KIND, self.spec.LAYER
        state = dict(initial_state=cache.state, output_final_state=True) if cache is not None else {}
        if cu_seqlens is not None:
            state["cu_seqlens"] = cu_seqlens

        def role(name):
            return self._layout(name, self._role(name, env, x), batch, tokens)

        if self.vector_state:
            h, final = self.op(role("v"), role("decay"), **state)
            o = h.view(batch, tokens, self.num_heads, self.value_dim)
        else:
            gates = []
            for gate in _recurrence.gate_names(kind["decay"], kind["update"], kind["readout"]):
                if gate == "u":
                    gates.append(self._layout("u", env[layer["bonus"]], batch, tokens))
                else:
                    gates.append(role("decay" if gate == "g" else "beta"))
            q, k, v = role("q"), role("k"), role("v")
            dtype = next((t.dtype for t in (v, q, k) if t.dtype in (torch.bfloat16, torch.float16)), v.dtype)
            scale = layer["scale"] if layer["scale"] is not None else self.key_dim ** -0.5
            o, final = self.op(q.to(dtype), k.to(dtype), v.to(dtype), *gates, scale=scale, **state)
        if cache is not None:
            cache.state = final.detach()
            if cache.shift is not None:
                cache.shift = x[:, -1].detach().clone()
            cache.position += tokens
        if layer["roles"]["residual"] is not None:
            o = o + self._role("residual", env, x)
        o = self._norm(o)
        if layer["roles"]["gate"] is not None:
            o = o * self._role("gate", env, x)
        o = o.reshape(batch, tokens, self.num_heads * self.value_dim)
        return F.linear(o, self.o_proj.to(o.dtype))
