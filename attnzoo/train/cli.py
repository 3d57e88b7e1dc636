"""The command line: `python -m attnzoo.train key=value ...` (Hydra), `python -m attnzoo.train
--continue FOLDER` (a run's or a sweep's folder is enough to continue it:
`attnzoo.train.continuing`), and `compose`, the same configuration from Python.

Exit codes of a single run: 0 completed, 1 failed (an exception; see summary.json), 2 bad
configuration (nothing was trained, nothing written: a key, value or group choice Hydra cannot
compose, a value attnzoo refuses, a folder that holds another run's checkpoint), 3 diverged
(non-finite loss or gradient with `train.on_nonfinite=stop`), 75 pre-empted (SIGTERM/SIGUSR1: a
checkpoint was written at the next step boundary; run again and it resumes), 130 interrupted
(Ctrl-C: a checkpoint of the last completed step; continue with `--continue RUN_DIR`). In a
multirun a failed job is Hydra's to record, and the sweep goes on; the command then exits 2 if a
job was refused for its configuration, else 1. A mixer that cannot be built as configured (its
class does not import, or does not take an option given) is found before Hydra makes a single
run's folder (`CheckMixer`).
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from attnzoo.checkpoint import CheckpointError
from attnzoo.config import ConfigError, check_mixer, older_key, register_configs
from attnzoo.train.build import hydra_runtime, run
from attnzoo.train.continuing import CONTINUE, continue_sweep
from attnzoo.train.footprint import SWEEP_RECORDS, Footprint
from attnzoo.train.resume import (
    continue_command,
    continued_config,
    named_keys,
    recorded_config,
    requeued,
    was_preempted,
)
from attnzoo.train.trainer import EXIT_CODES, EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK

register_configs()

_CONF_MODULE = "attnzoo.conf"
# Hydra 1.4 deprecates `version_base`; 1.3 wants it (1.3's defaults: no chdir into the run dir).
_HYDRA_MAJOR_MINOR = tuple(int(x) for x in hydra.__version__.split(".")[:2])
_VERSION_BASE: dict[str, Any] = {} if _HYDRA_MAJOR_MINOR >= (1, 4) else {"version_base": "1.3"}


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """The configuration `python -m attnzoo.train *overrides` would train (without its `hydra`
    node). Raises Hydra's errors for unknown keys, wrong types and unknown choices."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return hydra_compose("config", overrides=list(overrides))
    with initialize_config_module(config_module=_CONF_MODULE, **_VERSION_BASE):
        return hydra_compose("config", overrides=list(overrides))


_exit_code = EXIT_OK
_launched = False  # whether Hydra got as far as a run or a sweep (past the command line)
_footprint: Footprint | None = None  # the run's or the sweep's folder before Hydra touched it
_sweep_dir: Path | None = None


class CheckMixer(Callback):
    """Hydra callback (conf/config.yaml's `hydra.callbacks`): notes the run's or the sweep's
    folder before Hydra makes it (`Footprint`: a command that trains nothing leaves it as it
    was); before a single run's folder is made, the mixer's class must import and take the
    options given (`check_mixer`), else the command exits 2 naming the key. A job of a multirun
    is checked by `run` and fails as a job."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _launched, _footprint, _sweep_dir
        _launched = True
        _sweep_dir = Path(str(config.hydra.sweep.dir))
        _footprint = Footprint.before(_sweep_dir, SWEEP_RECORDS)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _launched, _footprint
        _launched = True
        _footprint = Footprint.before(Path(str(config.hydra.run.dir)))
        try:
            check_mixer(config.mixer)
        except ConfigError as err:
            print(f"attnzoo.train: {_kind(err)}: {err}", file=sys.stderr)
            sys.exit(EXIT_CONFIG)


def task_function(cfg: DictConfig) -> dict[str, Any] | None:
    """One Hydra job. A module-level function (not the decorated one), so that launchers that
    ship jobs to other processes (joblib, submitit) pickle it by reference."""
    global _exit_code
    hc = hydra_runtime()
    multirun = hc is not None and str(hc.mode).endswith("MULTIRUN")
    try:
        summary = run(_continued(cfg, hc))
    except (ConfigError, CheckpointError) as err:
        if multirun:
            raise  # Hydra records the failed job and goes on with the others
        print(f"attnzoo.train: {_kind(err)}: {err}", file=sys.stderr)
        _exit_code = EXIT_CONFIG
        return None
    _exit_code = EXIT_CODES.get(summary["status"], EXIT_FAILED)
    if multirun and summary["status"] == "interrupted":
        raise KeyboardInterrupt  # Ctrl-C stops the sweep, not just this job
    return summary


def _continued(cfg: DictConfig, hc: Any) -> DictConfig:
    """The configuration of a job that continues the run in its folder (`train.resume=true`, a
    requeued or pre-empted job): the run's recorded one, changed only where the command line
    names a key (`continued_config`), so that `hydra.run.dir=RUN train.resume=true` continues
    the run in RUN as it was, default or not."""
    run_dir = Path(hc.runtime.output_dir)
    if not (cfg.train.resume or requeued() or was_preempted(run_dir)):
        return cfg
    recorded = recorded_config(run_dir)
    if recorded is None:
        return cfg
    named, preset = named_keys(list(hc.overrides.task), dict(hc.runtime.choices), cfg)
    return continued_config(cfg, recorded, named, preset)


def _keys(node: Any, prefix: str = "") -> Iterator[str]:
    """Every dotted key of a composed config."""
    for key, value in node.items():
        yield f"{prefix}{key}"
        if isinstance(value, DictConfig):
            yield from _keys(value, f"{prefix}{key}.")


def _hydra_message(err: Exception) -> str:
    """Hydra's or OmegaConf's error in attnzoo's words: the key, what is wrong, and for an
    unknown key the closest real ones (not Hydra's `+key=` hint, which adds a key nothing
    reads)."""
    cause = err.__cause__ if err.__cause__ is not None else err
    text = str(cause).strip()
    if older := older_key(f"{err}\n{text}"):
        return older
    bad = re.search(r"Could not override '([^']+)'", str(err))
    if bad and "not in" in text:
        key = bad.group(1)
        try:
            known = list(_keys(compose([])))
        except Exception:  # the suggestion is a courtesy
            known = []
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"{key}: no such key{hint} (`python -m attnzoo.train --help` lists every key)"
    missing = re.search(r"Could not find '([^'/]+)/([^']+)'", str(err))
    if missing and "Available options" in str(err):
        group, choice = missing.groups()
        options = str(err).split("Available options", 1)[1].split("Config search path")[0]
        allowed = [ln.strip() for ln in options.splitlines() if ln.startswith("\t")]
        allowed = [a for a in allowed if not a.startswith("schema")]
        close = difflib.get_close_matches(choice, allowed, n=1, cutoff=0.6)
        hint = f"did you mean {group}={close[0]}? " if close else ""
        return f"{group}={choice}: no such choice; {hint}allowed: {', '.join(allowed)}"
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return first if cause is err else f"{first}: {text.splitlines()[0]}"


def _kind(err: BaseException) -> str:
    """How a refusal is labelled: a configuration error, or data that is not available."""
    return getattr(err, "kind", "configuration error")


def _is_config_error(err: BaseException) -> bool:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(err, (HydraException, OmegaConfBaseException, ConfigError, CheckpointError))


def main() -> None:
    """`python -m attnzoo.train key=value ...`, or `python -m attnzoo.train --continue FOLDER
    [key=value ...]`; see the module docstring for exit codes."""
    if _quick_help(sys.argv[1:]):
        return
    folder, extra = _continue_argument(sys.argv[1:])
    if folder is not None:
        if not (folder / ".hydra" / "config.yaml").is_file():
            sys.exit(continue_sweep(folder, extra))
        # one run: Hydra's run in its folder, from the configuration it recorded (`_continued`)
        sys.argv = [sys.argv[0], *extra, f"hydra.run.dir={_hydra_quote(str(folder))}"]
        sys.argv.append("train.resume=true")
    full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra's errors reach us, to be exit 2, not its 1
    try:
        _hydra_main()
    except KeyboardInterrupt:
        print("attnzoo.train: interrupted: the stopped job kept a checkpoint", file=sys.stderr)
        if _sweep_dir is not None:
            print(f"  continue       {continue_command(_sweep_dir)}", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as err:
        if full_error:
            raise
        if isinstance(err, (ConfigError, CheckpointError)):  # a refused job of a multirun
            print(f"attnzoo.train: {_kind(err)}: {err}", file=sys.stderr)
            sys.exit(EXIT_CONFIG)
        if _is_config_error(err) or not _launched:  # Hydra stopped at the command line
            print(f"attnzoo.train: configuration error: {_hydra_message(err)}", file=sys.stderr)
            sys.exit(EXIT_CONFIG)
        traceback.print_exc()
        sys.exit(EXIT_FAILED)
    finally:
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        if _footprint is not None:
            _footprint.restore()  # trained nothing: leave the folders as they were
    sys.exit(_exit_code)


_HELP_TEMPLATE = """{header}
== Configuration groups ==
Compose your configuration from those groups (group=option)

{groups}


== Config ==
Override anything in the config (foo.bar=value)

{config}

{footer}
"""


def _quick_help(argv: list[str]) -> bool:
    """`--help` with overrides of attnzoo's keys only: Hydra's text, without Hydra's listing of
    every config group (which composes the whole configuration once per group, seconds). With a
    `hydra.*` override (a search path of the user's own mixers, say) or a configuration that
    does not compose, Hydra prints the help or the error instead: False."""
    if not {"--help", "-h"} & set(argv):
        return False
    overrides = [a for a in argv if a not in ("--help", "-h")]
    if any(a.startswith("-") or a.lstrip("+~").startswith("hydra") for a in overrides):
        return False
    from importlib.resources import files

    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    try:
        cfg = compose(overrides)
    except Exception:
        return False
    conf = files(_CONF_MODULE)
    groups: dict[str, set[str]] = {}
    for folder in conf.iterdir():
        if folder.is_dir() and folder.name not in ("hydra", "__pycache__"):
            names = {f.name[:-5] for f in folder.iterdir() if f.name.endswith(".yaml")}
            groups.setdefault(folder.name, set()).update(names)

    def stored(node: dict, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict) and key != "hydra":
                stored(value, f"{prefix}{key}/")
            elif prefix and key.endswith(".yaml"):
                groups.setdefault(prefix[:-1], set()).add(key[:-5])

    stored(ConfigStore.instance().repo, "")
    text = OmegaConf.load(str(conf / "config.yaml")).hydra.help
    print(
        _HELP_TEMPLATE.format(
            header=text.header,
            groups="\n".join(f"{g}: {', '.join(sorted(o))}" for g, o in sorted(groups.items())),
            config=OmegaConf.to_yaml(cfg),
            footer=text.footer,
        )
    )
    return True


def _hydra_main() -> None:
    hydra.main(config_path="pkg://attnzoo.conf", config_name="config", **_VERSION_BASE)(
        task_function
    )()


# Keys `--continue` sets itself, or that would make it another command.
_NOT_WITH_CONTINUE = ("hydra.run.dir", "hydra.sweep.dir", "train.resume", "-m", "--multirun")


def _continue_argument(argv: list[str]) -> tuple[Path | None, list[str]]:
    """`--continue FOLDER` (or `--continue=FOLDER`) and the other arguments; exits 2 for a
    folder that is missing, or arguments that cannot go with it."""
    for i, arg in enumerate(argv):
        if arg == CONTINUE or arg.startswith(f"{CONTINUE}="):
            if arg == CONTINUE:
                rest = argv[:i] + argv[i + 2 :]
                value = argv[i + 1] if i + 1 < len(argv) else ""
            else:
                rest, value = argv[:i] + argv[i + 1 :], arg.split("=", 1)[1]
            break
    else:
        return None, argv
    bad = [a for a in rest if a.lstrip("+~").split("=", 1)[0] in _NOT_WITH_CONTINUE]
    if not value or not Path(value).is_dir() or bad:
        why = (
            f"{' '.join(bad)} cannot go with {CONTINUE}: it continues the run in its folder as "
            "it was"
            if bad
            else f"{CONTINUE} {value or '(nothing)'}: no such folder"
        )
        print(
            f"attnzoo.train: configuration error: {why}; allowed: {CONTINUE} RUN_OR_SWEEP_FOLDER "
            "[key=value ...] (e.g. train.device=cpu, logger.mode=disabled, or a larger "
            "train.max_steps with train.extend=true)",
            file=sys.stderr,
        )
        sys.exit(EXIT_CONFIG)
    return Path(value), rest


def _hydra_quote(value: str) -> str:
    """`value` as a quoted string of Hydra's override grammar: a folder name with `=` and `,`
    (a sweep job's) is one value, not a sweep."""
    escaped = value.replace("'", "\\'").replace("${", "\\${")
    return f"'{escaped}'"
