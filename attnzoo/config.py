"""The trainer's configuration: typed schemas in Hydra's ConfigStore, and the semantic checks that
run before any work.

Hydra composes `conf/config.yaml` (installed as `attnzoo.conf`) on top of `Config`, so a typo'd key,
a value of the wrong type or an unknown choice fails at composition with Hydra's message. Task
schemas are derived from the registry (`task_options`), and so are the typed schemas of the
registered mixers.

A mixer is named by its class: the `mixer` node holds `_target_` (the class's import path,
`package.module.Class`), an optional `name` (how runs and tables call it; default: the class name
in snake case) and the constructor's options. The node is open: any `mixer.<key>=` override
composes, and `check_mixer` then checks the keys against the class's constructor (`inspect`), so
a mixer in the user's own module, named by a YAML on `hydra.searchpath`, is checked as the
package's are. Each registered mixer `m` also gets a typed node `schema/mixer/m` (its name and
its constructor's options with their types and defaults), which its YAML (`conf/mixer/m.yaml`,
which gives `_target_`) starts from with `defaults: [/schema/mixer/m@_here_, _self_]`: a value
of the wrong type then fails at composition, and `--cfg job` prints every option.

Every default is written once: the model's in `attnzoo.model.ModelConfig` (the `model` schema is
derived from it), the training and logging ones in `TrainConfig` and `LoggerConfig` here, a
mixer's or a task's in its constructor. The YAML groups under conf/ hold only what a choice
changes, and comments.

`validate(cfg)` then checks what a schema cannot (dim divisible by heads, positive learning rate,
a context that fits the model, ...) and raises `ConfigError` naming the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from attnzoo.mixers import (
    MIXERS,
    check_options,
    class_path,
    mixer_class,
    registered_name,
    unknown_options,
)
from attnzoo.model import ModelConfig
from attnzoo.rank import MEASURES
from attnzoo.tasks import TASKS


class ConfigError(ValueError):
    """A configuration that composes but cannot be trained; the message names the key."""

    kind = "configuration error"  # how the command line labels it


class DataError(ConfigError):
    """A task's corpus is not there and could not be obtained; the message says how to get it."""

    kind = "data not available"


# Keys that are spelled another way now, and that spelling: a config that still uses one does
# not compose, and the trainer says so (exit 2) with `older_key`'s message.
OLDER_KEYS = {
    "model.skip": "model.residual=none for model.skip=false (true is the default, "
    "model.residual=add)",
    "model.layer_scale": "model.residual=layerscale model.residual_alpha=ε for model.layer_scale=ε",
}


def older_key(message: str) -> str | None:
    """What to say for a composition error (Hydra's message) about a key of OLDER_KEYS: the
    key and its current spelling; None for any other error."""
    for key, now in OLDER_KEYS.items():
        if re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message):
            return f"{key} is no longer a key; write {now}"
    return None


class Device(enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Impl(enum.Enum):
    auto = "auto"
    torch = "torch"
    triton = "triton"


class OnNonfinite(enum.Enum):
    stop = "stop"
    skip = "skip"


class LoggerMode(enum.Enum):
    offline = "offline"
    online = "online"
    disabled = "disabled"


_LITERAL_ENUMS: dict[tuple[str, ...], type[enum.Enum]] = {}


def _literal_enum(name: str, values: tuple[str, ...]) -> type[enum.Enum]:
    """The Enum OmegaConf checks a `Literal[...]` of strings with (one per set of values)."""
    if values not in _LITERAL_ENUMS:
        cls_name = "".join(p.title() for p in name.split("_"))
        _LITERAL_ENUMS[values] = enum.Enum(cls_name, [(v, v) for v in values])  # type: ignore[misc]
    return _LITERAL_ENUMS[values]


def _omegaconf_type(annotation: Any, name: str = "") -> Any:
    """The annotation if OmegaConf can type-check it, an Enum for a `Literal` of strings,
    Optional[...] for `X | None`, else Any."""
    simple = (int, float, bool, str)
    if typing.get_origin(annotation) is typing.Literal:
        return _literal_enum(name, typing.get_args(annotation))
    if annotation in simple or (isinstance(annotation, type) and issubclass(annotation, enum.Enum)):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2 and args[0] in simple:
            return Optional[args[0]]  # noqa: UP045 - OmegaConf wants typing.Optional
    return Any


def _options_schema(
    kind: str, name: str, fn: Any, skip: tuple[str, ...], target: bool = False
) -> type:
    """A dataclass `name: str` [+ `_target_: str`, which the YAML gives] + one field per keyword
    option of `fn` (typed, with its default)."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable annotations: fall back to untyped options
        hints = {}
    fields: list[tuple[str, Any, Any]] = [("name", str, field(default=name))]
    if target:
        fields.append(("_target_", str, field(default=MISSING)))
    for key, param in inspect.signature(fn).parameters.items():
        if key == "self" or key in skip or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        default = MISSING if param.default is inspect.Parameter.empty else param.default
        typ = _omegaconf_type(hints.get(key, Any), key)
        if isinstance(default, (list, dict)):
            fields.append((key, Any, field(default_factory=lambda d=default: type(d)(d))))
        else:
            fields.append((key, typ, field(default=default)))
    cls_name = "".join(p.title() for p in name.split("_")) + kind.title() + "Schema"
    return dataclasses.make_dataclass(cls_name, fields)


# ModelConfig's fields that other keys set: the `mixer` group, the task, the top-level `impl`.
_SET_ELSEWHERE = ("mixer", "mixer_options", "causal", "impl")


def _model_schema() -> type:
    """`model.*`: the fields of `attnzoo.model.ModelConfig` with their types and defaults, less
    `_SET_ELSEWHERE`, and `max_len`, the positions the model has (null: the task's context)."""
    hints = typing.get_type_hints(ModelConfig)
    fields: list[tuple[str, Any, Any]] = [
        (f.name, _omegaconf_type(hints[f.name], f.name), field(default=f.default))
        for f in dataclasses.fields(ModelConfig)
        if f.name not in _SET_ELSEWHERE
    ]
    fields.append(("max_len", Optional[int], field(default=None)))  # noqa: UP045
    return dataclasses.make_dataclass("ModelSchema", fields)


ModelSchema = _model_schema()


@dataclass
class TrainConfig:
    """`train.*`: the optimiser, schedule, evaluation and checkpoint cadence, and how the run
    uses the machine; the one place these defaults are written."""

    max_steps: int = 600
    # a budget instead of a step count (attnzoo.train.budget): training FLOPs (the step count they
    # buy replaces max_steps), or seconds spent training (evaluation not counted); null: none
    max_flops: float | None = None
    max_seconds: float | None = None
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.98
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio at max_steps
    grad_clip: float = 1.0  # max global grad norm; 0 turns clipping off
    log_every: int = 10
    eval_every: int = 100
    eval_batches: int = 4  # batches sampled from val at each evaluation during training
    # batch size of the final whole-split evaluation of val and test; null: train.batch_size
    eval_batch_size: int | None = None
    # the splits that final evaluation covers, whole, at the end of the run: a tuning run that
    # must not see test (its choice is made on val) says [val]
    final_splits: list[str] = field(default_factory=lambda: ["val", "test"])
    probe_batch_size: int = 16  # examples in the fixed batch the rank profile is measured on
    # the collapse measures (attnzoo.rank.MEASURES) the probe logs as rank/<measure>/layer_<k>;
    # rank/layer_<k> and rank/last (the relative residual) are logged whatever the list
    rank_measures: list[str] = field(default_factory=lambda: list(MEASURES))
    ckpt_every: int = 200
    seed: int = 0
    device: Device = Device.auto
    # torch intra-op threads: a positive int, or auto (from the model's size and the cores this
    # process may use; see attnzoo.train.threads_for)
    threads: Any = "auto"
    resume: bool = False
    # a continued run may change max_steps only with extend=true: the learning rate then decays
    # from its value where the run is continued to the floor at the new max_steps
    extend: bool = False
    on_nonfinite: OnNonfinite = OnNonfinite.stop
    progress: bool = True  # tqdm bar with loss and tokens/s
    deterministic: bool = False  # torch.use_deterministic_algorithms (CPU runs are already)
    compile: bool = False  # torch.compile the model for training (checkpoints stay eager keys)


@dataclass
class LoggerConfig:
    """`logger.*`: where the numbers go besides metrics.jsonl (Weights & Biases) and how much
    wall time the media may take."""

    mode: LoggerMode = LoggerMode.offline
    project: str = "attnzoo"
    entity: str | None = None
    group: str | None = None  # null: the configuration without its seed (attnzoo.replicates)
    name: str | None = None
    tags: list[str] = field(default_factory=list)
    attention_maps: bool = True  # images of attention maps and learned U / M with the extras
    # the share of wall time the evaluation extras (sample text, rank figure, W&B media) may take:
    # made while within it, and at the last evaluation; 1: at every evaluation, 0: at the last
    media_budget: float = 0.05
    init_timeout: float = 90.0  # seconds wandb.init may wait for the server before going offline


def _open_node() -> DictConfig:
    """A node that takes any key, struct mode or not (Hydra closes every other one): the mixer's,
    whose keys are its class's options, checked against the class by `check_mixer`."""
    return OmegaConf.create({}, flags={"struct": False})


@dataclass
class Config:
    """The whole run; conf/config.yaml picks a choice of each group on top of it."""

    mixer: Any = field(default_factory=_open_node)
    model: ModelSchema = field(default_factory=ModelSchema)
    task: Any = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    impl: Impl = Impl(ModelConfig.impl)  # the kernels every mixer uses
    # null: $ATTNZOO_DATA_DIR, else the user cache folder; relative paths are taken from the
    # directory the command was launched in.
    data_dir: str | None = None


def model_config(cfg: DictConfig, causal: bool) -> ModelConfig:
    """The `ModelConfig` a composed config describes (`model.*`, the mixer, `impl`), for a task
    that is `causal` or not; `model.max_len` is the Model's own argument, not part of it."""
    model = {k: v for k, v in options(cfg.model).items() if k != "max_len"}
    return ModelConfig(
        **model,
        mixer=mixer_ref(cfg.mixer),
        mixer_options=options(cfg.mixer),
        causal=causal,
        impl=enum_value(cfg.impl),
    )


_STORED: set[tuple[str | None, str]] = set()


JOB_FOLDER_CHARS = 120  # a job folder's name, at most: well inside a file system's 255 bytes


def swept_keys(sweep_dir: Path) -> set[str] | None:
    """The keys a multirun sweeps (`mixer=a,b`, `train.lr=range(...)`, a preset's
    `hydra.sweeper.params`), from the multirun.yaml Hydra writes before it launches the jobs;
    None where there is none."""
    import yaml
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        cfg = yaml.safe_load((sweep_dir / "multirun.yaml").read_text()) or {}
        hydra_node = cfg.get("hydra") or {}
        params = (hydra_node.get("sweeper") or {}).get("params") or {}
        given = (hydra_node.get("overrides") or {}).get("task") or []
        parsed = OverridesParser.create().parse_overrides([str(o) for o in given])
    except Exception:  # no multirun.yaml, or one this cannot read: name by every override
        return None
    return {str(k) for k in params} | {o.key_or_group for o in parsed if o.is_sweep_override()}


def job_folder(num: int, overrides: Any, sweep_dir: str) -> str:
    """A multirun job's folder name (conf/config.yaml's `hydra.sweep.subdir`): the values the
    sweep varies, as the job has them (`mixer=pooling,train.lr=0.002`, sorted by key), so that a
    sweep's folders say what each job ran and a rerun of the grid, in any order or extended,
    finds each configuration's folder again. `/` becomes `_` (a path in a value must not make
    folders); a name longer than JOB_FOLDER_CHARS keeps its start and ends in a hash of the
    whole; a job without swept values is its number."""
    import hashlib

    swept = swept_keys(Path(str(sweep_dir)))
    items = sorted(str(o) for o in overrides or [])
    if swept is not None:
        items = [o for o in items if o.lstrip("+~").split("=", 1)[0] in swept]
    name = ",".join(items).replace("/", "_")
    if not name:
        return str(num)
    if len(name) > JOB_FOLDER_CHARS:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: JOB_FOLDER_CHARS - 9]}-{digest}"
    return name


def register_configs() -> None:
    """Put `Config` and one schema per registered mixer and task into Hydra's ConfigStore, and
    the `attnzoo_job_folder` resolver (`job_folder`) into OmegaConf. Safe to call again: only
    mixers and tasks registered since the last call are added."""
    from attnzoo.mixers import COMMON_ARGS as MIXER_ARGS
    from attnzoo.tasks import COMMON_ARGS as TASK_ARGS

    if not OmegaConf.has_resolver("attnzoo_job_folder"):
        OmegaConf.register_new_resolver("attnzoo_job_folder", job_folder)

    cs = ConfigStore.instance()
    nodes: list[tuple[str | None, str, Any]] = [(None, "config_schema", lambda: Config)]
    for name, cls in MIXERS.items():
        nodes.append(
            (
                "schema/mixer",
                name,
                lambda n=name, c=cls: _options_schema("mixer", n, c.__init__, MIXER_ARGS, True),
            )
        )
    for name, cls in TASKS.items():
        nodes.append(
            (
                "schema/task",
                name,
                lambda n=name, f=cls.__init__: _options_schema("task", n, f, TASK_ARGS),
            )
        )
    for group, name, make in nodes:
        if (group, name) not in _STORED:
            cs.store(group=group, name=name, node=make())
            _STORED.add((group, name))


def default_data_dir() -> Path:
    """$ATTNZOO_DATA_DIR, else $XDG_CACHE_HOME/attnzoo (~/.cache/attnzoo)."""
    env = os.environ.get("ATTNZOO_DATA_DIR")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache).expanduser() / "attnzoo"


def resolve_data_dir(value: str | None, launch_dir: Path) -> Path:
    """`data_dir` as an absolute path; relative paths are relative to where the command ran."""
    path = default_data_dir() if value in (None, "") else Path(str(value)).expanduser()
    return path if path.is_absolute() else (launch_dir / path).resolve()


def enum_value(v: Any) -> Any:
    return v.value if isinstance(v, enum.Enum) else v


def options(node: DictConfig) -> dict[str, Any]:
    """A mixer or task node's options: every key but `name` and `_target_`, as plain Python
    values."""
    plain = OmegaConf.to_container(node, resolve=True, enum_to_str=True)
    assert isinstance(plain, dict)
    return {k: v for k, v in plain.items() if k not in ("name", "_target_")}


def mixer_label(node: Any) -> str:
    """How runs, W&B groups and tables call the mixer: `mixer.name`, else the class name of its
    `_target_` in snake case (`shiftmix.Shift` -> `shift`, `pkg.MyMixer` -> `my_mixer`); read
    from the config alone (no import), so that a reader of a sweep's folders calls a run's mixer
    as the trainer did."""
    if node.get("name"):
        return str(node["name"])
    cls_name = str(node.get("_target_") or "mixer").rsplit(".", 1)[-1]
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", cls_name).lower()


def mixer_ref(node: Any) -> str:
    """The mixer a node names, as `ModelConfig.mixer` takes it: the registered name of a
    registered class, else the class's import path."""
    cls = check_mixer(node)
    return registered_name(cls) or class_path(cls)


def check_mixer(node: Any) -> type:
    """The class the `mixer` node names (`_target_`, else a registered `name`), after checking
    that it imports and that its constructor takes the node's options; ConfigError naming the
    key otherwise."""
    target, name = node.get("_target_"), node.get("name")
    if not target and not name:
        raise ConfigError(
            "mixer: the mixer node names no class; allowed: mixer=<one of "
            f"{sorted(MIXERS)}> or a YAML with _target_: package.module.Class"
        )
    key, value = ("mixer._target_", target) if target else ("mixer.name", name)
    try:
        cls = mixer_class(str(value))
    except ValueError as err:
        raise ConfigError(f"{key}={value!r}: {err}") from err
    opts = options(node)
    try:
        check_options(cls, opts)
    except ValueError as err:
        unknown = unknown_options(cls, opts)
        where = ", ".join(f"mixer.{k}={opts[k]!r}" for k in unknown) or f"mixer={mixer_label(node)}"
        raise ConfigError(f"{where} is not allowed: {err}") from err
    return cls


def _require(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r} is not allowed: {key} must be {allowed}")


def validate(cfg: DictConfig) -> None:
    """Check what the schemas cannot; raise ConfigError naming the key and the allowed values."""
    mixer_cls = check_mixer(cfg.mixer)
    task = cfg.get("task")
    name = None if task is None else task.get("name")
    _require(name in TASKS, "task.name", name, f"one of {sorted(TASKS)}")
    if TASKS[name].causal and not getattr(mixer_cls, "supports_causal", True):
        raise ConfigError(
            f"mixer={mixer_label(cfg.mixer)} is not allowed with task={name}: the task is causal "
            "(a language model) and this mixer cannot be causal (every output mixes every "
            "token); allowed: a non-causal task, or a mixer that can be causal"
        )
    if not TASKS[name].causal and not getattr(mixer_cls, "supports_bidirectional", True):
        causal = sorted(n for n, t in TASKS.items() if t.causal)
        raise ConfigError(
            f"mixer={mixer_label(cfg.mixer)} is not allowed with task={name}: the task is not "
            "causal (every output sees every token) and this mixer is causal only; allowed: a "
            f"causal task ({', '.join(causal)}), or a mixer that can be bidirectional"
        )
    m, t = cfg.model, cfg.train
    _require(m.dim >= 1, "model.dim", m.dim, "a positive int")
    _require(m.depth >= 1, "model.depth", m.depth, "a positive int")
    _require(m.heads >= 1, "model.heads", m.heads, "a positive int")
    _require(
        m.dim % m.heads == 0,
        "model.dim",
        m.dim,
        f"divisible by model.heads={m.heads} (e.g. {m.heads * max(1, m.dim // m.heads)})",
    )
    _require(m.mlp_ratio > 0, "model.mlp_ratio", m.mlp_ratio, "> 0")
    _require(0 <= m.dropout < 1, "model.dropout", m.dropout, "in [0, 1)")
    _require(m.max_len is None or m.max_len >= 1, "model.max_len", m.max_len, "null or >= 1")
    _require(t.max_steps >= 1, "train.max_steps", t.max_steps, "a positive int (>= 1)")
    for key in ("max_flops", "max_seconds"):
        _require(t[key] is None or t[key] > 0, f"train.{key}", t[key], "null or > 0")
    _require(t.batch_size >= 1, "train.batch_size", t.batch_size, "a positive int (>= 1)")
    _require(t.lr > 0, "train.lr", t.lr, "a positive float (> 0)")
    _require(t.weight_decay >= 0, "train.weight_decay", t.weight_decay, ">= 0")
    _require(0 <= t.beta1 < 1, "train.beta1", t.beta1, "in [0, 1)")
    _require(0 <= t.beta2 < 1, "train.beta2", t.beta2, "in [0, 1)")
    _require(t.warmup_steps >= 0, "train.warmup_steps", t.warmup_steps, ">= 0")
    _require(0 <= t.min_lr_ratio <= 1, "train.min_lr_ratio", t.min_lr_ratio, "in [0, 1]")
    _require(t.grad_clip >= 0, "train.grad_clip", t.grad_clip, ">= 0 (0 turns clipping off)")
    for key in ("log_every", "eval_every", "eval_batches", "probe_batch_size", "ckpt_every"):
        _require(t[key] >= 1, f"train.{key}", t[key], "a positive int (>= 1)")
    _require(
        t.eval_batch_size is None or t.eval_batch_size >= 1,
        "train.eval_batch_size",
        t.eval_batch_size,
        "null or a positive int (>= 1)",
    )
    splits = list(t.final_splits)
    for split in splits:
        _require(split in ("val", "test"), "train.final_splits", split, "a list of val, test")
    _require(len(set(splits)) == len(splits), "train.final_splits", splits, "no split twice")
    for name in t.rank_measures:
        _require(name in MEASURES, "train.rank_measures", name, f"a list of {list(MEASURES)}")
    threads = t.threads
    _require(
        threads == "auto"
        or (isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1),
        "train.threads",
        threads,
        "auto or a positive int (>= 1)",
    )
    budget = cfg.logger.media_budget
    _require(0 <= budget <= 1, "logger.media_budget", budget, "in [0, 1] (a share of wall time)")
    if enum_value(t.device) == "cuda":
        import torch

        _require(
            torch.cuda.is_available(),
            "train.device",
            "cuda",
            "one of auto, cpu on this machine (CUDA is not available)",
        )
