"""Test set-up shared by every test file.

TRITON_INTERPRET must be set before triton is first imported: it makes the Triton kernels run on
CPU tensors in Triton's interpreter, which is how the kernels are checked without a GPU. It is
the default; the `cuda` tier runs the compiled kernels on a GPU instead:

    TRITON_INTERPRET=0 python -m pytest -m cuda

Tests marked `cuda` skip, with the reason, where there is no GPU or the interpreter is on. Tests
marked `slow` (the soak, the studies, the ahead-of-time compile of each kernel's switch sets and
largest tiles, the command-line runs in subprocesses that an in-process test already covers) are
not in the default run (pyproject.toml's addopts); CI runs them after it with `python -m pytest
-q -m slow`. The compile report of every kernel config is marked `aot` and left to `-m aot`. A
grid marked `@pytest.mark.sample(n)` runs `n` of its cases by default and the rest in the slow
tier.
"""

import dataclasses
import logging
import os
import runpy
import sys
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

INTERPRET = os.environ["TRITON_INTERPRET"] == "1"


# Tests parametrized over every mixer run retention and mamba2 in the slow tier: both run on the
# gated linear-attention op as gla does, which the default tier keeps (tests/test_recurrent_mixers.py
# checks all three against their papers' recurrences in the default tier).
SLOW_IN_REGISTRY_WIDE = {"retention", "mamba2"}


def _values(item: pytest.Item) -> set[tuple[str, str]]:
    """(parameter, value) pairs of a parametrized test case; a dataclass case counts per field."""
    pairs = set()
    for name, value in getattr(getattr(item, "callspec", None), "params", {}).items():
        if dataclasses.is_dataclass(value):
            pairs |= {(f"{name}.{k}", repr(v)) for k, v in dataclasses.asdict(value).items()}
        else:
            pairs.add((name, repr(value)))
    return pairs


def sampled(cases: list[pytest.Item], n: int) -> list[pytest.Item]:
    """`n` of a grid's cases, each chosen to add the most (parameter, value) pairs not yet
    covered (the earliest on a tie), starting over once every pair is covered: so every value of
    every parameter is run when `n` allows it, and the cases spread over the grid when it does not
    cover them all."""
    chosen: list[pytest.Item] = []
    rest = list(cases)
    uncovered: set[tuple[str, str]] = set()
    while rest and len(chosen) < n:
        if not uncovered:
            uncovered = set().union(*(_values(c) for c in rest))
        best = max(rest, key=lambda c: len(_values(c) & uncovered))
        chosen.append(best)
        rest.remove(best)
        uncovered -= _values(best)
    return chosen


def _mark_unsampled_cases_slow(items: list[pytest.Item]) -> None:
    """`@pytest.mark.sample(n)` on a parametrized test: the default tier runs `n` of its cases
    (`sampled`), the slow tier the others, so both tiers together run the whole grid."""
    grids: dict[tuple, list[pytest.Item]] = defaultdict(list)
    for item in items:
        if item.get_closest_marker("sample") is not None:
            grids[(item.path, getattr(item, "originalname", item.name))].append(item)
    for cases in grids.values():
        keep = sampled(cases, cases[0].get_closest_marker("sample").args[0])
        for item in cases:
            if item not in keep:
                item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)  # before -m selects by marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _mark_unsampled_cases_slow(items)
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        named = {v for v in params.values() if isinstance(v, str)}
        if item.path.name != "test_recurrent_mixers.py" and named & SLOW_IN_REGISTRY_WIDE:
            item.add_marker(pytest.mark.slow)
    if torch.cuda.is_available() and not INTERPRET:
        return
    reason = (
        "needs a CUDA GPU"
        if not torch.cuda.is_available()
        else "runs the compiled kernels: TRITON_INTERPRET=0 python -m pytest -m cuda"
    )
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _root_logging():
    """Puts the root logger back after each test: a test that runs the trainer in this process
    leaves Hydra's job logging on it (a file handler in the run folder, which a refusal then
    deletes), and a later test's library logging at INFO (scipy's optimiser) would fail on it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


@pytest.fixture
def run_script(monkeypatch, capsys):
    """Runs a script of scripts/ in this process as `python SCRIPT ARGS` would from the project
    root, for the refusals and dry runs that end before any work: (exit status, stdout,
    stderr)."""
    root = Path(__file__).resolve().parents[1]

    def run(script: Path, *args: str) -> tuple[int, str, str]:
        monkeypatch.chdir(root)
        monkeypatch.setattr(sys, "argv", [str(script), *args])
        monkeypatch.syspath_prepend(str(script.parent))
        capsys.readouterr()
        code = 0
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as ended:
            code = ended.code
        out, err = capsys.readouterr()
        return code, out, err

    return run
