"""The token mixers, each an nn.Module mapping (B, N, D) -> (B, N, D), and their registry
(`MIXERS`). One module per family, so that a mixer is found by its family's name:

    registry        MIXERS, register, and how a name, an import path or a class names a mixer
    base            what the mixers share: input checks and the head/projection bases
    softmax         scaled_dot, quadratic, metric, local
    kernelized      linear, favor
    nystrom         nystrom
    parameter_free  pooling, identity, fourier
    token_mlp       token_mlp
    recurrent       retention, gla (and the recurrent family's shared scan and hidden attention matrix)
    state_space     mamba2
    delta           deltanet (the delta rule: DeltaNet, Gated DeltaNet)
    sigmoid         sigmoid (attention without a row normalisation)

Every public class and function is also importable from `attnzoo.mixers` itself (`from
attnzoo.mixers import MIXERS, register, ScaledDotAttention`), which is also how configs saved
with `_target_: attnzoo.mixers.<Class>` keep loading.

A mixer is a class: an `nn.Module` whose constructor takes `dim, heads, causal, impl` (what the
block gives every mixer) and its own options as keyword arguments, and whose
`forward(x_bnd, key_padding_mask=None)` maps (B, N, D) to (B, N, D). It is named in one of three
ways, all resolved by `mixer_class`: by the name it is registered under (`@register("name")`,
`MIXERS`), by its import path (`package.module.Class`, what a YAML's `_target_` holds; a mixer in
the user's own code needs nothing else), or by the class itself. `build_mixer(mixer, dim=...,
heads=..., causal=..., impl=..., **options)` builds one and rejects an option its constructor does
not take.

What a feature needs from a mixer is an optional method of its class; a mixer without it still
trains and is measured, and the feature says "not available for this mixer":

    attention_probs(x_bnd, key_padding_mask=None) -> (B, H, N, N)
        the softmax attention probabilities the mixer computes on its input: the attention-entropy
        rank measure (attnzoo.rank) and the attention maps (attnzoo.attention_maps) read them
    flops_per_token(dim, heads, seq_len, causal, **options) -> float   (a staticmethod)
        forward matmul FLOPs per token, by the convention of attnzoo.flops (train.max_flops and
        the compute a run records use it)
    learned_matrices() -> {label: (H, a, b) tensor}
        matrices worth a picture (quadratic's U, metric's M), drawn beside the attention maps
    heads, head_outputs(x_bnd, key_padding_mask, scores_from) -> (B, H, N, D)
        each head's contribution to the output, with the attention weights computed from
        `scores_from` while the values come from `x`: what the path decomposition of Dong et al.
        (2021) needs (attnzoo.paths). With the attention frozen at the full network's, a block is
        linear in its input, and the output of a skip+attention network is the sum of its paths.
        Mixers without scores (pooling, identity) are linear already and count as one head.
    deepnet_init_(beta)
        which weights are queries/keys and which values/outputs: DeepNet's init, which
        `model.residual=deepnorm` applies (attnzoo.residual); needed by a mixer with weights
    supports_causal = False   (a class attribute; True when absent)
        the mixer cannot be causal: its constructor refuses `causal=True`, and the trainer
        refuses it with a causal task before any work (attnzoo.config.validate)
    rows_are_distributions = False   (a class attribute; True when absent)
        `attention_probs` gives a matrix whose rows are not distributions (the hidden attention
        matrix of a recurrent mixer): the attention maps draw it, the attention entropy is n/a
"""

from attnzoo.mixers.delta import DeltaNet, delta_hidden_attention
from attnzoo.mixers.kernelized import FEATURE_MAPS, Favor, LinearAttention, orthogonal_gaussian
from attnzoo.mixers.nystrom import Nystrom, iterative_pinv
from attnzoo.mixers.parameter_free import Fourier, Identity, Pooling
from attnzoo.mixers.recurrent import GatedLinearAttention, Retention
from attnzoo.mixers.registry import (
    COMMON_ARGS,
    MIXERS,
    build_mixer,
    causal_mixers,
    check_options,
    class_path,
    mixer_class,
    mixer_options,
    register,
    registered_name,
    unknown_options,
)
from attnzoo.mixers.sigmoid import SigmoidAttention
from attnzoo.mixers.softmax import (
    METRIC_PARAMS,
    LocalAttention,
    MetricTensorAttention,
    QuadraticFormAttention,
    ScaledDotAttention,
)
from attnzoo.mixers.state_space import Mamba2
from attnzoo.mixers.token_mlp import TokenMLP

# The registry keeps the order in which the mixers joined the package, not the order of the
# family modules: studies default to it (`list(MIXERS)`, `causal_mixers()`), and their tables and
# figures list the mixers in it. A mixer registered later (the user's) comes after these.
_JOINED = (
    ScaledDotAttention,
    QuadraticFormAttention,
    MetricTensorAttention,
    Pooling,
    Identity,
    LinearAttention,
    Favor,
    Nystrom,
    Fourier,
    LocalAttention,
    TokenMLP,
    Retention,
    GatedLinearAttention,
    Mamba2,
    DeltaNet,
    SigmoidAttention,
)
_later = {name: cls for name, cls in MIXERS.items() if cls not in _JOINED}
MIXERS.clear()
MIXERS.update({cls.mixer_name: cls for cls in _JOINED} | _later)

__all__ = [
    "COMMON_ARGS",
    "FEATURE_MAPS",
    "METRIC_PARAMS",
    "MIXERS",
    "DeltaNet",
    "Favor",
    "Fourier",
    "GatedLinearAttention",
    "Identity",
    "LinearAttention",
    "LocalAttention",
    "Mamba2",
    "MetricTensorAttention",
    "Nystrom",
    "Pooling",
    "QuadraticFormAttention",
    "Retention",
    "ScaledDotAttention",
    "SigmoidAttention",
    "TokenMLP",
    "build_mixer",
    "causal_mixers",
    "check_options",
    "class_path",
    "delta_hidden_attention",
    "iterative_pinv",
    "mixer_class",
    "mixer_options",
    "orthogonal_gaussian",
    "register",
    "registered_name",
    "unknown_options",
]
