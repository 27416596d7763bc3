"""Exercises of softmax.md: softmax_attention_mine and score_matrix_bytes.

Their typical wrong answers, each failing with the message that names the mistake, and their
references held to the library. What holds for every exercise (adversarial answers, the watch for
library calls, graded mode) is in test_exercises.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from _exercises import SOL, _softmax, diagnosed, sm_unstable, sw

from linattn_core import (
    softmax_attention,
)


def sm_no_scale(q, k, v):
    return _softmax(q @ sw(k)) @ v


def sm_dot_T(q, k, v):
    return _softmax(q @ k.T / np.sqrt(q.shape[-1])) @ v

def sm_einsum_2d(q, k, v):  # works without batch dims only, no exception with them
    s = np.einsum("...id,...jd->ij", q, k) / np.sqrt(q.shape[-1])
    return _softmax(s) @ v

def sm_global_max(q, k, v):
    s = q @ sw(k) / np.sqrt(q.shape[-1])
    w = np.exp(s - s.max())
    return w / w.sum(-1, keepdims=True) @ v

def sm_whole_matrix(q, k, v):
    s = q @ sw(k) / np.sqrt(q.shape[-1])
    w = np.exp(s - s.max())
    return w / w.sum() @ v

def sm_wrong_axis(q, k, v):
    return _softmax(q @ sw(k) / np.sqrt(q.shape[-1]), axis=-2) @ v

def sm_dv_scale(q, k, v):
    return _softmax(q @ sw(k) / np.sqrt(v.shape[-1])) @ v

def sm_weights(q, k, v):
    return _softmax(q @ sw(k) / np.sqrt(q.shape[-1]))

def sm_float32(q, k, v):
    return SOL["softmax_attention_mine"](q, k, v).astype(np.float32)

def smb_no_square(N, batch_heads, itemsize):
    return N * batch_heads * itemsize

def smb_no_heads(N, batch_heads, itemsize):
    return N * N * itemsize

def smb_float(N, batch_heads, itemsize):
    return N * N * batch_heads * itemsize / 1

def smb_int32(N, batch_heads, itemsize):
    return int(np.int32(N) * np.int32(N) * np.int32(batch_heads) * np.int32(itemsize))

def smb_mib(N, batch_heads, itemsize):
    return N * N * batch_heads * itemsize / 2**20

def sm_no_keepdims(q, k, v):
    s = q @ sw(k) / np.sqrt(q.shape[-1])
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1) @ v

def sm_fixed_two(q, k, v):  # sqrt(4), right only at the examples' d = 4
    return _softmax(q @ sw(k) / 2.0) @ v

def sm_squeeze(q, k, v):
    return SOL["softmax_attention_mine"](q, k, v).squeeze()

def sm_square_only(q, k, v):  # assumes N_q == N_k
    n = q.shape[-2]
    return SOL["softmax_attention_mine"](q, k[..., :n, :], v[..., :n, :])

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_score_matrix_bytes_matches_stored_weights(dtype):
    q, k, v = np.random.default_rng(6).standard_normal((3, 2, 3, 7, 4)).astype(dtype)
    _, weights = softmax_attention(q, k, v, return_weights=True)
    assert SOL["score_matrix_bytes"](7, 6, np.dtype(dtype).itemsize) == weights.nbytes


WRONG = [
    ("softmax_attention_mine", sm_no_scale, "forgot the 1/sqrt(d) scale"),
    ("softmax_attention_mine", sm_unstable, "not numerically stable"),
    ("softmax_attention_mine", sm_dot_T, "works without batch dimensions"),
    ("softmax_attention_mine", sm_einsum_2d, "works without batch dimensions"),
    ("softmax_attention_mine", sm_wrong_axis, "normalized over the wrong axis"),
    ("softmax_attention_mine", sm_global_max, "maximum of the whole score array"),
    ("softmax_attention_mine", sm_whole_matrix, "normalized over the whole score matrix"),
    ("softmax_attention_mine", sm_dv_scale, "1/sqrt(d_v)"),
    ("softmax_attention_mine", sm_weights, "returned the attention weights"),
    ("softmax_attention_mine", sm_float32, "that is float32 rounding"),
    ("softmax_attention_mine", sm_no_keepdims, "without keepdims=True"),
    ("softmax_attention_mine", sm_fixed_two, "fixed 2"),
    ("softmax_attention_mine", sm_squeeze, "expected (1, 3), got (3,)"),
    ("softmax_attention_mine", sm_square_only, "Input #5 of 8 (cross-attention"),
    ("score_matrix_bytes", smb_no_square, "N**2"),
    ("score_matrix_bytes", smb_no_heads, "multiply by batch_heads"),
    ("score_matrix_bytes", smb_float, "but a float"),
    ("score_matrix_bytes", smb_int32, "integer overflow"),
    ("score_matrix_bytes", smb_mib, "you returned MiB"),
]


@pytest.mark.parametrize(("name", "fn", "message"), WRONG,
                         ids=[f"{n}-{f.__name__}-{i}" for i, (n, f, _) in enumerate(WRONG)])
def test_typical_mistake_is_diagnosed(name, fn, message, capsys):
    diagnosed(name, fn, message, capsys)
