"""attnzoo: five token mixers behind one MetaFormer block, Triton kernels, and rank decay."""

from attnzoo.mixers import MIXERS, build_mixer, register
from attnzoo.model import Block, Model, ModelConfig
from attnzoo.rank import RankProfile, composite_norm, rank_profile, relative_residual

__all__ = [
    "MIXERS",
    "Block",
    "Model",
    "ModelConfig",
    "RankProfile",
    "build_mixer",
    "composite_norm",
    "rank_profile",
    "register",
    "relative_residual",
]
