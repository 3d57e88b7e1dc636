"""The mixer registry and how a config names a mixer: `MIXERS` and `register`; `mixer_class`,
which resolves a registered name, an import path (a YAML's `_target_`) or a class to the class;
`build_mixer` and the checks of a mixer's options against its constructor.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping

from torch import nn

MIXERS: dict[str, type[nn.Module]] = {}

# Arguments every mixer receives from the block; everything else is a mixer-specific option.
COMMON_ARGS = ("dim", "heads", "causal", "impl")


def register(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    def add(cls: type[nn.Module]) -> type[nn.Module]:
        if name in MIXERS:
            raise ValueError(f"mixer {name!r} is registered twice")
        MIXERS[name] = cls
        cls.mixer_name = name
        return cls

    return add


def class_path(cls: type) -> str:
    """`package.module.Class`: how a YAML's `_target_` names the class."""
    return f"{cls.__module__}.{cls.__qualname__}"


def registered_name(cls: type) -> str | None:
    """The name `cls` is registered under in MIXERS (not one inherited from a registered class)."""
    name = getattr(cls, "mixer_name", None)
    return name if name is not None and MIXERS.get(name) is cls else None


def _import(path: str) -> object:
    """The object at `package.module.Attr[.Attr...]`: the longest importable module prefix, then
    attributes."""
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name is not None and not (module_name + ".").startswith(err.name + "."):
                raise  # the module exists and fails to import something of its own
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(f"no module {parts[0]!r}")


def mixer_class(mixer: str | type[nn.Module]) -> type[nn.Module]:
    """The class a mixer is named by: a name registered in MIXERS, an import path
    `package.module.Class` (a mixer in the user's own code, on PYTHONPATH), or the class itself."""
    if isinstance(mixer, str) and mixer in MIXERS:
        return MIXERS[mixer]
    if isinstance(mixer, str) and "." in mixer:
        try:
            cls = _import(mixer)
        except (ImportError, AttributeError) as err:
            raise ValueError(
                f"mixer class {mixer!r} cannot be imported ({type(err).__name__}: {err}); is "
                "its module on PYTHONPATH?"
            ) from err
    elif isinstance(mixer, type):
        cls = mixer
    else:
        raise ValueError(
            f"unknown mixer {mixer!r}; registered mixers: {sorted(MIXERS)}, or a mixer class by "
            "its import path (package.module.Class)"
        )
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ValueError(f"mixer {mixer!r} is {cls!r}, not an nn.Module class")
    return cls


def can_run(cls: type, causal: bool) -> bool:
    """Whether mixer class `cls` can be built `causal` (or bidirectional, `causal=False`): False
    where it declares `supports_causal = False` or `supports_bidirectional = False`."""
    return getattr(cls, "supports_causal" if causal else "supports_bidirectional", True)


def causal_mixers() -> list[str]:
    """The registered mixers that can run a causal task (language modelling), in registry order:
    those without `supports_causal = False`."""
    return [name for name, cls in MIXERS.items() if can_run(cls, causal=True)]


def mixer_options(mixer: str | type[nn.Module]) -> dict[str, object]:
    """The mixer-specific options of a mixer's constructor with their defaults
    (`inspect.Parameter.empty` for one without a default); a `**kwargs` is left out."""
    params = inspect.signature(mixer_class(mixer).__init__).parameters
    return {
        k: p.default
        for k, p in params.items()
        if k != "self" and k not in COMMON_ARGS and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }


def unknown_options(mixer: str | type[nn.Module], options: Mapping[str, object]) -> list[str]:
    """The keys of `options` the mixer's constructor does not take (none if it takes `**kwargs`)."""
    cls = mixer_class(mixer)
    params = inspect.signature(cls.__init__).parameters.values()
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return []
    return sorted(set(options) - set(mixer_options(cls)))


def check_options(mixer: str | type[nn.Module], options: Mapping[str, object]) -> None:
    """ValueError naming the options the mixer's constructor does not take, or the ones it needs
    that are not given."""
    cls = mixer_class(mixer)
    label = repr(registered_name(cls) or class_path(cls))
    params = inspect.signature(cls.__init__).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        lacking = [a for a in COMMON_ARGS if a not in params]
        if lacking:
            raise ValueError(
                f"mixer {label}'s constructor must take {', '.join(COMMON_ARGS)} (what the block "
                f"gives every mixer); it does not take {lacking}"
            )
    allowed = mixer_options(cls)
    unknown = unknown_options(cls, options)
    if unknown:
        raise ValueError(
            f"mixer {label} has no option(s) {unknown}; its options are {sorted(allowed) or 'none'}"
        )
    empty = inspect.Parameter.empty
    missing = sorted(k for k, d in allowed.items() if d is empty and k not in options)
    if missing:
        raise ValueError(f"mixer {label} needs the option(s) {missing}, which have no default")


def build_mixer(
    mixer: str | type[nn.Module],
    dim: int,
    heads: int = 1,
    causal: bool = False,
    impl: str = "auto",
    **options: object,
) -> nn.Module:
    """The mixer `mixer` (a registered name, an import path or a class) with its `options`."""
    cls = mixer_class(mixer)
    check_options(cls, options)
    return cls(dim=dim, heads=heads, causal=causal, impl=impl, **options)
