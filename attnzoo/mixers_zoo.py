"""Deprecated alias of the mixers' family modules, kept so that configs and checkpoints that name
a class here (`_target_: attnzoo.mixers_zoo.Favor`) keep loading. Import from `attnzoo.mixers`
(or its family modules: kernelized, nystrom, parameter_free, softmax, token_mlp) instead."""

import warnings

from attnzoo.mixers.kernelized import FEATURE_MAPS, Favor, LinearAttention, orthogonal_gaussian
from attnzoo.mixers.nystrom import Nystrom, iterative_pinv
from attnzoo.mixers.parameter_free import Fourier
from attnzoo.mixers.softmax import LocalAttention
from attnzoo.mixers.token_mlp import TokenMLP

__all__ = [
    "FEATURE_MAPS",
    "Favor",
    "Fourier",
    "LinearAttention",
    "LocalAttention",
    "Nystrom",
    "TokenMLP",
    "iterative_pinv",
    "orthogonal_gaussian",
]

warnings.warn(
    "attnzoo.mixers_zoo is deprecated: import the mixers from attnzoo.mixers",
    DeprecationWarning,
    stacklevel=2,
)
