"""Rank collapse, measured as the literature measures it.

Dong, Cordonnier & Loukas (2021) measure how far a hidden state H (N tokens × D) is from rank one
by its residual res(H) = H − 1·mean_tokens(H)ᵀ; later work measures the same collapse by the
spread of H's singular values, by how alike its tokens are, and by how flat the attention that
produced it is. Every measure here takes a batch, (batch, tokens, dim) hidden states or
(batch, heads, queries, keys) attention weights, with an optional `key_padding_mask`
(batch, tokens), True at padding, whose tokens are left out; each returns one value per sample,
computed in float64.

    measure            formula (per sample)                                   collapsed  spread
    relative_residual  ‖H − 1·meanᵀ‖ / ‖H‖, ‖A‖ = sqrt(‖A‖₁‖A‖∞)              0          ~1
    effective_rank     exp(−Σ pᵢ log pᵢ), pᵢ = σᵢ / Σⱼ σⱼ (singular values)   1          min(N, D)
    stable_rank        ‖H‖_F² / ‖H‖₂²                                          1          min(N, D)
    token_similarity   mean over pairs i ≠ j of cos(hᵢ, hⱼ)                     1          ~0
    attention_entropy  mean over queries of −Σₖ Pₕ,q,ₖ log Pₕ,q,ₖ (nats)      log N      0 (one-hot)

"n/a" is NaN throughout: attention_entropy of a state no softmax attention produced (the
embedding; a pooling or identity mixer, any mixer without `attention_probs`, or one whose rows are
not distributions, as a recurrent mixer's hidden attention matrix), or a measure of
a sample too small for it (token similarity of one token). `measure` computes a chosen list of
measures for one hidden state; `rank_profile` measures every hidden state of an attnzoo model.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

NA = float("nan")  # a measure that does not apply
WEIGHTS_PREFIX = "attention"  # WEIGHT_STATS are logged as attention/<stat>/layer_<k>
GATE_MEAN = "gate_mean"  # an output gate's mean value, logged as attention/gate_mean/layer_<k>


def composite_norm(a: torch.Tensor) -> torch.Tensor:
    """sqrt(max column abs-sum × max row abs-sum) over the last two dims, as the product of the
    two square roots (their product would underflow for entries near 1e-160)."""
    abs_ = a.abs()
    col = abs_.sum(dim=-2).amax(dim=-1)
    row = abs_.sum(dim=-1).amax(dim=-1)
    return torch.sqrt(col) * torch.sqrt(row)


def _tokens(
    h_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """h in float64 with padding rows zeroed, and the (batch, tokens, 1) float64 keep mask."""
    if h_bnd.dim() != 3:
        raise ValueError(f"h must have shape (batch, tokens, dim), got {tuple(h_bnd.shape)}")
    h_bnd = h_bnd.detach().to(torch.float64)
    if key_padding_mask is None:
        return h_bnd, torch.ones_like(h_bnd[..., :1])
    if tuple(key_padding_mask.shape) != tuple(h_bnd.shape[:2]):
        raise ValueError(
            f"key_padding_mask must have shape {tuple(h_bnd.shape[:2])} (batch, tokens), "
            f"got {tuple(key_padding_mask.shape)}"
        )
    keep_bn1 = (~key_padding_mask.to(device=h_bnd.device, dtype=torch.bool))[..., None].double()
    return h_bnd * keep_bn1, keep_bn1


def relative_residual(
    h_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Dong, Cordonnier & Loukas (2021), "Attention is not all you need: pure attention loses rank
    doubly exponentially with depth": ‖res(H)‖ / ‖H‖ per sample, (batch,) float64, with
    res(H) = H − 1·mean_tokens(H)ᵀ and the composite norm ‖A‖ = sqrt(‖A‖₁ ‖A‖∞) (largest column
    abs-sum times largest row abs-sum). 0 when every token is the same nonzero vector;
    scale-free; NaN for an all-zero sample (a state that has vanished has no direction to
    read, as for effective_rank). Padding tokens are left out of the mean and of both norms."""
    h_bnd, keep_bn1 = _tokens(h_bnd, key_padding_mask)
    mean_b1d = h_bnd.sum(dim=1, keepdim=True) / keep_bn1.sum(dim=1, keepdim=True).clamp_min(1)
    res_bnd = (h_bnd - mean_b1d) * keep_bn1
    whole = composite_norm(h_bnd)
    ratio = composite_norm(res_bnd) / whole.clamp_min(torch.finfo(torch.float64).tiny)
    return ratio.where(whole > 0, torch.nan)


def _singular_values(h_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
    h_bnd, _ = _tokens(h_bnd, key_padding_mask)  # zero rows add no singular value
    return torch.linalg.svdvals(h_bnd)  # (batch, min(tokens, dim)), descending


def effective_rank(
    h_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Roy & Vetterli (2007), "The effective rank: a measure of effective dimensionality":
    exp(−Σᵢ pᵢ log pᵢ) with pᵢ = σᵢ / Σⱼ σⱼ, the singular values of each sample's (tokens × dim)
    matrix normalised to sum 1 (0 log 0 = 0). Nothing is removed first (no centring), so a state
    whose tokens are all one vector has effective rank 1, and N orthogonal tokens of equal norm
    have N. (batch,) float64; NaN for an all-zero sample. Padding tokens are left out."""
    return _effective_rank_of(_singular_values(h_bnd, key_padding_mask))


def _effective_rank_of(s_bk: torch.Tensor) -> torch.Tensor:
    p_bk = s_bk / s_bk.sum(dim=-1, keepdim=True)
    entropy_b = -torch.special.xlogy(p_bk, p_bk).sum(dim=-1)
    return torch.exp(entropy_b)


def stable_rank(h_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The stable (numerical) rank ‖H‖_F² / ‖H‖₂² = Σᵢ σᵢ² / σ₁² of each sample's (tokens × dim)
    matrix, nothing removed: 1 for rank one, N for N orthogonal tokens of equal norm, never above
    the rank (Rudelson & Vershynin 2007). (batch,) float64; NaN for an all-zero sample. Padding
    tokens are left out."""
    return _stable_rank_of(_singular_values(h_bnd, key_padding_mask))


def _stable_rank_of(s_bk: torch.Tensor) -> torch.Tensor:
    return (s_bk**2).sum(dim=-1) / s_bk[:, 0] ** 2


def token_similarity(
    h_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Noci et al. (2022), "Signal propagation in transformers: theoretical perspectives and the
    role of rank collapse": the mean cosine similarity cos(hᵢ, hⱼ) = hᵢ·hⱼ / (‖hᵢ‖‖hⱼ‖) over the
    N(N−1) ordered pairs of distinct tokens i ≠ j. 1 at complete collapse (all tokens parallel),
    0 for orthogonal tokens. (batch,) float64; NaN for a sample of fewer than two tokens. A
    zero token counts as similar to nothing (cosine 0). Padding tokens are left out."""
    h_bnd, keep_bn1 = _tokens(h_bnd, key_padding_mask)
    norm_bn1 = h_bnd.norm(dim=-1, keepdim=True)
    u_bnd = h_bnd / norm_bn1.clamp_min(torch.finfo(torch.float64).tiny)
    all_pairs_b = u_bnd.sum(dim=1).pow(2).sum(dim=-1)  # Σ_ij cos, the diagonal included
    diagonal_b = u_bnd.pow(2).sum(dim=(1, 2))
    n_b = keep_bn1.sum(dim=(1, 2))
    pairs_b = n_b * (n_b - 1)
    return torch.where(pairs_b > 0, (all_pairs_b - diagonal_b) / pairs_b.clamp_min(1), NA)


def _real_tokens(attn_bhqk: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
    """(batch, 1, tokens) bool, True for the tokens that are not padding, after checking that
    the mask fits the weights of self-attention."""
    b, _, n_q, n_k = attn_bhqk.shape
    if tuple(key_padding_mask.shape) != (b, n_k) or n_q != n_k:
        raise ValueError(
            f"key_padding_mask must have shape {(b, n_k)} (batch, tokens) and the attention "
            f"must be self-attention; got a mask {tuple(key_padding_mask.shape)} for weights "
            f"{tuple(attn_bhqk.shape)}"
        )
    return ~key_padding_mask.to(device=attn_bhqk.device, dtype=torch.bool)[:, None]


def attention_entropy(
    attn_bhqk: torch.Tensor, key_padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Zhai et al. (2023), "Stabilizing transformer training by preventing attention entropy
    collapse": for each head, the mean over queries q of the Shannon entropy −Σₖ P_qk log P_qk
    (nats) of the attention row P_q·. (batch, heads) float64: log N for uniform attention over N
    keys (the rows carry no token-specific information, the collapse of Dong et al.), 0 for
    one-hot attention (entropy collapse). Only softmax attention has rows to measure; for the
    other mixers the measure is n/a (NaN, see `measure`). With a `key_padding_mask` (batch,
    tokens) for self-attention, padding queries are left out of the mean and each row is
    restricted to the non-padding keys and renormalised (a masked model gives them 0 already)."""
    if attn_bhqk.dim() != 4:
        raise ValueError(
            f"attention weights must have shape (batch, heads, queries, keys), "
            f"got {tuple(attn_bhqk.shape)}"
        )
    p_bhqk = attn_bhqk.detach().to(torch.float64)
    b, _, n_q, _ = p_bhqk.shape
    keep_q = torch.ones(b, 1, n_q, dtype=torch.float64, device=p_bhqk.device)
    if key_padding_mask is not None:
        keep_b1n = _real_tokens(attn_bhqk, key_padding_mask).double()
        p_bhqk = p_bhqk * keep_b1n[:, :, None, :]
        p_bhqk = p_bhqk / p_bhqk.sum(dim=-1, keepdim=True).clamp_min(
            torch.finfo(torch.float64).tiny
        )
        keep_q = keep_b1n
    entropy_bhq = -torch.special.xlogy(p_bhqk, p_bhqk).sum(dim=-1)
    return (entropy_bhq * keep_q).sum(dim=-1) / keep_q.sum(dim=-1).clamp_min(1)


SINK_EPS = 0.3  # Gu et al. 2024's threshold on a head's mean weight on the first token


@dataclass(frozen=True)
class HiddenWeights:
    """Weights whose rows are not distributions (a recurrent mixer's hidden attention matrix,
    sigmoid attention's weights): the weight statistics read them, the attention entropy does
    not (it is n/a for them)."""

    weights: torch.Tensor


def _query_mean(x_bhq: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
    """(batch, heads): the mean over the non-padding queries."""
    if key_padding_mask is None:
        return x_bhq.mean(dim=-1)
    keep_b1q = (~key_padding_mask.to(device=x_bhq.device, dtype=torch.bool))[:, None].double()
    return (x_bhq * keep_b1q).sum(dim=-1) / keep_b1q.sum(dim=-1).clamp_min(1)


def attention_row_sum(
    attn_bhqk: torch.Tensor, key_padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The mean over heads and (non-padding) queries of a row's total weight Σ_k A_qk over the
    non-padding keys, (batch,) float64: 1 for softmax attention, anything for weights that are
    not normalised (sigmoid attention, a hidden attention matrix, a sink that takes mass)."""
    a_bhqk = attn_bhqk.detach().to(torch.float64)
    if key_padding_mask is not None:
        keep_b11k = ~key_padding_mask.to(device=a_bhqk.device, dtype=torch.bool)[:, None, None]
        a_bhqk = a_bhqk * keep_b11k
    return _query_mean(a_bhqk.sum(dim=-1), key_padding_mask).mean(dim=1)


def sink_share(
    attn_bhqk: torch.Tensor, key_padding_mask: torch.Tensor | None = None, eps: float = SINK_EPS
) -> torch.Tensor:
    """Gu et al. (2024, "When attention sink emerges in language models", arXiv 2410.10781): the
    share of heads whose mean weight on the first token, over the (non-padding) queries,
    exceeds `eps` (0.3), (batch,) float64."""
    first_bh = _query_mean(attn_bhqk.detach().to(torch.float64)[..., 0], key_padding_mask)
    return (first_bh > eps).double().mean(dim=1)


def _keys_seen(a_bhqk: torch.Tensor) -> torch.Tensor:
    """(queries, keys) bool: the keys each row can see, from where any batch element or head
    gives weight. Every mask attnzoo has (causal, a sliding window, none) lets a row see one
    contiguous run of keys, shared by the heads, so a row sees from its first key with weight to
    its last, or to itself when no weight is anywhere above the diagonal (causal weights): read
    so, a row whose weight is all on the first token still sees the keys before it."""
    n_q, n_k = a_bhqk.shape[-2:]
    any_qk = (a_bhqk != 0).flatten(0, 1).any(dim=0)
    index = torch.arange(n_k, device=a_bhqk.device)
    first_q = torch.where(any_qk, index, n_k).amin(dim=-1)
    if any_qk.triu(1).any():
        last_q = torch.where(any_qk, index, -1).amax(dim=-1)
    else:
        last_q = torch.arange(n_q, device=a_bhqk.device)
    return (index >= first_q[:, None]) & (index <= last_q[:, None])


def first_token_excess_bh(
    attn_bhqk: torch.Tensor, key_padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Per head, how much more of each row's weight the first token takes than it would under
    uniform weights over the keys that row sees, (batch, heads) float64: the mean over the rows
    of (s_i − 1/n_i) / (1 − 1/n_i), where s_i = |A_i0| / Σ_k |A_ik| is the first token's share
    of row i and n_i the number of keys row i sees (`_keys_seen`, less padding). Uniform weights
    read 0 at every length (causal ones too: their baseline is 1/(i+1)), every row on the first
    token reads 1, and a head that avoids the first token reads below 0. Rows that do not see
    the first token (beyond a window) or see fewer than two keys (a causal row 0), padding
    queries and rows with no weight are left out (NaN for a head with no row left). The share is
    of the row's own total, so weights that are not distributions (sigmoid attention, a sink
    that takes mass) read the same way."""
    a_bhqk = attn_bhqk.detach().to(torch.float64).abs()
    b, _, n_q, n_k = a_bhqk.shape
    keep_b1q = torch.ones(b, 1, n_q, dtype=torch.bool, device=a_bhqk.device)
    keep_b11k = torch.ones(b, 1, 1, n_k, dtype=torch.bool, device=a_bhqk.device)
    if key_padding_mask is not None:
        keep_b1q = _real_tokens(attn_bhqk, key_padding_mask)
        keep_b11k = keep_b1q[:, :, None, :]
        a_bhqk = a_bhqk * keep_b11k
    seen_b1qk = _keys_seen(a_bhqk)[None, None] & keep_b11k
    n_b1q = seen_b1qk.sum(dim=-1).double()
    total_bhq = a_bhqk.sum(dim=-1)
    share_bhq = a_bhqk[..., 0] / total_bhq.clamp_min(torch.finfo(torch.float64).tiny)
    baseline_b1q = 1 / n_b1q.clamp_min(1)
    excess_bhq = (share_bhq - baseline_b1q) / (1 - baseline_b1q).clamp_min(1e-300)
    rows_bhq = keep_b1q & seen_b1qk[..., 0] & (n_b1q >= 2) & (total_bhq > 0)
    count_bh = rows_bhq.sum(dim=-1)
    summed_bh = torch.where(rows_bhq, excess_bhq, 0.0).sum(dim=-1)
    return torch.where(count_bh > 0, summed_bh / count_bh.clamp_min(1), math.nan)


def first_token_excess(
    attn_bhqk: torch.Tensor, key_padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The heads' mean of `first_token_excess_bh`, (batch,) float64: a continuous first-token
    sink measure with no threshold, 0 for uniform weights at any length and 1 for every row on
    the first token."""
    return first_token_excess_bh(attn_bhqk, key_padding_mask).nanmean(dim=1)


def first_token_excess_max(
    attn_bhqk: torch.Tensor, key_padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The largest of the heads' `first_token_excess_bh`, (batch,) float64: a sink grown by one
    head of many, which the heads' mean dilutes."""
    excess_bh = first_token_excess_bh(attn_bhqk, key_padding_mask)
    return (
        torch.where(excess_bh.isnan(), -math.inf, excess_bh)
        .amax(dim=1)
        .nan_to_num(nan=math.nan, neginf=math.nan)
    )


# Statistics of the weights themselves (not collapse measures): every mixer that exposes weights,
# distributions or not; logged as attention/<name>/layer_<k>.
WEIGHT_STATS: dict[str, Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]] = {
    "row_sum": attention_row_sum,
    "sink_share": sink_share,
    "first_token_excess": first_token_excess,
    "first_token_excess_max": first_token_excess_max,
}


@dataclass(frozen=True)
class Measure:
    """One measure of the registry: `fn(x, key_padding_mask) -> (batch,)`, where x is the hidden
    state (`reads="hidden"`) or the attention weights that produced it (`reads="attention"`)."""

    name: str
    fn: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]
    reads: Literal["hidden", "attention"]
    citation: str
    # the measure from the state's singular values (batch, min(N, D)), for a measure that needs
    # nothing else: `measure_samples` computes them once for every such measure of a state
    of_singular_values: Callable[[torch.Tensor], torch.Tensor] | None = None


MEASURES: dict[str, Measure] = {
    m.name: m
    for m in (
        Measure("relative_residual", relative_residual, "hidden", "Dong et al. 2021"),
        Measure(
            "effective_rank", effective_rank, "hidden", "Roy & Vetterli 2007", _effective_rank_of
        ),
        Measure("stable_rank", stable_rank, "hidden", "Rudelson & Vershynin 2007", _stable_rank_of),
        Measure("token_similarity", token_similarity, "hidden", "Noci et al. 2022"),
        Measure(
            "attention_entropy",  # the heads' mean; attention_entropy() itself gives each head's
            lambda a, mask: attention_entropy(a, mask).mean(dim=1),
            "attention",
            "Zhai et al. 2023",
        ),
    )
}


def _names(names: str | Iterable[str] | None) -> list[str]:
    names = list(MEASURES) if names is None else [names] if isinstance(names, str) else list(names)
    for name in names:
        if name not in MEASURES:
            raise ValueError(f"unknown measure {name!r}; measures: {', '.join(MEASURES)}")
    return names


def measure_samples(
    h_bnd: torch.Tensor,
    names: str | Iterable[str] | None = None,
    key_padding_mask: torch.Tensor | None = None,
    attention_bhqk: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Each measure in `names` (default: all of MEASURES) per sample, (batch,) float64 each.
    `attention_bhqk` are the attention weights that produced `h_bnd`; without them an attention
    measure is NaN (n/a)."""
    out: dict[str, torch.Tensor] = {}
    s_bk: torch.Tensor | None = None  # one SVD per state, shared by the spectral measures
    for name in _names(names):
        m = MEASURES[name]
        if m.of_singular_values is not None:
            if s_bk is None:
                s_bk = _singular_values(h_bnd, key_padding_mask)
            out[name] = m.of_singular_values(s_bk)
        elif m.reads == "hidden":
            out[name] = m.fn(h_bnd, key_padding_mask)
        elif attention_bhqk is None or isinstance(attention_bhqk, HiddenWeights):
            out[name] = torch.full((h_bnd.shape[0],), NA, dtype=torch.float64)
        else:
            out[name] = m.fn(attention_bhqk, key_padding_mask)
    return out


def measure(
    h_bnd: torch.Tensor,
    names: str | Iterable[str] | None = None,
    key_padding_mask: torch.Tensor | None = None,
    attention_bhqk: torch.Tensor | None = None,
) -> dict[str, float]:
    """The batch mean of each measure in `names` (default: all of MEASURES) on one hidden state
    (batch, tokens, dim): {name: float}. NaN means n/a (an attention measure without
    `attention_bhqk`); samples where a measure is undefined are left out of its mean."""
    stats = measure_samples(h_bnd, names, key_padding_mask, attention_bhqk)
    return {name: _nanmean(v) for name, v in stats.items()}


def _nanmean(v: torch.Tensor) -> float:
    v = v[~v.isnan()]
    return float(v.mean()) if v.numel() else NA


def _nanstd(v: torch.Tensor) -> float:
    v = v[~v.isnan()]
    return float(v.std(unbiased=False)) if v.numel() else NA


@dataclass
class RankProfile:
    """Mean and std over the probe batch of each measure of each hidden state: depth + 1 entries
    per measure, the embedding output then each block's output. `mean` and `std` are the
    relative residual's (the measure of Dong et al.)."""

    mean: list[float]
    std: list[float]
    measures: dict[str, list[float]] = field(default_factory=dict)
    measures_std: dict[str, list[float]] = field(default_factory=dict)
    # WEIGHT_STATS of the weights that produced each state (NaN where none did); filled when
    # the weights were captured (an attention measure was asked for); and GATE_MEAN, the mean of
    # the output gate that scaled each state's mixer output, where a mixer has one (`gate_values`)
    weights: dict[str, list[float]] = field(default_factory=dict)

    @classmethod
    def from_states(
        cls,
        states: Sequence[torch.Tensor],
        names: str | Iterable[str] | None = None,
        key_padding_mask: torch.Tensor | None = None,
        attentions: Sequence[torch.Tensor | None] | None = None,
    ) -> RankProfile:
        """Measure `states` (hidden states in order); `attentions[k]` produced `states[k]` (None
        where no softmax attention did, as for the embedding, states[0])."""
        names = _names(names)
        if "relative_residual" not in names:
            names = ["relative_residual", *names]
        attentions = list(attentions) if attentions is not None else [None] * len(states)
        if len(attentions) != len(states):
            raise ValueError(f"{len(attentions)} attention entries for {len(states)} states")
        per_state = [
            measure_samples(h, names, key_padding_mask, a)
            for h, a in zip(states, attentions, strict=True)
        ]
        measures = {n: [_nanmean(s[n]) for s in per_state] for n in names}
        stds = {n: [_nanstd(s[n]) for s in per_state] for n in names}
        weights = {}
        if any(a is not None for a in attentions):
            unwrap = lambda a: a.weights if isinstance(a, HiddenWeights) else a
            weights = {
                name: [
                    NA if a is None else _nanmean(stat(unwrap(a), key_padding_mask))
                    for a in attentions
                ]
                for name, stat in WEIGHT_STATS.items()
            }
        return cls(
            mean=measures["relative_residual"],
            std=stds["relative_residual"],
            measures=measures,
            measures_std=stds,
            weights=weights,
        )

    def log_dict(self, prefix: str = "rank") -> dict[str, float]:
        """`<prefix>/<measure>/layer_<k>` for every measure and hidden state (layer_0: the
        embedding), n/a (NaN) entries left out: the trainer's one call to log them."""
        from attnzoo.analysis.metrics import rank_key  # the one spelling of the keys

        out = {
            rank_key(k, name, prefix): v
            for name, values in self.measures.items()
            for k, v in enumerate(values)
            if not math.isnan(v)
        }
        out.update(
            (rank_key(k, name, WEIGHTS_PREFIX), v)
            for name, values in self.weights.items()
            for k, v in enumerate(values)
            if not math.isnan(v)
        )
        return out


def _mixers(model: nn.Module) -> list[nn.Module]:
    """The distinct mixers of a model's blocks, in block order (a shared mixer once); none for
    a model whose blocks have no `mixer` (the training benchmark's plain GPT)."""
    found = (getattr(b, "mixer", None) for b in getattr(model, "blocks", ()))
    return list({id(m): m for m in found if m is not None}.values())


@contextlib.contextmanager
def capture_attention(model: nn.Module) -> Iterator[list[torch.Tensor | HiddenWeights | None]]:
    """Within the block, every mixer call of an attnzoo model (a model whose blocks have no
    `mixer`, such as the GPT baseline, captures nothing) appends its (batch, heads, N, N)
    attention weights to the returned list: a tensor of probabilities, `HiddenWeights` for a
    mixer whose rows are not distributions (`rows_are_distributions = False`), or None for a
    mixer that gives none (no `attention_probs` method: pooling, identity, a mixer of the user's
    without it), in call order: entry k belongs to block k + 1. The weights are recomputed from
    the mixer's input by its `attention_probs` (the mixer's own ops, same scale and masks)."""
    captured: list[torch.Tensor | HiddenWeights | None] = []

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        x = args[0]
        mask = args[1] if len(args) > 1 else kwargs.get("key_padding_mask")
        probs = getattr(module, "attention_probs", None)
        weights = probs(x, mask) if callable(probs) else None
        if weights is not None and not getattr(module, "rows_are_distributions", True):
            weights = HiddenWeights(weights)  # no entropy to measure, row sums to read
        captured.append(weights)

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in _mixers(model)]
    try:
        yield captured
    finally:
        for h in handles:
            h.remove()


def gate_mean(gate_bh: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The mean of an output gate over heads, (gate) dimensions and non-padding tokens, (batch,)
    float64; `gate_bh` is (batch, heads, tokens) or (batch, heads, tokens, dk), as a mixer's
    `gate_values` gives it."""
    g = gate_bh.detach().to(torch.float64)
    g_bhn = g.mean(dim=-1) if g.dim() == 4 else g
    return _query_mean(g_bhn, key_padding_mask).mean(dim=1)


@contextlib.contextmanager
def capture_gates(model: nn.Module) -> Iterator[list[float | None]]:
    """Within the block, every mixer call of an attnzoo model (a model whose blocks have no
    `mixer`, such as the GPT baseline, captures nothing) appends the batch mean of its
    output gate (`gate_mean` of its `gate_values` on the mixer's input), or None for a mixer
    without a gate, in call order: entry k belongs to block k + 1."""
    captured: list[float | None] = []

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        mask = args[1] if len(args) > 1 else kwargs.get("key_padding_mask")
        values = getattr(module, "gate_values", None)
        gate = values(args[0]) if callable(values) else None
        captured.append(None if gate is None else _nanmean(gate_mean(gate, mask)))

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in _mixers(model)]
    try:
        yield captured
    finally:
        for h in handles:
            h.remove()


def _cast(inputs: Any, dtype: torch.dtype) -> Any:
    """`inputs` (a tensor, or a mapping of them) with its floating-point tensors in `dtype`."""
    if isinstance(inputs, torch.Tensor):
        return inputs.to(dtype) if inputs.is_floating_point() else inputs
    if isinstance(inputs, Mapping):
        return {k: _cast(v, dtype) for k, v in inputs.items()}
    return inputs


# A probed forward: (model, inputs, whether attention is wanted) -> the hidden states in order,
# and with attention wanted the attention weights that produced each state after the first
# (None where no softmax attention did), else None.
Forward = Callable[[nn.Module, Any, bool], tuple[Sequence[torch.Tensor], Sequence | None]]


@torch.no_grad()
def profile_forward(
    model: nn.Module,
    inputs: Any,
    forward: Forward,
    measures: str | Iterable[str] | None,
    dtype: torch.dtype | None = None,
    key_padding_mask: torch.Tensor | None = None,
) -> RankProfile:
    """The steps every rank probe shares (`rank_profile` here, attnzoo.hf_probe.rank_decay for
    other architectures): with `dtype`, a copy of the model and the inputs in it; the hidden
    states of one `forward`, with the attention weights when a measure reads them; every
    measure of each state (`measures`: names from MEASURES, None for all)."""
    names = _names(measures)
    if dtype is not None and dtype != next(model.parameters()).dtype:
        model = copy.deepcopy(model).to(dtype)
        inputs = _cast(inputs, dtype)
    wants_attention = any(MEASURES[n].reads == "attention" for n in names)
    states, attn = forward(model, inputs, wants_attention)
    attentions = [None, *attn] if attn is not None else None
    return RankProfile.from_states(states, names, key_padding_mask, attentions)


def rank_profile(
    model: nn.Module,
    inputs: torch.Tensor,
    key_padding_mask: torch.Tensor | None = None,
    dtype: torch.dtype | None = None,
    measures: str | Iterable[str] | None = ("relative_residual",),
) -> RankProfile:
    """Run `model(inputs, key_padding_mask, return_hidden=True)` in eval mode and measure every
    hidden state with `measures`: names from MEASURES, None for all of them; the relative
    residual always. The default is the relative residual alone, the trainer's figure at every
    evaluation; an attention measure hooks the mixers (call it on the uncompiled module). A
    mixer with an output gate (`gate_values`) adds its mean per block (`weights["gate_mean"]`).
    With `dtype=torch.float64` a float64 copy of the model is used, which sees the residual
    fall far past float32's floor (about 1e-7)."""

    def hidden(model: nn.Module, inputs: torch.Tensor, attentions: bool):
        was_training = model.training
        model.eval()
        try:
            with capture_attention(model) if attentions else contextlib.nullcontext([]) as attn:
                _, states = model(inputs, key_padding_mask, return_hidden=True)
        finally:
            model.train(was_training)
        # a model without mixers to hook (the plain GPT) gives no weights: n/a, not an error
        return states, (attn if attentions and _mixers(model) else None)

    with capture_gates(model) as gates:
        profile = profile_forward(model, inputs, hidden, measures, dtype, key_padding_mask)
    if any(g is not None for g in gates):  # a mixer with an output gate: its mean per block
        profile.weights[GATE_MEAN] = [NA, *(NA if g is None else g for g in gates)]
    return profile
