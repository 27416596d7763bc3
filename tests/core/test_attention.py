"""softmax_attention and the quadratic kernel_attention against literal float64 references.

The references below are written straight from the equations (every score, a mask, a row
normalization), in float64 numpy; everything in the package is checked against them.
"""

from __future__ import annotations

import numpy as np
import pytest
from _tolerances import assert_close, to_numpy

from linattn_core import kernel_attention, softmax_attention

# relu, cosformer and identity features can give denominators <= 0; the library warns (tested in
# test_core_errors.py). Here those rows are compared like any other, so the warning is only noise.
pytestmark = pytest.mark.filterwarnings("ignore:.*denominator:RuntimeWarning")


# --- literal references (float64 numpy) -------------------------------------------------------------
def softmax_reference(q, k, v, *, causal=False, scale=None):
    # q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v) -> out (..., N_q, d_v), w (..., N_q, N_k)
    q, k, v = to_numpy(q), to_numpy(k), to_numpy(v)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = scale * (q @ np.swapaxes(k, -1, -2))
    if causal:
        n_q, n_k = scores.shape[-2:]
        future = np.arange(n_k)[None, :] > np.arange(n_q)[:, None]
        scores = np.where(future, -np.inf, scores)
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)
    return w @ v, w


def kernel_reference(phi_q, phi_k, v, *, causal=False, eps=1e-6):
    # phi_q: (..., N_q, d_phi), phi_k: (..., N_k, d_phi), v: (..., N_k, d_v)
    # A_ij = phi(q_i) . phi(k_j); y_i = sum_j A_ij v_j / max(sum_j A_ij, eps)
    phi_q, phi_k, v = to_numpy(phi_q), to_numpy(phi_k), to_numpy(v)
    scores = phi_q @ np.swapaxes(phi_k, -1, -2)
    if causal:
        scores = np.tril(scores)
    den = np.maximum(scores.sum(axis=-1, keepdims=True), eps)
    return (scores @ v) / den, scores / den


LENGTHS = [1, 63, 64, 65, 200]


# --- softmax_attention ------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n", LENGTHS, ids=[f"T{n}" for n in LENGTHS])
def test_softmax_matches_literal_reference(mk, batch, n, causal):
    q, k, v = mk.qkv(batch, n, d=8, d_v=5, seed=n)
    out = softmax_attention(q, k, v, causal=causal)
    assert_close(out, softmax_reference(q, k, v, causal=causal)[0], what="softmax_attention")


def test_softmax_scale_argument(mk):
    q, k, v = mk.qkv((2,), 17, d=4, d_v=3, seed=1)
    out = softmax_attention(q, k, v, scale=0.3)
    assert_close(out, softmax_reference(q, k, v, scale=0.3)[0], what="softmax_attention(scale=0.3)")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_softmax_return_weights(mk, batch, causal):
    q, k, v = mk.qkv(batch, 12, d=8, d_v=5, seed=3)
    out, w = softmax_attention(q, k, v, causal=causal, return_weights=True)
    assert w.shape == (*batch, 12, 12)
    ref_out, ref_w = softmax_reference(q, k, v, causal=causal)
    assert_close(w, ref_w, what="softmax weights")
    assert_close(out, ref_out, what="softmax output with weights")
    assert_close(w.sum(-1), np.ones((*batch, 12)), what="softmax weight rows sum to 1")
    if causal:
        assert (np.triu(to_numpy(w), 1) == 0).all(), "causal softmax puts weight on the future"


def test_softmax_cross_attention(mk, batch):
    q, k, v = mk.qkv(batch, n_q=7, n_k=19, d=8, d_v=5, seed=4)
    out, w = softmax_attention(q, k, v, return_weights=True)
    assert out.shape == (*batch, 7, 5) and w.shape == (*batch, 7, 19)
    assert_close(out, softmax_reference(q, k, v)[0], what="softmax cross-attention")


def test_softmax_is_max_shifted(mk):
    # Logits of order 1e4 overflow exp() unless the row maximum is subtracted first.
    q, k, v = mk.qkv((2,), 16, d=8, d_v=5, seed=5)
    out = softmax_attention(q * 1e3, k * 1e3, v)
    assert np.isfinite(to_numpy(out)).all()
    assert_close(out, softmax_reference(q * 1e3, k * 1e3, v)[0], what="softmax with huge logits")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_softmax_torch_matches_numpy_and_sdpa(mk, device, causal):
    import torch

    q, k, v = mk.qkv((2, 3), 33, d=8, d_v=5, seed=6)
    tq, tk, tv = (torch.from_numpy(x).to(device) for x in (q, k, v))
    out = softmax_attention(tq, tk, tv, causal=causal)
    assert isinstance(out, torch.Tensor) and out.device.type == device and out.dtype == torch.float64
    assert_close(out, softmax_attention(q, k, v, causal=causal), what="torch vs numpy")
    sdpa = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    assert_close(out, sdpa, what="torch vs scaled_dot_product_attention")


def test_causal_softmax_first_output_is_first_value(mk, batch):
    q, k, v = mk.qkv(batch, 9, seed=7)
    assert_close(softmax_attention(q, k, v, causal=True)[..., 0, :], v[..., 0, :], what="y_0 == v_0")


# --- kernel_attention --------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n", LENGTHS, ids=[f"T{n}" for n in LENGTHS])
def test_kernel_attention_matches_literal_reference(mk, map_name, n, causal):
    q, k, v = mk.qkv((2,), n, d=8, d_v=5, seed=10 + n, shift=mk.shift_for(map_name))
    phi = mk.feature_map(map_name, 8)
    out, w = kernel_attention(q, k, v, phi, causal=causal, return_weights=True)
    ref_out, ref_w = kernel_reference(phi(q), phi(k), v, causal=causal)
    assert_close(out, ref_out, what=f"kernel_attention[{map_name}]")
    assert_close(w, ref_w, what=f"kernel_attention[{map_name}] weights")


def test_kernel_attention_double_loop(mk):
    # The most literal reading of the definition, one (i, j) pair at a time, for the default map.
    q, k, v = mk.qkv((), 6, d=3, d_v=2, seed=11)

    def elu1(x):
        return x + 1 if x > 0 else np.exp(x)

    for causal in (False, True):
        expected = np.zeros((6, 2))
        for i in range(6):
            num, den = np.zeros(2), 0.0
            for j in range(i + 1 if causal else 6):
                a = sum(elu1(q[i, c]) * elu1(k[j, c]) for c in range(3))
                num, den = num + a * v[j], den + a
            expected[i] = num / max(den, 1e-6)
        assert_close(kernel_attention(q, k, v, causal=causal), expected, what=f"causal={causal}")


def test_kernel_attention_accepts_names_and_callables(mk):
    q, k, v = mk.qkv((2,), 20, seed=12)
    by_name = kernel_attention(q, k, v, "softplus")
    by_object = kernel_attention(q, k, v, mk.feature_map("softplus", 8))

    def custom(x):  # any callable (..., N, d) -> (..., N, d_phi), here d_phi = 2d
        return np.concatenate([x * x, np.exp(-x * x)], axis=-1)

    assert_close(by_name, by_object, what="name vs get_feature_map object")
    assert_close(kernel_attention(q, k, v, custom), kernel_reference(custom(q), custom(k), v)[0],
                 what="custom callable feature map")


def test_kernel_attention_default_map_is_elu_plus_one(mk):
    q, k, v = mk.qkv((), 10, seed=13)
    assert_close(kernel_attention(q, k, v), kernel_attention(q, k, v, "elu+1"), what="default map")


@pytest.mark.parametrize("eps", [1e-6, 1e-2, 10.0])
def test_kernel_attention_eps_is_a_clamp(mk, eps):
    # max(den, eps), not den + eps: with eps = 10 some rows are clamped and some are not.
    q, k, v = mk.qkv((), 16, d=2, d_v=3, seed=14)
    phi = mk.feature_map("relu", 2)
    out = kernel_attention(q, k, v, phi, eps=eps)
    assert_close(out, kernel_reference(phi(q), phi(k), v, eps=eps)[0], what=f"eps={eps}")


def test_kernel_attention_cross_attention(mk, map_name, batch):
    q, k, v = mk.qkv(batch, n_q=7, n_k=19, d=8, d_v=5, seed=15, shift=mk.shift_for(map_name))
    # cosformer: an explicit max_len, as the default M of a cross-attention call is a design choice
    phi = mk.feature_map(map_name, 8, max_len=19)
    out = kernel_attention(q, k, v, phi)
    assert out.shape == (*batch, 7, 5)
    assert_close(out, kernel_reference(phi(q), phi(k), v)[0], what=f"cross-attention[{map_name}]")


@pytest.mark.parametrize(("n_q", "n_k"), [(5, 11), (11, 5)], ids=["Nq<Nk", "Nq>Nk"])
def test_cosformer_without_max_len_uses_the_longer_side(mk, n_q, n_k):
    # M = max(N_q, N_k) of the call: scores relu(q_i) . relu(k_j) cos(pi (i - j) / 2M)
    from linattn_core import get_feature_map, linear_attention

    q, k, v = mk.qkv((2,), n_q, n_k, d=6, d_v=3, seed=21)
    M, i, j = max(n_q, n_k), np.arange(n_q)[:, None], np.arange(n_k)[None, :]
    A = (np.maximum(q, 0) @ np.swapaxes(np.maximum(k, 0), -1, -2)) * np.cos(np.pi * (i - j) / (2 * M))
    expected = (A @ v) / np.maximum(A.sum(-1), 1e-6)[..., None]
    phi = get_feature_map("cosformer")
    for fn in (kernel_attention, linear_attention):
        assert_close(fn(q, k, v, phi), expected, what=f"{fn.__name__}, cosformer M = max(N_q, N_k)")
    assert_close(linear_attention(q, k, v, "cosformer"), expected, what="by name")


def test_causal_kernel_attention_first_output_is_first_value(mk, map_name, batch):
    q, k, v = mk.qkv(batch, 9, seed=16, shift=1.0)  # shift: relu features overlap at t = 0
    out = kernel_attention(q, k, v, mk.feature_map(map_name, 8), causal=True)
    assert_close(out[..., 0, :], v[..., 0, :], what=f"y_0 == v_0 [{map_name}]")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_kernel_attention_torch_matches_numpy(mk, map_name, device, causal):
    import torch

    q, k, v = mk.qkv((2, 3), 33, d=8, d_v=5, seed=17, shift=mk.shift_for(map_name))
    phi = mk.feature_map(map_name, 8)
    out = kernel_attention(*(torch.from_numpy(x).to(device) for x in (q, k, v)), phi, causal=causal)
    assert isinstance(out, torch.Tensor) and out.device.type == device and out.dtype == torch.float64
    assert_close(out, kernel_attention(q, k, v, phi, causal=causal), what=f"torch vs numpy [{map_name}]")


# --- low precision: computed with float32 accumulation, returned in the input dtype ----------------
LOW_PRECISION = [("numpy", "float32"), ("numpy", "float16"), ("torch", "float32"), ("torch", "float16"),
                 ("torch", "bfloat16")]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("backend", "dtype"), LOW_PRECISION, ids=[f"{b}-{t}" for b, t in LOW_PRECISION])
def test_softmax_low_precision(mk, backend, dtype, device, causal):
    if backend == "numpy" and device != "cpu":
        pytest.skip("numpy runs on the CPU only")
    q, k, v = mk.qkv((2,), 65, d=8, d_v=5, seed=18, backend=backend, dtype=dtype, device=device)
    out = softmax_attention(q, k, v, causal=causal)
    assert out.dtype == q.dtype and type(out) is type(q)
    assert_close(out, softmax_reference(q, k, v, causal=causal)[0], what=f"softmax {backend} {dtype}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("backend", "dtype"), LOW_PRECISION, ids=[f"{b}-{t}" for b, t in LOW_PRECISION])
def test_kernel_attention_low_precision(mk, backend, dtype, device, causal):
    if backend == "numpy" and device != "cpu":
        pytest.skip("numpy runs on the CPU only")
    q, k, v = mk.qkv((2,), 65, d=8, d_v=5, seed=19, backend=backend, dtype=dtype, device=device)
    out = kernel_attention(q, k, v, "elu+1", causal=causal)
    assert out.dtype == q.dtype and type(out) is type(q)
    phi = mk.feature_map("elu+1", 8)
    q64, k64 = to_numpy(q), to_numpy(k)  # the same rounded inputs, in float64
    expected = kernel_reference(phi(q64), phi(k64), to_numpy(v), causal=causal)[0]
    assert_close(out, expected, dtype=dtype, what=f"kernel_attention {backend} {dtype}")


# --- the numpy path stays light -------------------------------------------------------------------
def test_numpy_path_imports_neither_torch_nor_plotly():
    # CONTRIBUTING: torch is imported only when a torch tensor arrives (a cold import costs seconds
    # per notebook), and plotly only by the figure modules. A fresh interpreter shows what is imported.
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "import linattn_core as L\n"
        "q, k, v = np.random.default_rng(0).standard_normal((3, 2, 9, 4))\n"
        "L.softmax_attention(q, k, v, causal=True)\n"
        "L.kernel_attention(q, k, v, 'performer', causal=True)\n"
        "L.linear_attention(q, k, v, 'cosformer', causal=True, method='chunked', chunk_size=4)\n"
        "s = L.LinearAttentionState(4, 4); s.step(q[0, 0], k[0, 0], v[0, 0])\n"
        "from linattn_core.delta import delta_rule_attention; delta_rule_attention(q, k, v, 0.5)\n"
        "print(sorted(m for m in ('torch', 'plotly') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"imported on the numpy path: {result.stdout.strip()}"
