"""Host-side arithmetic for the launchers, on every call's path.

`triton.cdiv` and `triton.next_power_of_2` are constexpr functions (made to be called inside
kernels too): from the host each call goes through a wrapper that costs microseconds (about
10 µs on the CI machine under load), three orders of magnitude more than the arithmetic, and the
launchers call them several times per op (the grid lambdas once per launch). These are the same
functions as plain Python.
"""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """⌈a / b⌉ for non-negative a and positive b."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two ≥ n (0 for n ≤ 0, as triton.next_power_of_2 gives for 0)."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()
