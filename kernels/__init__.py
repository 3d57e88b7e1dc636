"""Token-mixing ops on Triton kernels, with PyTorch references beside them.

Installed as `attnzoo.kernels`; imports nothing from the rest of attnzoo.

Imported under any other name it stays empty: with a checkout's root on sys.path (`python -m
pytest`, `python -m attnzoo.train` run there), `import kernels` finds this folder — Hugging Face
transformers does exactly that when it probes for the unrelated PyPI `kernels` package — and
loading the modules a second time would register the `torch.ops.attnzoo` operators twice.
"""

if __name__ == "attnzoo.kernels":
    from .ops import (
        delta_rule,
        gated_linear_attention,
        linear_attention,
        metric_attention,
        pool_mix,
        quadratic_attention,
        scaled_dot_attention,
        sigmoid_attention,
    )

    # Benchmark mode (kernels/dispatch.py), off by default as torch.backends.cudnn.benchmark is:
    # on CUDA, impl="auto" then times the Triton kernel against PyTorch on the first call of each
    # new key and keeps the faster, instead of following the committed table alone.
    benchmark_mode = False

    __all__ = [
        "benchmark_mode",
        "delta_rule",
        "gated_linear_attention",
        "linear_attention",
        "metric_attention",
        "pool_mix",
        "quadratic_attention",
        "scaled_dot_attention",
        "sigmoid_attention",
    ]
