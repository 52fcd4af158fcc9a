"""Beyond the paper: Llama-style decoders (RMSNorm, rotary positions, grouped-query heads) as maps with closed forms.

``random_llama`` builds a small one offline from a ``transformers`` config (with GPT-2's tokenizer for text);
``lipnb.models.load("smollm2")`` gives a pretrained one. Rotary positions rotate the query and key of the token
at position ``p`` by ``R_p``, so the score of query ``i`` and key ``j`` is ``<A_{i-j} x_i, x_j>`` with the
per-offset matrix ``A_m = s K_gᵀ R_m Q_h`` (:func:`offset_matrices`): Lemma C.2 holds with that per-pair matrix,
and :class:`RotaryAttentionMap` applies its Jacobian in closed form. ``attention_map`` gives a layer's
``"mha"`` (what ``LlamaAttention`` computes on the tokens entering it, causal), ``"block"`` (``X +
mha(RMSNorm(X))``) or one head, with the rotation on (as the model runs) or off. ``offset_spectra`` gives
Prop. 3.4's ``γ_h`` per offset, ``aligned_input`` the input on which a rotary head computes the unrotated one
(Sec. 5.2 under rotary positions). Their inputs, and sweeps over text, are :mod:`lipnb.models`' and
:mod:`lipnb.experiments.real_text`'s, as for every model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import LlamaConfig, LlamaModel

from ..arguments import check_bool, check_index, check_input_dtype, check_positive_int, check_width
from ..core.attention import causal_mask, check_tokens, mask_future
from ..core.inputs import HeadSpectrum, head_spectra
from ..core.linearization import ClosedForm
from ..core.sublayers import SublayerLinearization

__all__ = [
    "RotaryAttentionMap",
    "RotaryBlockMap",
    "RotaryLinearization",
    "aligned_input",
    "attention_map",
    "head_A",
    "is_llama",
    "module_map",
    "offset_matrices",
    "offset_spectra",
    "random_llama",
]

_CONFIG = {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 8,
          "num_key_value_heads": 2, "vocab_size": 50257, "max_position_embeddings": 1024}
_LLAMA_KINDS = ("mha", "self", "block")


def is_llama(model: nn.Module) -> bool:
    """Whether ``model`` is a ``LlamaModel``."""
    return isinstance(model, LlamaModel)


def random_llama(seed: int = 0) -> LlamaModel:
    """A Llama-style decoder of :data:`_CONFIG` with the random weights of ``torch.manual_seed(seed)``, eval, frozen."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaModel(LlamaConfig(**_CONFIG, attn_implementation="eager"))
    return model.eval().requires_grad_(False)


def _check(model: nn.Module, layer: int) -> nn.Module:
    if not is_llama(model):
        raise TypeError(f"expected a LlamaModel; got {type(model).__name__}")
    return model.layers[check_index(layer, "layer", model.config.num_hidden_layers)].self_attn


def _rotate(x: Tensor, angles: Tensor, *, transpose: bool = False) -> Tensor:
    """``R_p x`` (``transpose``: ``R_pᵀ x``) for rows ``x`` ``(..., n, k)`` at angles ``(n, k/2)``: the pairs of
    coordinates ``(c, c + k/2)`` turn by ``angles[p, c]``, as ``transformers``' ``apply_rotary_pos_emb``."""
    half = x.shape[-1] // 2
    cos, sin = angles.cos().to(x), angles.sin().to(x)
    if transpose:
        sin = -sin
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


class RotaryLinearization(ClosedForm):
    """Lemma C.2 with a per-pair matrix at a batch ``X``: ``s_ij = scale <R_i Q x_i, R_j K x_j>``, causal.

    Stores the rotated projections ``q`` ``(B, H, n, k)``, ``key`` and ``v`` (expanded to the ``H`` heads),
    ``P`` and the head outputs ``O = P v``; ``jvp`` differentiates ``q`` and ``key`` through the same rotations
    (``dS = scale (dq keyᵀ + q dkeyᵀ)``, ``dO = (P ⊙ dS) v - rowsum(P ⊙ dS) O + P dv``) and ``vjp`` is its adjoint.
    """

    batched = ("q", "key", "v", "P", "O")

    def __init__(self, owner: RotaryAttentionMap, angles: Tensor, q: Tensor, key: Tensor, v: Tensor, P: Tensor,
                 heads_out: Tensor, output: Tensor) -> None:
        self.owner, self.angles, self.q, self.key, self.v, self.P, self.O = owner, angles, q, key, v, P, heads_out
        self.output = output

    def jvp(self, E: Tensor) -> Tensor:
        """``D_X f(E)``."""
        m = self.owner
        dq, dk, dv = m._project(E, self.angles)
        T = self.P * (dq @ self.key.mT + self.q @ dk.mT) * m.scaling
        dO = T @ self.v - T.sum(-1, keepdim=True) * self.O + self.P @ dv
        return m._combine(dO)

    def vjp(self, G: Tensor) -> Tensor:
        """``D_X fᵀ(G)``."""
        m = self.owner
        dO = m._split(G)
        dS = self.P * (dO @ self.v.mT - (dO * self.O).sum(-1, keepdim=True)) * m.scaling
        return m._project_adjoint(dS @ self.key, dS.mT @ self.q, self.P.mT @ dO, self.angles)




@dataclass(frozen=True, eq=False)
class RotaryAttentionMap:
    """Causal grouped-query attention with rotary positions 0..n-1 (Def 2.2, 2.5 with ``A_{i-j}``), ``(B, n, d)``.

    ``Wq`` ``(H k, d)``, ``Wk`` and ``Wv`` ``(G k, d)`` (head ``h`` uses key-value group ``h // (H/G)``),
    ``Wo`` ``(d_out, H k)`` or ``None`` (the heads' outputs side by side), rotary frequencies ``inv_freq``
    ``(k/2,)`` (all zero: no rotation) and score scale ``scaling``. Parameters are cast to the input's dtype and
    device; the angles ``p * inv_freq`` are computed in that dtype. ``linearize`` gives the closed form.
    """

    Wq: Tensor
    Wk: Tensor
    Wv: Tensor
    Wo: Tensor | None
    inv_freq: Tensor
    scaling: float

    def __post_init__(self) -> None:
        k = 2 * self.inv_freq.numel()
        if self.Wq.shape[0] % k or self.Wk.shape != self.Wv.shape or self.Wk.shape[0] % k:
            raise ValueError(f"Wq must be (H*{k}, d) and Wk, Wv (G*{k}, d); got {tuple(self.Wq.shape)}, "
                             f"{tuple(self.Wk.shape)}, {tuple(self.Wv.shape)}")
        H, G = self.Wq.shape[0] // k, self.Wk.shape[0] // k
        if H % G:
            raise ValueError(f"{H} query heads cannot share {G} key-value heads evenly")
        object.__setattr__(self, "_cast", {})

    @property
    def head_dim(self) -> int:
        return 2 * self.inv_freq.numel()

    def _weights(self, X: Tensor) -> tuple[Tensor, ...]:
        key = (X.dtype, X.device)
        if key not in self._cast:
            self._cast[key] = tuple(None if w is None else w.detach().to(X)
                                    for w in (self.Wq, self.Wk, self.Wv, self.Wo, self.inv_freq))
        return self._cast[key]

    def _angles(self, X: Tensor) -> Tensor:
        return torch.arange(X.shape[1], dtype=X.dtype, device=X.device)[:, None] * self._weights(X)[4]

    def _heads(self, Y: Tensor, groups: bool) -> Tensor:
        """``(B, n, m k)`` to ``(B, H, n, k)``, key-value groups repeated over their query heads."""
        B, n, k = Y.shape[0], Y.shape[1], self.head_dim
        Y = Y.view(B, n, -1, k).transpose(1, 2)
        H = self.Wq.shape[0] // k
        return Y.repeat_interleave(H // Y.shape[1], dim=1) if groups else Y

    def _project(self, X: Tensor, angles: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        Wq, Wk, Wv = self._weights(X)[:3]
        q = _rotate(self._heads(X @ Wq.mT, False), angles)
        key = _rotate(self._heads(X @ Wk.mT, True), angles)
        return q, key, self._heads(X @ Wv.mT, True)

    def _project_adjoint(self, gq: Tensor, gk: Tensor, gv: Tensor, angles: Tensor) -> Tensor:
        """Adjoint of :meth:`_project`: per-head cotangents ``(B, H, n, k)`` to ``(B, n, d)``."""
        Wq, Wk, Wv = self._weights(gq)[:3]
        B, H, n, k = gq.shape
        G = Wk.shape[0] // k

        def tokens(g: Tensor) -> Tensor:
            return g.transpose(1, 2).reshape(B, n, -1)

        def grouped(g: Tensor) -> Tensor:
            return g.view(B, G, H // G, n, k).sum(2)

        return (tokens(_rotate(gq, angles, transpose=True)) @ Wq
                + tokens(grouped(_rotate(gk, angles, transpose=True))) @ Wk + tokens(grouped(gv)) @ Wv)

    def _combine(self, heads_out: Tensor) -> Tensor:
        B, H, n, k = heads_out.shape
        out = heads_out.transpose(1, 2).reshape(B, n, H * k)
        Wo = self._weights(heads_out)[3]
        return out if Wo is None else out @ Wo.mT

    def _split(self, G: Tensor) -> Tensor:
        Wo = self._weights(G)[3]
        return self._heads(G if Wo is None else G @ Wo, False)

    def flops(self, n: int) -> dict[str, int]:
        """Matrix-product FLOPs per input of length ``n`` (as :meth:`lipnb.core.jacobian.MultiHeadMap.flops`):
        with ``p = H k + 2 G k`` projection rows, the ``linearize`` forward pass ``2 n d p + 4 n² H k``, a product
        ``4 n d p + 16 n² H k`` (``"attention"``: its second term), plus ``2 n H k d_out`` per output block."""
        n = check_positive_int(n, "n")
        k, d = self.head_dim, self.Wq.shape[1]
        H, p = self.Wq.shape[0] // k, self.Wq.shape[0] + 2 * self.Wk.shape[0]
        out = 0 if self.Wo is None else 2 * n * H * k * self.Wo.shape[0]
        return {"linearize": 2 * n * d * p + 4 * n * n * H * k + out,
                "product": 4 * n * d * p + 16 * n * n * H * k + 2 * out,
                "attention": 16 * n * n * H * k}

    def linearize(self, X: Tensor) -> RotaryLinearization:
        """The forward pass at ``X`` and the closed-form ``jvp``/``vjp`` (no autograd)."""
        self._check_input(X)
        with torch.no_grad():
            X = X.detach()
            angles = self._angles(X)
            q, key, v = self._project(X, angles)
            P = torch.softmax(mask_future(q @ key.mT * self.scaling), dim=-1)
            out = P @ v
            return RotaryLinearization(self, angles, q, key, v, P, out, self._combine(out))

    def _check_input(self, X: Tensor) -> None:
        """``ValueError`` unless ``X`` is a batch of tokens of the map's width (before any matrix product)."""
        check_tokens(X)
        check_input_dtype(X, self.Wq.dtype)
        check_width(X, self.Wq.shape[1], "the map")

    def __call__(self, X: Tensor) -> Tensor:
        self._check_input(X)
        q, key, v = self._project(X, self._angles(X))
        return self._combine(torch.softmax(mask_future(q @ key.mT * self.scaling), dim=-1) @ v)


class _RMSNormLinearization(ClosedForm):
    """Sec. 2.3: the Jacobian of ``RMSNorm(x) = γ ⊙ z``, ``z = x / s``, ``s = sqrt(mean x² + eps)``, token by token:
    ``γ ⊙ (e - z mean(z ⊙ e)) / s``; the middle projection is symmetric, so ``Dᵀ(g)`` applies it to ``γ ⊙ g``."""

    batched, parameters = ("z", "inv_rms"), ("gamma",)

    def __init__(self, z: Tensor, inv_rms: Tensor, gamma: Tensor, output: Tensor) -> None:
        self.z, self.inv_rms, self.gamma, self.output = z, inv_rms, gamma, output

    @classmethod
    def at(cls, X: Tensor, gamma: Tensor, eps: float) -> _RMSNormLinearization:
        """The RMSNorm of every token of ``X`` and what its Jacobian needs."""
        inv_rms = torch.rsqrt(X.square().mean(-1, keepdim=True) + eps)
        z = X * inv_rms
        return cls(z, inv_rms, gamma, gamma * z)

    def _project(self, E: Tensor) -> Tensor:
        return (E - self.z * (self.z * E).mean(-1, keepdim=True)) * self.inv_rms

    def jvp(self, E: Tensor) -> Tensor:
        """``D RMSNorm(E)``."""
        return self._project(E) * self.gamma

    def vjp(self, G: Tensor) -> Tensor:
        """``D RMSNormᵀ(G)``."""
        return self._project(G * self.gamma)




@dataclass(frozen=True, eq=False)
class RotaryBlockMap:
    """A Llama decoder layer's attention sub-layer (pre-norm, Sec. 2.3): ``X + f(RMSNorm(X))`` with ``f`` a
    :class:`RotaryAttentionMap`; ``linearize`` composes the closed forms (``J = I + F N``)."""

    attention: RotaryAttentionMap
    gamma: Tensor
    eps: float

    def __call__(self, X: Tensor) -> Tensor:
        self.attention._check_input(X)
        gamma = self.gamma.to(X)
        return X + self.attention(gamma * X * torch.rsqrt(X.square().mean(-1, keepdim=True) + self.eps))

    def linearize(self, X: Tensor) -> SublayerLinearization:
        """The closed-form Jacobian products at ``X`` (no autograd)."""
        self.attention._check_input(X)
        with torch.no_grad():
            X = X.detach()
            norm = _RMSNormLinearization.at(X, self.gamma.to(X), self.eps)
            attention = self.attention.linearize(norm.output)
            return SublayerLinearization(attention, norm, False, X + attention.output)


def _rotary_frequencies(model: nn.Module) -> Tensor:
    """``θ^{-2c/k}``, ``c = 0..k/2-1``, in float64 (``transformers`` rounds them to float32)."""
    rope, k = model.config.rope_parameters, model.layers[0].self_attn.head_dim
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"only the default rotary embedding is implemented; this model has {rope['rope_type']!r}")
    return 1.0 / rope["rope_theta"] ** (torch.arange(0, k, 2, dtype=torch.float64) / k)


def attention_map(model: nn.Module, layer: int, kind: str = "mha", *, head: int | None = None,
                  rotary: bool = True) -> RotaryAttentionMap | RotaryBlockMap:
    """Layer ``layer``'s attention with rotary positions ``0..n-1`` (``rotary=False``: none), causal, ``(B, n, d)``.

    ``"mha"`` (and ``"self"``, the same module): ``LlamaAttention`` on the tokens entering it (after RMSNorm),
    grouped-query heads and output projection; with ``head``, that head alone, ``f_h(X)``, ``(B, n, k)``.
    ``"block"``: ``X + mha(RMSNorm(X))`` on the hidden state entering the layer. Closed-form Jacobians.
    """
    attn = _check(model, layer)
    if kind not in _LLAMA_KINDS:
        raise ValueError(f"unknown kind {kind!r}; valid kinds: {', '.join(_LLAMA_KINDS)}")
    if attn.q_proj.bias is not None or attn.o_proj.bias is not None:
        raise ValueError("attention biases are not implemented for Llama-style maps")
    inv_freq = _rotary_frequencies(model)
    if not check_bool(rotary, "rotary"):
        inv_freq = torch.zeros_like(inv_freq)
    Wq, Wk, Wv, Wo = (m.weight.detach() for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj))
    if head is not None:
        if kind == "block":
            raise ValueError("head is for kind='mha' only")
        k = attn.head_dim
        head = check_index(head, "head", model.config.num_attention_heads)
        g = head // attn.num_key_value_groups
        Wq, Wk, Wv, Wo = Wq[head * k:(head + 1) * k], Wk[g * k:(g + 1) * k], Wv[g * k:(g + 1) * k], None
    f = RotaryAttentionMap(Wq, Wk, Wv, Wo, inv_freq, float(attn.scaling))
    if kind != "block":
        return f
    norm = model.layers[layer].input_layernorm
    return RotaryBlockMap(f, norm.weight.detach(), float(norm.variance_epsilon))


def module_map(model: nn.Module, layer: int) -> Callable[[Tensor], Tensor]:
    """Layer ``layer``'s own ``LlamaAttention`` module as a map ``(B, n, d) -> (B, n, d)``: rotary positions
    ``0..n-1`` from the model's ``rotary_emb``, an explicit causal mask; what :func:`attention_map` ``"mha"``
    computes in closed form, run by transformers (the paper's method differentiates such a module)."""
    attn = _check(model, layer)

    def f(X: Tensor) -> Tensor:
        n = X.shape[1]
        cos, sin = model.rotary_emb(X, torch.arange(n, device=X.device)[None].expand(X.shape[0], -1))
        return attn(hidden_states=X, position_embeddings=(cos, sin), attention_mask=causal_mask(X))[0]

    return f


def offset_matrices(model: nn.Module, layer: int, offsets: Sequence[int] = (0,)) -> Tensor:
    """Rotary Def 2.1: ``A_h(m) = scale K_gᵀ R_m Q_h`` of every head ``h`` (group ``g``) at each offset ``m = i - j``,
    ``(len(offsets), H, d, d)``, float64: the score of query ``i`` and key ``j`` is ``<A_h(i-j) x_i, x_j>``."""
    attn = _check(model, layer)
    H, k = model.config.num_attention_heads, attn.head_dim
    Q = attn.q_proj.weight.detach().double().view(H, k, -1)
    K = attn.k_proj.weight.detach().double().view(-1, k, Q.shape[-1]).repeat_interleave(attn.num_key_value_groups, 0)
    angles = torch.as_tensor(offsets, dtype=torch.float64)[:, None] * _rotary_frequencies(model)
    RQ = torch.stack([_rotate(Q.mT, a[None]).mT for a in angles])      # (M, H, k, d): R_m Q_h
    return K.mT @ RQ * attn.scaling


def offset_spectra(model: nn.Module, layer: int, offsets: Sequence[int]) -> HeadSpectrum:
    """Prop. 3.4's ``γ_h`` of ``A_h(m)`` for each offset ``m`` and head ``h``, fields ``(len(offsets), H)``.

    The non-zero eigenvalues of ``A_h(m) = s K_gᵀ (R_m Q_h)`` are those of the ``k x k`` matrix ``s R_m Q_h K_gᵀ``;
    ``0`` is one more (``k < d``): :func:`~lipnb.core.inputs.head_spectra` of that
    matrix bordered by a zero row and column.
    """
    attn = _check(model, layer)
    H, k = model.config.num_attention_heads, attn.head_dim
    if k >= attn.q_proj.weight.shape[1]:
        raise ValueError(f"the k x k reduction needs head size k < d; got k = {k}")
    Q = attn.q_proj.weight.detach().double().view(H, k, -1)
    K = attn.k_proj.weight.detach().double().view(-1, k, Q.shape[-1]).repeat_interleave(attn.num_key_value_groups, 0)
    angles = torch.as_tensor(offsets, dtype=torch.float64)[:, None, None, None] * _rotary_frequencies(model)
    cores = _rotate((Q @ K.mT).mT[None], angles).mT * attn.scaling        # (M, H, k, k): R_m (Q_h K_gᵀ)
    bordered = torch.nn.functional.pad(cores, (0, 1, 0, 1)).flatten(0, 1)
    spectra = head_spectra(bordered)
    shape = cores.shape[:2]
    return HeadSpectrum(*(t.view(shape) for t in (spectra.largest, spectra.smallest, spectra.gamma,
                                                  spectra.positive)))


def head_A(model: nn.Module, layer: int, head: int) -> Tensor:
    """Def 2.1: ``A_h = K_gᵀ Q_h · scaling`` of head ``h`` and its key-value group ``g`` (offset 0, no rotation)."""
    attn = _check(model, layer)
    k = attn.head_dim
    head = check_index(head, "head", model.config.num_attention_heads)
    group = head // attn.num_key_value_groups
    Q = attn.q_proj.weight.detach()[head * k:(head + 1) * k]
    K = attn.k_proj.weight.detach()[group * k:(group + 1) * k]
    return K.T @ Q * attn.scaling


def aligned_input(model: nn.Module, layer: int, head: int, Y: Tensor) -> Tensor:
    """The input on which head ``head`` with rotary positions computes what it computes on ``Y`` without them.

    With ``M = [Q_h; K_g; V_g]`` of full row rank ``3k <= d``, ``x_j = y_j + M⁺ (D_j - I) M y_j`` with ``D_j =
    diag(R_jᵀ, R_jᵀ, I)`` gives ``R_j Q_h x_j = Q_h y_j``, ``R_j K_g x_j = K_g y_j``, ``V_g x_j = V_g y_j``: every score
    and value of ``Y`` at offset zero. ``x_j = T_j y_j`` is linear in ``y_j``; ``T_0 = I``. ``Y`` ``(B, n, d)``.
    """
    f = attention_map(model, layer, head=head)
    check_tokens(Y, "Y")
    Wq, Wk, Wv = (w.to(Y) for w in (f.Wq, f.Wk, f.Wv))
    M = torch.cat([Wq, Wk, Wv])
    if int(torch.linalg.matrix_rank(M.double())) < M.shape[0]:
        raise ValueError(f"[Q_h; K_g; V_g] of head {head} has rank below {M.shape[0]}: no aligned input")
    k = f.head_dim
    angles = f._angles(Y)
    MY = Y @ M.mT                                                          # (B, n, 3k)
    target = torch.cat([_rotate(MY[..., :k], angles, transpose=True), _rotate(MY[..., k:2 * k], angles, transpose=True),
                        MY[..., 2 * k:]], dim=-1)
    return Y + (target - MY) @ torch.linalg.pinv(M).mT
