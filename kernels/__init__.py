"""Token-mixing ops on Triton kernels, with PyTorch references beside them.

One folder per op family (attention, pooling, linear, gated, delta, softpick, stick_breaking), each holding everything
about its ops: `ops.py` (the public function, its `torch.library` registration and its checks),
`naive.py` (the PyTorch reference), and the Triton kernels with their launcher and AOT specs.
Beside them only plumbing that names no op: `_op.py` (registration helpers, the dtype policy,
the choice of implementation), `_checks.py`, `_host.py`, `_aot.py`, and the benchmark harness
in `bench/`. docs/contributing.md says what a new family adds.

Installed as `attnzoo.kernels`; imports nothing from the rest of attnzoo.

Imported under any other name it stays empty: with a checkout's root on sys.path (`python -m
pytest`, `python -m attnzoo.train` run there), `import kernels` finds this folder — Hugging Face
transformers does exactly that when it probes for the unrelated PyPI `kernels` package — and
loading the modules a second time would register the `torch.ops.attnzoo` operators twice.
"""

if __name__ == "attnzoo.kernels":
    from .attention import (
        metric_attention,
        quadratic_attention,
        scaled_dot_attention,
        sigmoid_attention,
    )
    from .delta import delta_rule
    from .gated import gated_linear_attention
    from .linear import linear_attention
    from .pooling import pool_mix
    from .softpick import softpick_attention
    from .stick_breaking import stick_breaking_attention

    __all__ = [
        "delta_rule",
        "gated_linear_attention",
        "linear_attention",
        "metric_attention",
        "pool_mix",
        "quadratic_attention",
        "scaled_dot_attention",
        "sigmoid_attention",
        "softpick_attention",
        "stick_breaking_attention",
    ]
