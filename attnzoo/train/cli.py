"""The command line: `python -m attnzoo.train key=value ...` (Hydra), and `compose`, the same
configuration from Python.

Exit codes of a single run: 0 completed, 1 failed (an exception; see summary.json), 2 bad
configuration (nothing was trained), 3 diverged (non-finite loss or gradient with
`train.on_nonfinite=stop`), 75 pre-empted (SIGTERM/SIGUSR1: a checkpoint was written at the next
step boundary; run again with `train.resume=true`). In a multirun a failed job is Hydra's to
record, and the sweep goes on. A mixer that cannot be built as configured (its class does not
import, or does not take an option given) is found before Hydra makes a single run's folder
(`CheckMixer`): exit 2, and nothing is left behind.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from attnzoo.checkpoint import CheckpointError
from attnzoo.config import ConfigError, check_mixer, register_configs
from attnzoo.train.build import hydra_runtime, run
from attnzoo.train.trainer import EXIT_CODES, EXIT_CONFIG, EXIT_FAILED, EXIT_OK

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


class CheckMixer(Callback):
    """Hydra callback (conf/config.yaml's `hydra.callbacks`): before a single run's folder is
    made, the mixer's class must import and take the options given (`check_mixer`), else the
    command exits 2 naming the key. A job of a multirun is checked by `run` and fails as a job."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_mixer(config.mixer)
        except ConfigError as err:
            print(f"attnzoo.train: configuration error: {err}", file=sys.stderr)
            sys.exit(EXIT_CONFIG)


def task_function(cfg: DictConfig) -> dict[str, Any] | None:
    """One Hydra job. A module-level function (not the decorated one), so that launchers that
    ship jobs to other processes (joblib, submitit) pickle it by reference."""
    global _exit_code
    hc = hydra_runtime()
    multirun = hc is not None and str(hc.mode).endswith("MULTIRUN")
    try:
        summary = run(cfg)
    except (ConfigError, CheckpointError) as err:
        if multirun:
            raise  # Hydra records the failed job and goes on with the others
        print(f"attnzoo.train: configuration error: {err}", file=sys.stderr)
        _exit_code = EXIT_CONFIG
        return None
    _exit_code = EXIT_CODES.get(summary["status"], EXIT_FAILED)
    return summary


def main() -> None:
    """`python -m attnzoo.train key=value ...`; see the module docstring for exit codes."""
    hydra.main(config_path="pkg://attnzoo.conf", config_name="config", **_VERSION_BASE)(
        task_function
    )()
    sys.exit(_exit_code)
