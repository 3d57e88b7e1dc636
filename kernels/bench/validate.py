"""The kernel benchmark's validation: the formulations it times compute the ops it compares.

Before timing (and alone without a GPU), each attnzoo op is checked against each of its
formulations (its part's candidates) at a tiny fp32 shape, outputs and the gradients of every input, so that a
ratio the benchmark reports compares two computations of the same thing. A part with a float64
formula of its own (`Part.truth`: a recurrence one token at a time, a reference in float64) has
every candidate, the attnzoo op included, checked against that formula instead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from .cases import Shape, candidates, make_inputs, part, truth


@dataclass
class Check:
    part: str
    mode: str
    formulation: str
    impl: str
    err_out: float
    err_grad: float
    ok: bool
    against: str = "attnzoo"  # what the formulation was checked against


VALIDATION_SHAPE = Shape("tiny", 2, 2, 37, 16, False, elt=4)


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


def validate(parts: list[str], device: str, impl: str, window: int, tol: float) -> list[Check]:
    """Each attnzoo op against each of its formulations at a tiny fp32 shape: outputs and the
    gradients of every input for one random upstream gradient, at each causality the part takes
    (`Part.modes`). Where the part has a float64 truth (`Part.truth`), every
    candidate, the op included, is checked against it instead. The SDPA backend is left to
    PyTorch here: a backend changes the kernel, not the formula, and flash and cuDNN do not take
    fp32."""
    checks = []
    for name in parts:
        declared = part(name)
        for causal in declared.modes:
            s = Shape(**{**asdict(VALIDATION_SHAPE), "causal": causal})
            ran = "torch" if declared.auto_triton is None else impl  # what the attnzoo row ran
            cands = candidates(name, s, impl, window, device=device)
            runnable = [c for c in cands if not c.reference and not c.skip]
            inputs = make_inputs(name, s, device, torch.float32)
            exact = truth(name, s)
            if exact is None:  # the attnzoo op is the reference of its formulations
                against, ref_run, others, ref_inputs = "attnzoo", cands[0].run, runnable[1:], inputs
            else:  # every candidate against the float64 formula
                against, ref_run = exact
                others = runnable
                ref_inputs = tuple(t.detach().double().requires_grad_(True) for t in inputs)
            out = ref_run(*ref_inputs)
            grad = torch.randn_like(out)
            ref_grads = torch.autograd.grad(out, ref_inputs, grad)
            seen = set()
            for cand in others:
                label = cand.name.rsplit(" ", 1)[0] if cand.backend else cand.name
                if label in seen:  # one check per formula, not per backend
                    continue
                seen.add(label)
                xs = [t.detach().clone().requires_grad_(True) for t in inputs]
                got = cand.run(*xs)
                grads = torch.autograd.grad(got, xs, grad.to(got.dtype))
                err_out = _rel_err(got, out)
                err_grad = max(_rel_err(g, r) for g, r in zip(grads, ref_grads, strict=True))
                check = Check(
                    name,
                    "causal" if causal else "bidirectional",
                    label,
                    ran,
                    err_out,
                    err_grad,
                    err_out <= tol and err_grad <= tol,
                    against,
                )
                checks.append(check)
                what = (
                    f"attnzoo (impl={ran}) vs {label}"
                    if exact is None
                    else (f"{label}{f' (impl={ran})' if label == 'attnzoo' else ''} vs {against}")
                )
                print(
                    f"validate {name:10s} {check.mode:13s} {what}: "
                    f"out {err_out:.1e}, grads {err_grad:.1e} "
                    f"{'ok' if check.ok else f'MISMATCH (tolerance {tol:.0e})'}",
                    flush=True,
                )
    return checks
