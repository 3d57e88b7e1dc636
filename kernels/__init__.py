"""Token-mixing ops on Triton kernels, with PyTorch references beside them.

Installed as `attnzoo.kernels`; imports nothing from the rest of attnzoo.
"""

from .ops import metric_attention, pool_mix, quadratic_attention, scaled_dot_attention

__all__ = ["metric_attention", "pool_mix", "quadratic_attention", "scaled_dot_attention"]
