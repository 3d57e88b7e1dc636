"""Benchmarks and checks that need the whole of attnzoo (model, trainer, tasks), behind the
commands in scripts/: the kernel benchmark, which needs the kernels alone, is
`attnzoo.kernels.bench`.

- `train`: the training benchmark on the real corpora, every mixer against a plain GPT
  (`scripts/bench_train.py`);
- `plain_gpt`: that plain PyTorch GPT, the reference outside attnzoo's model;
- `gpu_check`: everything a GPU can tell about attnzoo, stage by stage, each in a subprocess
  (`scripts/gpu_check.py`), and `gpu_report`: its report.
"""
