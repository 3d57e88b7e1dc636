"""Test set-up shared by every test file.

TRITON_INTERPRET must be set before triton is first imported: it makes the Triton kernels run on
CPU tensors in Triton's interpreter, which is how the kernels are checked without a GPU.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
