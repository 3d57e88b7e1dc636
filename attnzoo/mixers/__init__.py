"""The token mixers, each an nn.Module mapping (B, N, D) -> (B, N, D), and their registry
(`MIXERS`). `registry` holds MIXERS, register and how a name, an import path or a class names a
mixer; `base` what the mixers share (input checks, the head/projection bases); every other
module is one family (softmax, kernelized, recurrent, ...), so that a mixer is found by its
family's name. This package imports every module it holds, which registers their mixers, and
re-exports each module's public names (`from attnzoo.mixers import MIXERS, register,
ScaledDotAttention`): a new family is a new module here and nothing else. `MIXERS` holds the
mixers in the order they were registered (modules by name); a study that needs an order names
its mixers (attnzoo.studies).

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
    supports_bidirectional = False   (a class attribute; True when absent)
        the converse: the mixer is causal only (its weights are defined for j ≤ i), its
        constructor refuses `causal=False`, and the trainer refuses it with a non-causal task
    rows_are_distributions = False   (a class attribute; True when absent)
        `attention_probs` gives a matrix whose rows are not distributions (the hidden attention
        matrix of a recurrent mixer): the attention maps draw it, the attention entropy is n/a
    gate_values(x_bnd) -> (B, H, N) or (B, H, N, dk), or None
        the output gate σ(x W_g) that scales each head's output (the softmax mixers' `gate`
        option, attnzoo.mixers.base): the rank probe logs its mean per block
        (`attention/gate_mean/layer_<k>`, attnzoo.rank)
"""

import importlib
import inspect
import pkgutil


def _public(module: object) -> dict[str, object]:
    """A module's `__all__`, else its public names less what it imports: the classes and
    functions it defines, and its constants."""
    names = getattr(module, "__all__", None) or [
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and not inspect.ismodule(obj)
        and getattr(obj, "__module__", module.__name__) == module.__name__
    ]
    return {name: getattr(module, name) for name in names}


def _import_modules() -> dict[str, object]:
    """Every module of this package imported (registering its mixers), in name order, and the
    public names they export; ImportError if two export one name for different objects."""
    exported: dict[str, object] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, obj in _public(module).items():
            if exported.setdefault(name, obj) is not obj:
                raise ImportError(f"two modules of {__name__} export {name!r}")
    return exported


_exported = _import_modules()
globals().update(_exported)
__all__ = sorted(_exported)
