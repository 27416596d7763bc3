"""linattn_core: kernel-based linear attention, small and tested.

The same functions take numpy arrays or torch tensors (CPU or CUDA) and return the input's type,
dtype and device. Importing the package imports neither torch nor plotly.

>>> import numpy as np
>>> import linattn_core as la
>>> q, k, v = np.random.default_rng(0).standard_normal((3, 2, 16, 8))
>>> y = la.linear_attention(q, k, v, "elu+1", causal=True)
>>> bool(np.allclose(y, la.kernel_attention(q, k, v, "elu+1", causal=True)))
True
"""

from .attention import kernel_attention, softmax_attention
from .decay import DecayedState, decayed_kernel_attention, decayed_linear_attention
from .delta import DeltaRuleState, delta_rule_attention
from .feature_maps import (
    FEATURE_MAPS,
    CallableFeatureMap,
    CosFormer,
    EluPlusOne,
    FeatureMap,
    Identity,
    Performer,
    ReLU,
    ReLUPlusOne,
    Softplus,
    get_feature_map,
)
from .linear import METHODS, linear_attention
from .streaming import KVCache, LinearAttentionState

__version__ = "0.1.0"

__all__ = [
    "FEATURE_MAPS",
    "METHODS",
    "CallableFeatureMap",
    "CosFormer",
    "DecayedState",
    "DeltaRuleState",
    "EluPlusOne",
    "FeatureMap",
    "Identity",
    "KVCache",
    "LinearAttentionState",
    "Performer",
    "ReLU",
    "ReLUPlusOne",
    "Softplus",
    "__version__",
    "decayed_kernel_attention",
    "decayed_linear_attention",
    "delta_rule_attention",
    "get_feature_map",
    "kernel_attention",
    "linear_attention",
    "softmax_attention",
]
