"""The compiled backward pass where the denominators are clamped, with features that are not zero.

``beta_i = -[den_i >= eps] (a_i . num_i) / c_i``: the mask only matters for a clamped row whose query
features are not zero (a zero row has ``a_i . num_i = 0`` whatever the mask), so the rows here are tiny
relu rows (``0 < den < eps``), the identity's negative rows, elu+1 under a large eps, and a row exactly
at ``eps`` (where ``clamp_min`` passes the gradient). Every instruction set, against autograd through
the float64 quadratic form.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_kernel import ISAS, needs_kernel
from test_kernel_backward import assert_grads, reference_grads

from linattn_core import get_feature_map
from linattn_core.fast import kernel

torch = pytest.importorskip("torch")
pytestmark = [needs_kernel, pytest.mark.filterwarnings("ignore:.*denominator:RuntimeWarning")]

N, D, D_V, C = 40, 8, 5, 16  # 16 does not divide 40: a shorter last chunk


def clamped_case(case):
    """q, k, v (float32, (2, N, .)), the map and eps: some rows clamped with non-zero features."""
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((2, N, D)), rng.standard_normal((2, N, D)), rng.standard_normal((2, N, D_V))
    if case == "relu-tiny-rows":  # den ~ 1e-9 < eps in rows 3, 17, 30
        q, k = np.abs(q) + 0.1, np.abs(k) + 0.1
        q[:, [3, 17, 30]] *= 1e-10
        name, eps = "relu", 1e-6
    elif case == "identity-negative-rows":  # den < 0 in rows 5, 20, 33
        q, k = np.abs(q) + 0.1, np.abs(k) + 0.1
        q[:, [5, 20, 33]] *= -1
        name, eps = "identity", 1e-6
    else:  # elu+1: den grows with i, the first rows are under eps = 40
        name, eps = "elu+1", 40.0
    return [torch.from_numpy(x).float() for x in (q, k, v)], name, eps


@pytest.mark.parametrize("case", ["relu-tiny-rows", "identity-negative-rows", "elu+1-large-eps"])
@pytest.mark.parametrize("isa", ISAS)
def test_clamped_rows_with_features_pass_no_gradient_to_their_denominator(isa, case):
    (q, k, v), name, eps = clamped_case(case)
    phi = get_feature_map(name)
    den = torch.tril(phi(q.double()) @ phi(k.double()).transpose(-1, -2)).sum(-1)
    assert (den < eps).sum() >= 4 and (den > 2 * eps).sum() >= 20, "both kinds of rows"
    dout = torch.from_numpy(np.random.default_rng(8).standard_normal((2, N, D_V))).float()
    got = kernel.chunked_backward(q, k, v, dout, phi, eps, C, True, isa=isa)
    assert_grads(got, reference_grads(q, k, v, dout, name, True, eps=eps), f"{isa} {case}")


@pytest.mark.parametrize("isa", ISAS)
def test_a_denominator_exactly_at_eps_passes_its_gradient(isa):
    # powers of two: row 0's denominator is 0.5 = eps exactly, row 1's 0.25 (clamped), the rest above
    q = torch.tensor([[[0.5, 0.0], [0.125, 0.0], [1.0, 1.0], [2.0, 0.5]]])
    k = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [0.5, 2.0], [1.0, 1.0]]])
    v = torch.from_numpy(np.random.default_rng(9).standard_normal((1, 4, 3))).float()
    dout = torch.from_numpy(np.random.default_rng(10).standard_normal((1, 4, 3))).float()
    got = kernel.chunked_backward(q, k, v, dout, get_feature_map("identity"), 0.5, 2, True, isa=isa)
    assert_grads(got, reference_grads(q, k, v, dout, "identity", True, eps=0.5), f"{isa} den == eps")
