"""The kernel benchmark's validation: the formulations it times compute the ops it compares.

Before timing (and alone without a GPU), each attnzoo op is checked against each of its
formulations in `cases` at a tiny fp32 shape, outputs and the gradients of every input, so that a
ratio the benchmark reports compares two computations of the same thing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from .cases import Shape, candidates, make_inputs


@dataclass
class Check:
    part: str
    mode: str
    formulation: str
    impl: str
    err_out: float
    err_grad: float
    ok: bool


VALIDATION_SHAPE = Shape("tiny", 2, 2, 37, 16, False, elt=4)


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


def validate(parts: list[str], device: str, impl: str, window: int, tol: float) -> list[Check]:
    """Each attnzoo op against each of its formulations at a tiny fp32 shape: outputs and the
    gradients of every input for one random upstream gradient, causal and bidirectional (pool:
    centred). The SDPA backend is left to PyTorch here: a backend changes the kernel, not the
    formula, and flash and cuDNN do not take fp32."""
    checks = []
    for part in parts:
        modes = (False,) if part == "pool" else (False, True)  # pool: centred only
        for causal in modes:
            s = Shape(**{**asdict(VALIDATION_SHAPE), "causal": causal})
            cands = candidates(part, s, impl, window)
            ours = cands[0]
            others = [c for c in cands[1:] if not c.reference and not c.skip]
            inputs = make_inputs(part, s, device, torch.float32)
            out = ours.run(*inputs)
            grad = torch.randn_like(out)
            ref_grads = torch.autograd.grad(out, inputs, grad)
            seen = set()
            for cand in others:
                label = cand.name.rsplit(" ", 1)[0] if cand.backend else cand.name
                if label in seen:  # one check per formula, not per backend
                    continue
                seen.add(label)
                xs = [t.detach().clone().requires_grad_(True) for t in inputs]
                got = cand.run(*xs)
                grads = torch.autograd.grad(got, xs, grad)
                err_out = _rel_err(got, out)
                err_grad = max(_rel_err(g, r) for g, r in zip(grads, ref_grads, strict=True))
                check = Check(
                    part,
                    "causal" if causal else "bidirectional",
                    label,
                    impl,
                    err_out,
                    err_grad,
                    err_out <= tol and err_grad <= tol,
                )
                checks.append(check)
                print(
                    f"validate {part:10s} {check.mode:13s} attnzoo (impl={impl}) vs {label}: "
                    f"out {err_out:.1e}, grads {err_grad:.1e} "
                    f"{'ok' if check.ok else f'MISMATCH (tolerance {tol:.0e})'}",
                    flush=True,
                )
    return checks
