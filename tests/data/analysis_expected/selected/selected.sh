#!/usr/bin/env bash
# fresh-seed runs at the selected values, then their summary
set -euo pipefail
python -m attnzoo.train -m mixer=scaled_dot train.lr=0.003 train.seed=0,1,2,3,4 hydra.sweep.dir=multirun/final/00
python -m attnzoo.train -m mixer=pooling train.lr=0.01 train.seed=0,1,2,3,4 hydra.sweep.dir=multirun/final/01
python -m attnzoo.train -m mixer=metric train.lr=0.003 train.seed=0,1,2,3,4 hydra.sweep.dir=multirun/final/02
python scripts/summarize.py multirun/final/*/ --out multirun/final-report --compare mixer
