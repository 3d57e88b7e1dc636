# Hydra configs for `python -m attnzoo.train`; a package so that they install inside the wheel.
