"""`python -m attnzoo.train key=value ...`: see `attnzoo.train.cli`.

The task function Hydra runs lives in `attnzoo.train.cli`, not here: launchers that ship jobs to
other processes (joblib, submitit) pickle it, by reference only when it has an importable name.
"""

from attnzoo.train.cli import main

main()
