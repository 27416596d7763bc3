"""Performer (FAVOR+) random features: the statistics the book relies on, checked with seeded draws.

Every statistical assertion below uses a fixed list of seeds, so it is deterministic; its threshold
comes from the standard error of the estimate, not from a guess.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _tolerances import assert_close, to_numpy

from linattn_core import get_feature_map, linear_attention, softmax_attention

SEEDS = range(300)


def performer(d, m, seed=0, **options):
    return get_feature_map("performer", d=d, num_features=m, seed=seed, **options)


def kernel_estimates(q, k, m, seeds, **options):
    """``phi(q) phi(k)^T`` for each seed: (len(seeds), N_q, N_k)."""
    d = q.shape[-1]
    out = []
    for s in seeds:
        phi = performer(d, m, s, stabilize=False, **options)
        out.append(to_numpy(phi(q)) @ to_numpy(phi(k)).T)
    return np.stack(out)


# --- unbiased: E[phi(q) . phi(k)] = exp(q . k / sqrt(d)) -------------------------------------------------
@pytest.mark.parametrize("orthogonal", [True, False], ids=["orthogonal", "iid"])
def test_unstabilised_features_estimate_the_softmax_kernel_without_bias(orthogonal):
    d, m = 4, 16
    rng = np.random.default_rng(0)
    q, k = 0.7 * rng.standard_normal((2, 5, d))
    exact = np.exp(q @ k.T / np.sqrt(d))  # (5, 5)
    est = kernel_estimates(q, k, m, SEEDS, orthogonal=orthogonal)
    mean = est.mean(0)
    stderr = est.std(0, ddof=1) / np.sqrt(len(SEEDS))
    # the test has power: the standard error is a few percent of the value
    assert (stderr < 0.1 * exact).all()
    # 25 two-sided comparisons at 4.5 standard errors: a false alarm has probability < 2e-4
    z = np.abs(mean - exact) / stderr
    assert (z < 4.5).all(), f"biased estimate: |mean - exact| / stderr up to {z.max():.1f}"


# --- the attention error shrinks as m grows --------------------------------------------------------------
def test_attention_error_against_softmax_shrinks_with_m():
    n, d = 32, 8
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((3, 2, n, d))
    q, k = 0.5 * q, 0.5 * k
    reference = softmax_attention(q, k, v)
    ms = [16, 64, 256, 1024]
    errors = []
    for m in ms:
        rms = [np.sqrt(np.mean((to_numpy(linear_attention(q, k, v, performer(d, m, s))) - reference) ** 2))
               for s in range(12)]
        errors.append(np.mean(rms))
    assert all(a > b for a, b in itertools.pairwise(errors)), f"errors by m={ms}: {errors}"
    # Monte Carlo: error ~ m^-1/2, so the log-log slope is near -0.5 (8x less error from 16 to 1024)
    slope = np.polyfit(np.log(ms), np.log(errors), 1)[0]
    assert -0.8 < slope < -0.3, f"log-log slope {slope:.2f} of the error vs m (expected about -0.5)"


# --- orthogonal features beat i.i.d. ones ----------------------------------------------------------------
@pytest.mark.parametrize(("d", "m"), [(16, 16), (8, 64)], ids=["D16-M16", "D8-M64"])
def test_orthogonal_features_have_lower_kernel_estimate_mse(d, m):
    rng = np.random.default_rng(2)
    q, k = 0.5 * rng.standard_normal((2, 8, d))
    exact = np.exp(q @ k.T / np.sqrt(d))
    mse = {orth: np.mean((kernel_estimates(q, k, m, range(100), orthogonal=orth) - exact) ** 2)
           for orth in (True, False)}
    assert mse[True] < mse[False], f"MSE orthogonal {mse[True]:.4g} vs iid {mse[False]:.4g}"


# --- the projection -------------------------------------------------------------------------------------
def test_projection_shape_and_d_phi():
    phi = performer(6, 20)
    assert tuple(phi.projection.shape) == (20, 6)
    assert phi.d_phi == 20


def test_orthogonal_projection_has_orthogonal_blocks():
    d, m = 5, 17  # three full blocks of d rows and a partial one of 2
    w = to_numpy(performer(d, m, seed=3, orthogonal=True).projection)
    for start in range(0, m, d):
        block = w[start:start + d]
        gram = block @ block.T
        assert_close(gram, np.diag(np.diag(gram)), what=f"rows {start}..{start + len(block) - 1}")


def test_orthogonal_row_norms_follow_chi_d():
    # |w|^2 of a chi(d) norm is chi-square(d): mean d, variance 2d (not a constant |w| = sqrt(d))
    d, m = 8, 4096
    sq = np.sum(to_numpy(performer(d, m, seed=4, orthogonal=True).projection) ** 2, axis=1)
    assert abs(sq.mean() - d) < 4.5 * np.sqrt(2 * d / m), f"mean |w|^2 = {sq.mean():.3f}, expected {d}"
    # the sample variance of chi-square(d) has variance ~ (mu_4 - sigma^4) / m = (8 d^2 + 48 d) / m
    assert abs(sq.var(ddof=1) - 2 * d) < 4.5 * np.sqrt((8 * d**2 + 48 * d) / m), (
        f"var |w|^2 = {sq.var(ddof=1):.3f}, expected {2 * d}"
    )


def test_redraw_changes_the_projection_reproducibly():
    phi = performer(6, 20, seed=0)
    first = to_numpy(phi.projection).copy()
    x = np.random.default_rng(5).standard_normal((4, 6))
    y0 = to_numpy(phi(x))
    phi.redraw(7)
    assert not np.allclose(to_numpy(phi.projection), first), "redraw(7) kept the seed-0 projection"
    assert_close(phi.projection, performer(6, 20, seed=7).projection, what="redraw(7) == seed 7")
    assert not np.allclose(to_numpy(phi(x)), y0)
    phi.redraw(0)
    assert_close(phi.projection, first, what="redraw(0) restores seed 0")
    assert_close(phi(x), y0, what="features after redraw(0)")


def test_same_seed_same_projection_different_seed_different():
    assert_close(performer(6, 20, seed=3).projection, performer(6, 20, seed=3).projection, what="seed 3")
    assert not np.allclose(to_numpy(performer(6, 20, seed=3).projection),
                           to_numpy(performer(6, 20, seed=4).projection))


@pytest.mark.parametrize("stabilize", [True, False])
def test_numpy_and_torch_give_the_same_features(device, stabilize):
    import torch

    x = np.random.default_rng(6).standard_normal((2, 9, 6))
    phi = performer(6, 20, seed=8, stabilize=stabilize)
    y_np = phi(x)
    y_t = phi(torch.from_numpy(x).to(device))
    assert isinstance(y_t, torch.Tensor) and y_t.device.type == device
    assert_close(y_t, y_np, what="performer features, torch vs numpy")
    # and a fresh map with the same seed, built for torch first, agrees too
    assert_close(performer(6, 20, seed=8, stabilize=stabilize)(torch.from_numpy(x)), y_np,
                 what="same seed, torch first")
