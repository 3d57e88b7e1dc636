"""softpick_attention: attention with softpick's rectified softmax in place of softmax (Zuhri et
al. 2025, arXiv 2504.20966), whose rows sum to at most 1.

- `ops.py`: the public op and its checks.
- `naive.py`: the PyTorch reference, which is also the op's path; it needs torch only.

There is no Triton kernel of softpick in attnzoo.
"""

from .ops import softpick_attention

__all__ = ["softpick_attention"]
