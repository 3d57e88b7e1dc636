"""Host-side helpers of the Triton launchers: arithmetic on every call's path, and the
interpreter switch.

`triton.cdiv` and `triton.next_power_of_2` are constexpr functions (made to be called inside
kernels too): from the host each call goes through a wrapper that costs microseconds (about
10 µs on the CI machine under load), three orders of magnitude more than the arithmetic, and the
launchers call them several times per op (the grid lambdas once per launch). These are the same
functions as plain Python.
"""

from __future__ import annotations

import os
import re

# Read once: the Triton interpreter is chosen before triton is imported, never per call.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def cdiv(a: int, b: int) -> int:
    """⌈a / b⌉ for non-negative a and positive b."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two ≥ n (0 for n ≤ 0, as triton.next_power_of_2 gives for 0)."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def _major_minor(version: str) -> tuple[int, int]:
    """(3, 6) from "3.6.0", "3.6.0+git1234" or "3.6rc1": the leading digits of the first two fields."""
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


def check_interpreter(triton_version: str, numpy_version: str) -> None:
    """Refuse, with the fix, the one pairing under which Triton's interpreter cannot run these
    kernels: before Triton 3.7 it turns a loop bound (a one-element array) into an int with
    `int()`, which numpy 2.4 refuses, so every loop over key tiles fails with "only
    0-dimensional arrays can be converted to Python scalars". Compiled kernels are unaffected."""
    if _major_minor(triton_version) < (3, 7) and _major_minor(numpy_version) >= (2, 4):
        raise ImportError(
            f"TRITON_INTERPRET=1 with triton {triton_version} needs numpy < 2.4 (numpy "
            f"{numpy_version} is installed): pip install 'numpy<2.4', or triton >= 3.7"
        )
