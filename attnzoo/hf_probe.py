"""Rank decay in models attnzoo did not build: BERT, ALBERT, XLNet, GPT-2, ViT, or any stack of
transformer layers, probed through forward hooks, with skip connections and MLPs removed by
intervention on the trained (or freshly initialised) model, without retraining.

The measures are attnzoo.rank's (the relative residual ‖H − 1·mean(H)ᵀ‖ / ‖H‖ of Dong et al.,
effective rank, stable rank, token similarity, attention entropy) of the hidden state entering
the first layer and after every layer call (an ALBERT layer shared 12 times gives 12 points).
The attention entropy of a layer is that of the attention weights the model returns with
`output_attentions=True` (the eager attention implementation has them) in the same, intervened,
forward; n/a (NaN) for the first layer's input and where the model returns none.

An `Adapter` declares where one architecture keeps the parts of a layer: the layer class, and
inside it the module whose output is the attention branch, the one whose output is the MLP
branch, and the two norms. Hugging Face layers compute `x + branch` inline in their forward, so
an intervention never edits that arithmetic: it replaces the *value* read after an add by the
value the variant calls for, taken from the captured branch outputs. Every replacement is an
exact copy of a tensor the layer computed, so `full` is the model's own forward, bit for bit.

The variants, with a = attention branch, m = MLP branch, N1 / N2 the layer's two norms:

post-norm layers (BERT, ALBERT, XLNet), h = N1(x + a(x)), y = N2(h + m(h)):
    full             y = N2(h + m(h)),   h = N1(x + a(x))
    no_skip          y = N2(m(h)),       h = N1(a(x))
    no_mlp           y = h,              h = N1(x + a(x))
    pure_attention   y = h,              h = N1(a(x))
pre-norm layers (GPT-2, ViT), h = x + a(N1(x)), y = h + m(N2(h)):
    full             y = h + m(N2(h)),   h = x + a(N1(x))
    no_skip          y = m(N2(h)),       h = a(N1(x))
    no_mlp           y = h,              h = x + a(N1(x))
    pure_attention   y = h,              h = a(N1(x))

Removing the MLP removes its whole sub-layer, N2 included (N2 exists only to normalise that
sub-layer), so the layer is its attention sub-layer alone: the same as attnzoo's own
`Block(mlp=False)` in either norm position. Removing the skips keeps both norms. `norms=False`
makes N1 and N2 identities in any variant: pure attention without norms is then exactly
y = a(x), the paper's SAN layer. Norms outside the layers (embedding norm, GPT-2's final ln_f)
are left alone; the probe reads the layers' own outputs.

The probe runs the model in eval mode (dropout off, which the branch captures rely on) and
removes every hook and restores the training flag afterwards, also when the forward fails: the
model is left as it was.

    from attnzoo.hf_probe import rank_decay
    profile = rank_decay(bert, {"input_ids": ids}, variant="pure_attention")
    profile.mean   # depth + 1 relative residuals
    profile.measures["effective_rank"]   # and every other measure, depth + 1 values each
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from einops import rearrange
from torch import nn

from attnzoo.rank import RankProfile, capture_attention, profile_forward

VARIANTS = ("full", "no_skip", "no_mlp", "pure_attention")


@dataclass(frozen=True)
class Adapter:
    """Where a transformer layer keeps its attention, MLP, norms and residual adds.

    `layer` is the class name of the layer module. The other fields are dotted paths inside the
    layer; `a|b` means the first of the two that exists (module names change between library
    versions). `attn_branch` and `mlp_branch` are the modules whose output (the first element if
    it is a tuple) is the branch's contribution just before its residual add, in eval mode;
    when such a module runs more than once in a layer (a shared dropout), its last call before
    the add counts. `attn_norm` and `mlp_norm` are N1 and N2 of the module docstring: for
    `norm="post"` the norms that read `x + a` and `h + m`; for `norm="pre"` the norms that feed
    the attention and the MLP.
    """

    name: str
    layer: str
    norm: Literal["post", "pre"]
    attn_branch: str
    attn_norm: str
    mlp_branch: str
    mlp_norm: str
    seq_first: bool = False  # hidden states are (tokens, batch, dim), as in XLNet
    model_types: tuple[str, ...] = field(default=())  # Hugging Face `config.model_type` values


ADAPTERS: dict[str, Adapter] = {
    a.name: a
    for a in (
        Adapter(
            name="bert",
            layer="BertLayer",
            norm="post",
            attn_branch="attention.output.dropout",
            attn_norm="attention.output.LayerNorm",
            mlp_branch="output.dropout",
            mlp_norm="output.LayerNorm",
            model_types=("bert",),
        ),
        Adapter(
            name="albert",
            layer="AlbertLayer",
            norm="post",
            attn_branch="attention.output_dropout",
            attn_norm="attention.LayerNorm",
            mlp_branch="ffn_output",
            mlp_norm="full_layer_layer_norm",
            model_types=("albert",),
        ),
        Adapter(
            name="xlnet",
            layer="XLNetLayer",
            norm="post",
            attn_branch="rel_attn.dropout",  # also drops attention probabilities; last call wins
            attn_norm="rel_attn.layer_norm",
            mlp_branch="ff.dropout",  # runs after the activation and after layer_2
            mlp_norm="ff.layer_norm",
            seq_first=True,
            model_types=("xlnet",),
        ),
        Adapter(
            name="gpt2",
            layer="GPT2Block",
            norm="pre",
            attn_branch="attn",
            attn_norm="ln_1",
            mlp_branch="mlp",
            mlp_norm="ln_2",
            model_types=("gpt2",),
        ),
        Adapter(
            name="vit",
            layer="ViTLayer",
            norm="pre",
            attn_branch="attention",
            attn_norm="layernorm_before",
            mlp_branch="mlp|output.dropout",  # transformers 5 | transformers 4 (ViTOutput)
            mlp_norm="layernorm_after",
            model_types=("vit",),
        ),
        # attnzoo's own Block (attnzoo.model), pre- or post-norm by its config: pass
        # adapter="attnzoo" (or "attnzoo_post"); it needs blocks built with an MLP
        Adapter(
            name="attnzoo",
            layer="Block",
            norm="pre",
            attn_branch="drop1",
            attn_norm="norm1",
            mlp_branch="scale2",
            mlp_norm="norm2",
        ),
        Adapter(
            name="attnzoo_post",
            layer="Block",
            norm="post",
            attn_branch="drop1",
            attn_norm="norm1",
            mlp_branch="scale2",
            mlp_norm="norm2",
        ),
    )
}

HOW_TO_ADD = (
    "to probe another architecture, declare its layer: "
    "attnzoo.hf_probe.register_adapter(Adapter(name=..., layer='<layer class name>', "
    "norm='post'|'pre', attn_branch=..., attn_norm=..., mlp_branch=..., mlp_norm=..., "
    "model_types=('<config.model_type>',))) -- see the README, 'Rank collapse in real "
    "architectures'"
)


def register_adapter(adapter: Adapter) -> Adapter:
    """Make `adapter` known by its name (and found from its `model_types`)."""
    if adapter.norm not in ("post", "pre"):
        raise ValueError(f"Adapter.norm must be 'post' or 'pre', got {adapter.norm!r}")
    ADAPTERS[adapter.name] = adapter
    return adapter


def adapter_for(model: nn.Module) -> Adapter:
    """The adapter whose `model_types` has the model's `config.model_type`."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    for adapter in ADAPTERS.values():
        if model_type in adapter.model_types:
            return adapter
    raise ValueError(
        f"no adapter for {type(model).__name__} (config.model_type={model_type!r}); "
        f"supported: {sorted(ADAPTERS)}; {HOW_TO_ADD}"
    )


def _submodule(layer: nn.Module, path: str, adapter: Adapter, role: str) -> nn.Module:
    for option in path.split("|"):
        with contextlib.suppress(AttributeError):
            return layer.get_submodule(option)
    raise ValueError(
        f"adapter {adapter.name!r}: {type(layer).__name__} has no module {path!r} ({role}); "
        "the adapter does not match this model (or this version of its library)"
    )


@dataclass
class _Parts:
    attn_branch: nn.Module
    attn_norm: nn.Module
    mlp_branch: nn.Module
    mlp_norm: nn.Module


def layers_of(model: nn.Module, adapter: Adapter) -> list[nn.Module]:
    """Every distinct module of class `adapter.layer`, in registration order."""
    layers = [m for m in model.modules() if type(m).__name__ == adapter.layer]
    if not layers:
        raise ValueError(
            f"adapter {adapter.name!r} looks for layers of class {adapter.layer!r}, and "
            f"{type(model).__name__} has none"
        )
    return layers


def _parts(layer: nn.Module, adapter: Adapter) -> _Parts:
    parts = _Parts(
        **{
            role: _submodule(layer, getattr(adapter, role), adapter, role)
            for role in ("attn_branch", "attn_norm", "mlp_branch", "mlp_norm")
        }
    )
    if len({id(m) for m in vars(parts).values()}) != 4:
        raise ValueError(f"adapter {adapter.name!r}: its four parts must be distinct modules")
    return parts


def _first(value: Any) -> torch.Tensor:
    return value[0] if isinstance(value, (tuple, list)) else value


def _with_first(value: Any, first: torch.Tensor) -> Any:
    if isinstance(value, tuple):
        return (first, *value[1:])
    if isinstance(value, list):
        return [first, *value[1:]]
    return first


def _check_same_shape(new: torch.Tensor, old: torch.Tensor, adapter: Adapter, what: str) -> None:
    if new.shape != old.shape:
        raise ValueError(
            f"adapter {adapter.name!r}: {what} has shape {tuple(new.shape)} where the layer had "
            f"{tuple(old.shape)}; the adapter's module paths do not match this model"
        )


@dataclass
class Trace:
    """The hidden states a probed forward went through: the first layer's input, then the output
    of every layer call, each (batch, tokens, dim)."""

    hidden: list[torch.Tensor] = field(default_factory=list)


@contextlib.contextmanager
def intervene(
    model: nn.Module,
    variant: str = "full",
    norms: bool = True,
    adapter: Adapter | str | None = None,
) -> Iterator[Trace]:
    """Within the block, every layer of `model` runs as `variant` (see the module docstring) and
    the returned Trace collects its hidden states; on leaving, every hook is removed."""
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r} is not one of {VARIANTS}")
    if isinstance(adapter, str):
        if adapter not in ADAPTERS:
            raise ValueError(f"unknown adapter {adapter!r}; supported: {sorted(ADAPTERS)}")
        adapter = ADAPTERS[adapter]
    adapter = adapter or adapter_for(model)
    no_skip = variant in ("no_skip", "pure_attention")
    no_mlp = variant in ("no_mlp", "pure_attention")
    post = adapter.norm == "post"
    trace = Trace()
    seen: dict[str, torch.Tensor] = {}  # per layer call: the branch outputs and h

    def record(h: torch.Tensor) -> None:
        trace.hidden.append(rearrange(h, "n b d -> b n d") if adapter.seq_first else h)

    def layer_pre(module: nn.Module, args: tuple, kwargs: dict) -> None:
        x = args[0] if args else kwargs["hidden_states"]
        if not trace.hidden:
            record(x)
        seen.clear()

    def layer_post(module: nn.Module, args: tuple, kwargs: dict, out: Any) -> Any:
        if not post and (no_skip or no_mlp):  # pre-norm: y = m (no skip) or h (no MLP)
            new = seen["h"] if no_mlp else seen["mlp"]
            _check_same_shape(new, _first(out), adapter, "the layer output")
            out = _with_first(out, new)
        record(_first(out))
        return out

    def capture(key: str):
        def hook(module: nn.Module, args: tuple, out: Any) -> None:
            seen[key] = _first(out)

        return hook

    def replace_input(make):
        def hook(module: nn.Module, args: tuple) -> tuple | None:
            new = make(args[0])
            if new is None:
                return None
            _check_same_shape(new, args[0], adapter, f"the value fed to {type(module).__name__}")
            return (new, *args[1:])

        return hook

    def attn_norm_in(x: torch.Tensor) -> torch.Tensor | None:  # post-norm: N1 reads x + a
        return seen["attn"] if (post and no_skip) else None

    def attn_norm_out(module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor | None:
        result = out if norms else args[0]
        if post:
            seen["h"] = result
        return None if norms else result

    def mlp_norm_in(s: torch.Tensor) -> torch.Tensor | None:
        if post:  # N2 reads h + m
            return seen["mlp"] if (no_skip and not no_mlp) else None
        new = seen["attn"] if no_skip else None  # pre-norm: N2 reads h = x + a
        seen["h"] = s if new is None else new
        return new

    def mlp_norm_out(module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor | None:
        if post and no_mlp:  # the MLP sub-layer is gone, N2 with it: y = h
            return seen["h"]
        return None if norms else args[0]

    handles = []
    try:
        for layer in layers_of(model, adapter):
            parts = _parts(layer, adapter)
            handles += [
                layer.register_forward_pre_hook(layer_pre, with_kwargs=True),
                layer.register_forward_hook(layer_post, with_kwargs=True),
                parts.attn_branch.register_forward_hook(capture("attn")),
                parts.mlp_branch.register_forward_hook(capture("mlp")),
                parts.attn_norm.register_forward_pre_hook(replace_input(attn_norm_in)),
                parts.attn_norm.register_forward_hook(attn_norm_out),
                parts.mlp_norm.register_forward_pre_hook(replace_input(mlp_norm_in)),
                parts.mlp_norm.register_forward_hook(mlp_norm_out),
            ]
        yield trace
    finally:
        for handle in handles:
            handle.remove()


def _takes_output_attentions(model: nn.Module) -> bool:
    """Whether `model(..., output_attentions=True)` is understood (Hugging Face models)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return "output_attentions" in params or (
        hasattr(model, "config") and any(p.kind is p.VAR_KEYWORD for p in params.values())
    )


def _is_attnzoo(model: nn.Module) -> bool:
    return hasattr(model, "blocks") and all(hasattr(b, "mixer") for b in model.blocks)


@torch.no_grad()
def _probe(
    model: nn.Module,
    inputs: torch.Tensor | Mapping[str, Any],
    variant: str,
    norms: bool,
    adapter: Adapter | str | None,
    attentions: bool,
) -> tuple[list[torch.Tensor], list[torch.Tensor | None] | None]:
    """The hidden states of one eval-mode forward run as `variant`, and with `attentions` the
    attention weights of each layer call (None where the model gives none)."""
    was_training = model.training
    model.eval()
    attn: list | tuple | None = None
    try:
        with contextlib.ExitStack() as stack:
            trace = stack.enter_context(intervene(model, variant, norms, adapter))
            if attentions and _is_attnzoo(model):
                attn = stack.enter_context(capture_attention(model))
            asks = attentions and attn is None and _takes_output_attentions(model)
            kwargs = {"output_attentions": True} if asks else {}
            if isinstance(inputs, Mapping):
                out = model(**inputs, **kwargs)
            else:
                out = model(inputs, **kwargs)
            if attentions and attn is None:
                attn = getattr(out, "attentions", None)
    finally:
        model.train(was_training)
    if len(trace.hidden) < 2:
        name = adapter if isinstance(adapter, str) else (adapter or adapter_for(model)).name
        raise ValueError(f"the forward ran no layer the adapter {name!r} declares")
    if attentions:
        calls = len(trace.hidden) - 1
        attn = list(attn) if attn is not None and len(attn) == calls else [None] * calls
    return trace.hidden, attn if attentions else None


def hidden_states(
    model: nn.Module,
    inputs: torch.Tensor | Mapping[str, Any],
    variant: str = "full",
    norms: bool = True,
    adapter: Adapter | str | None = None,
) -> list[torch.Tensor]:
    """The first layer's input and every layer call's output, (batch, tokens, dim) each, of one
    eval-mode forward of `model(**inputs)` (a mapping) or `model(inputs)` run as `variant`."""
    return _probe(model, inputs, variant, norms, adapter, attentions=False)[0]


def rank_decay(
    model: nn.Module,
    inputs: torch.Tensor | Mapping[str, Any],
    variant: str = "full",
    norms: bool = True,
    adapter: Adapter | str | None = None,
    dtype: torch.dtype | None = None,
    key_padding_mask: torch.Tensor | None = None,
    measures: str | Iterable[str] | None = None,
) -> RankProfile:
    """Mean and std over the batch of every measure in `measures` (default: all of
    attnzoo.rank.MEASURES; `mean`/`std` are the relative residual's) before the first layer and
    after every layer call, with `model` run as `variant`. With `dtype=torch.float64` a float64
    copy of the model is probed, which follows the residual below float32's floor (about 1e-7).
    `key_padding_mask` (batch, tokens), True at padding, leaves padded tokens out of every
    measure (the model's own attention mask goes in `inputs`)."""

    def forward(model: nn.Module, inputs: Any, attentions: bool):
        return _probe(model, inputs, variant, norms, adapter, attentions)

    return profile_forward(model, inputs, forward, measures, dtype, key_padding_mask)
