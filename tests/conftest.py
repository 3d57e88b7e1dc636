"""Test set-up shared by every test file.

TRITON_INTERPRET must be set before triton is first imported: it makes the Triton kernels run on
CPU tensors in Triton's interpreter, which is how the kernels are checked without a GPU. It is
the default; the `cuda` tier runs the compiled kernels on a GPU instead:

    TRITON_INTERPRET=0 python -m pytest -m cuda

Tests marked `cuda` skip, with the reason, where there is no GPU or the interpreter is on. Tests
marked `slow` (the full ahead-of-time compile report, the soak, the studies) are not in the default
run (pyproject.toml's addopts); CI runs them after it with `python -m pytest -q -m slow`.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

INTERPRET = os.environ["TRITON_INTERPRET"] == "1"


# Tests parametrized over every mixer run retention and mamba2 in the slow tier: both run on the
# gated linear-attention op as gla does, which the default tier keeps (tests/test_recurrent_mixers.py
# checks all three against their papers' recurrences in the default tier).
SLOW_IN_REGISTRY_WIDE = {"retention", "mamba2"}


@pytest.hookimpl(tryfirst=True)  # before -m selects by marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
