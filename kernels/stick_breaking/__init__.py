"""stick_breaking_attention: causal attention whose weights break a stick, nearest key first
(Tan et al. 2024, arXiv 2410.17980).

- `ops.py`: the public op and its checks.
- `naive.py`: the weights in log space and the PyTorch path of the op; it needs torch only.

There is no Triton kernel of stick-breaking attention in attnzoo.
"""

from .ops import stick_breaking_attention

__all__ = ["stick_breaking_attention"]
