"""The trainer's configuration: the default composes, schemas follow the registries, and every bad
override fails before training with a message that names the key and what is allowed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from attnzoo.config import ConfigError, resolve_data_dir
from attnzoo.mixers import MIXERS, mixer_class, mixer_options
from attnzoo.tasks import TASKS, task_options
from attnzoo.train import compose, run

ROOT = Path(__file__).resolve().parents[1]


def test_default_config_composes_to_the_documented_run():
    cfg = compose([])
    assert cfg.mixer.name == "scaled_dot" and cfg.task.name == "sort"
    assert cfg.task.seq_len == 8 and cfg.task.vocab_size == 10
    assert cfg.logger.mode.value == "offline" and cfg.train.resume is False
    for key in ("dim", "depth", "heads", "residual", "mlp", "norm", "norm_position"):
        assert key in cfg.model
    for key in ("max_steps", "batch_size", "lr", "warmup_steps", "eval_every", "ckpt_every"):
        assert key in cfg.train
    for key in ("seed", "device", "resume", "threads", "on_nonfinite"):
        assert key in cfg.train
    assert "impl" in cfg and "data_dir" in cfg


@pytest.mark.parametrize("name", sorted(MIXERS))
def test_every_mixer_has_a_yaml_matching_its_options(name):
    path = ROOT / "conf" / "mixer" / f"{name}.yaml"
    assert path.exists(), f"registered mixer {name!r} has no conf/mixer/{name}.yaml"
    cfg = compose([f"mixer={name}"])
    assert set(cfg.mixer) == {"name", "_target_", *mixer_options(name)}
    assert cfg.mixer.name == name
    assert mixer_class(cfg.mixer._target_) is MIXERS[name]  # the YAML names the class


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_has_a_yaml_matching_its_options(name):
    assert (ROOT / "conf" / "task" / f"{name}.yaml").exists()
    cfg = compose([f"task={name}"])
    assert set(cfg.task) == {"name", *task_options(name)}


def test_experiment_presets_are_global_and_compose():
    for path in sorted((ROOT / "conf" / "experiment").glob("*.yaml")):
        assert path.read_text().startswith("# @package _global_"), path
        compose([f"experiment={path.stem}"])
    cfg = compose(["experiment=circle"])
    assert cfg.task.name == "circle" and cfg.model.share_blocks and cfg.model.heads == 1
    cfg = compose(["experiment=san_sort"])
    assert (
        cfg.model.residual.value == "none" and not cfg.model.mlp and cfg.model.norm.value == "none"
    )


def _messages(err: BaseException) -> str:
    out = []
    while err is not None:
        out.append(str(err))
        err = err.__cause__ or err.__context__
    return "\n".join(out)


# override, words the error must contain (the key and the allowed values)
COMPOSE_ERRORS = [
    (["mixer=nope"], ["mixer", "scaled_dot", "metric", "pooling"]),
    (["task=nope"], ["task", "sort", "convex_hull", "memorize"]),
    (["model.dimm=3"], ["model.dimm"]),
    (["train.max_steps=lots"], ["train.max_steps", "Integer"]),
    (["model.norm=batchnorm"], ["model.norm", "layernorm", "rmsnorm", "none"]),
    (["train.device=tpu"], ["train.device", "auto", "cpu", "cuda"]),
    (["impl=cuda_c"], ["impl", "auto", "torch", "triton"]),
    (["impl=tune"], ["impl", "auto", "torch", "triton"]),
    (["logger.mode=sometimes"], ["logger.mode", "offline", "online", "disabled"]),
    (["mixer=pooling", "mixer.window=wide"], ["mixer.window", "Integer"]),
    (["train.on_nonfinite=ignore"], ["train.on_nonfinite", "stop", "skip"]),
    (["model.rezero_alpha=both"], ["model.rezero_alpha", "shared", "per_branch"]),
    (["model.attnres_form=layer"], ["model.attnres_form", "full", "block", "per_block"]),
    (["model.attnres_block_size=big"], ["model.attnres_block_size", "Integer"]),
]


@pytest.mark.parametrize("overrides,words", COMPOSE_ERRORS, ids=lambda v: str(v))
def test_bad_override_fails_at_composition(overrides, words):
    with pytest.raises(Exception) as info:
        compose(overrides)
    text = _messages(info.value)
    for word in words:
        assert word in text, text


SEMANTIC_ERRORS = [
    (["model.dim=30", "model.heads=4"], ["model.dim", "divisible by model.heads=4"]),
    (["train.lr=-0.001"], ["train.lr", "> 0"]),
    (["train.lr=0"], ["train.lr", "> 0"]),
    (["train.max_steps=0"], ["train.max_steps", ">= 1"]),
    (["mixer=pooling", "mixer.window=4"], ["mixer.window=4", "odd"]),
    (["mixer=scaled_dot", "mixer.window=3"], ["mixer.window=3", "no option", "attn_dropout"]),
    (["mixer._target_=attnzoo.mixers.Nope"], ["mixer._target_", "attnzoo.mixers.Nope"]),
    (["mixer._target_=collections.OrderedDict"], ["mixer._target_", "not an nn.Module class"]),
    (["task.seq_len=16", "model.max_len=8"], ["task.seq_len", "model.max_len=8", "<="]),
    (["mixer=token_mlp", "mixer.max_len=4"], ["mixer.max_len=4", "token_mlp", ">= 8"]),
    (["train.eval_every=0"], ["train.eval_every", ">= 1"]),
    (["model.depth=0"], ["model.depth", "positive"]),
    (["model.dropout=1.5"], ["model.dropout", "[0, 1)"]),
    (
        ["model.residual=attnres", "model.attnres_form=block", "model.attnres_block_size=0"],
        ["model.attnres_block_size=0", "positive int"],
    ),
    (
        ["model.residual=attnres", "model.attnres_block_size=4"],
        ["model.attnres_block_size=4", "model.attnres_form=block"],
    ),
]


@pytest.mark.parametrize("overrides,words", SEMANTIC_ERRORS, ids=lambda v: str(v))
def test_bad_value_fails_before_training(overrides, words, tmp_path):
    cfg = compose([*overrides, "logger.mode=disabled", "train.progress=false"])
    with pytest.raises(ConfigError) as info:
        run(cfg, tmp_path)
    for word in words:
        assert word in str(info.value), str(info.value)
    assert not (tmp_path / "metrics.jsonl").exists()
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(
    "overrides,words",
    [
        # Hydra's own errors (composition) and attnzoo's (values, the mixer's options) alike
        (["mixer=scaled_dt"], ["mixer=scaled_dt", "did you mean mixer=scaled_dot", "allowed:"]),
        (["model.dpeth=6"], ["model.dpeth: no such key", "did you mean model.depth?"]),
        (["train.lr=abc"], ["train.lr=abc", "could not be converted to Float"]),
        (["model.dim=30", "model.heads=4"], ["model.dim", "divisible by model.heads=4"]),
        (["mixer=pooling", "mixer.bogus=1"], ["mixer.bogus=1", "window"]),
        # the older spellings of model.residual: refused, naming the key and how to say it now
        (["model.skip=false"], ["model.skip is no longer a key", "model.residual=none"]),
        (
            ["model.layer_scale=0.1"],
            ["model.layer_scale is no longer a key", "model.residual=layerscale", "residual_alpha"],
        ),
    ],
)
@pytest.mark.sample(2)
def test_cli_exits_2_naming_the_key_and_writes_nothing(overrides, words, tmp_path):
    env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "attnzoo.train", *overrides, f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    for word in words:
        assert word in out.stderr, out.stderr
    assert "+model" not in out.stderr  # not Hydra's hint, which adds a key nothing reads
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "run").exists()  # no folder, not even an empty one


def test_an_older_key_in_a_config_file_exits_2_naming_its_current_spelling(tmp_path):
    """A preset of the user's own that still says model.layer_scale is refused like the command
    line's older keys, and makes no run folder."""
    (tmp_path / "my_conf" / "experiment").mkdir(parents=True)
    preset = "# @package _global_\nmodel:\n  layer_scale: 0.1\n"
    (tmp_path / "my_conf" / "experiment" / "old.yaml").write_text(preset)
    env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_DIR": str(tmp_path)}
    args = [f"hydra.searchpath=[file://{tmp_path / 'my_conf'}]", "experiment=old"]
    out = subprocess.run(
        [sys.executable, "-m", "attnzoo.train", *args, f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "model.layer_scale is no longer a key" in out.stderr, out.stderr
    assert "model.residual=layerscale model.residual_alpha" in out.stderr, out.stderr
    assert not (tmp_path / "run").exists()


def test_triton_on_cpu_without_the_interpreter_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    cfg = compose(["impl=triton", "train.device=cpu", "logger.mode=disabled"])
    with pytest.raises(ConfigError, match="impl=triton needs a CUDA device.*impl=torch"):
        run(cfg, tmp_path)


def test_data_dir_default_env_and_relative(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNZOO_DATA_DIR", str(tmp_path / "corpora"))
    assert resolve_data_dir(None, Path("/launch")) == tmp_path / "corpora"
    monkeypatch.delenv("ATTNZOO_DATA_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert resolve_data_dir(None, Path("/launch")) == tmp_path / "cache" / "attnzoo"
    assert resolve_data_dir("../shared/data", tmp_path / "repo") == tmp_path / "shared" / "data"


def test_saved_config_round_trips(tmp_path):
    cfg = compose(["mixer=metric", "mixer.metric_param=psd", "model.residual=none"])
    OmegaConf.save(cfg, tmp_path / "c.yaml")
    back = yaml.safe_load((tmp_path / "c.yaml").read_text())
    assert back["mixer"] == {
        "name": "metric",
        "_target_": "attnzoo.mixers.softmax.MetricTensorAttention",
        "metric_param": "psd",
        "attn_dropout": 0.0,
        "sink": "none",
        "gate": "none",
    }
    assert back["model"]["residual"] == "none" and back["model"]["norm"] == "layernorm"


def test_model_defaults_and_fields_come_from_model_config():
    """`model.*` is `attnzoo.model.ModelConfig` (its defaults written there only), and the model
    a run builds gets every key of the composed config."""
    from attnzoo.config import enum_value, model_config
    from attnzoo.model import ModelConfig

    defaults, cfg = ModelConfig(), compose([])
    assert set(cfg.model) - {"max_len"} <= set(vars(defaults))
    for key in set(cfg.model) - {"max_len"}:
        assert enum_value(cfg.model[key]) == getattr(defaults, key), key
    cfg = compose(["mixer=metric", "mixer.metric_param=psd", "model.norm=rmsnorm", "impl=torch"])
    assert model_config(cfg, causal=True) == ModelConfig(
        norm="rmsnorm",
        mixer="metric",
        mixer_options={"metric_param": "psd", "attn_dropout": 0.0, "sink": "none", "gate": "none"},
        causal=True,
        impl="torch",
    )


def _help(*args: str) -> subprocess.CompletedProcess:
    probe = (
        "import sys; from attnzoo.train.cli import main; main(); "
        "print('LOADED', sorted(m for m in ('matplotlib', 'scipy', 'wandb') if m in sys.modules))"
    )
    return subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120
    )


def test_help_is_hydras_text_for_the_chosen_mixer_without_loading_what_a_run_needs():
    """`--help` prints what Hydra's own help prints (a hydra.* override makes Hydra print it),
    with the chosen mixer's keys, and imports neither the figures nor the statistics."""
    quick = _help("mixer=pooling", "--help")
    hydras = _help("mixer=pooling", "hydra.job.chdir=false", "--help")
    assert quick.returncode == hydras.returncode == 0, quick.stderr + hydras.stderr
    text, loaded = quick.stdout.rsplit("LOADED", 1)
    assert text == hydras.stdout.rsplit("LOADED", 1)[0]
    assert "window:" in text and "mixer=NAME task=NAME --help" in text
    assert loaded.strip() == "[]"
