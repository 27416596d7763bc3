"""The one dtype-aware comparison helper of the test suite.

Every numerical comparison in the tests goes through :func:`assert_close`, so the tolerances live here
and nowhere else. They are chosen per dtype from the unit roundoff ``u`` of the format:

=========  ===========  =========================================================================
dtype      u            tolerance (rtol = atol) and why
=========  ===========  =========================================================================
float64    1.1e-16      1e-10: the contract promises agreement to 1e-10 between forms
float32    6.0e-08      2e-5: a few hundred accumulated products (N <= 200) cost ~N*u relative
float16    4.9e-04      6e-3: float32 accumulation, then one rounding to float16 (u) per output,
                        plus phi and the scores themselves evaluated on rounded inputs
bfloat16   3.9e-03      4e-2: as float16 with 8x coarser rounding
=========  ===========  =========================================================================

``expected`` should be computed in float64 from the *same* (already rounded) inputs, so the tolerance
only has to cover the arithmetic of the implementation under test, not the rounding of the inputs.
"""

from __future__ import annotations

import numpy as np

# rtol and atol per dtype name (atol matters for entries near zero; outputs here are O(1)).
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-10),
    "float32": (2e-5, 2e-5),
    "float16": (6e-3, 6e-3),
    "bfloat16": (4e-2, 4e-2),
}


def dtype_name(x_or_dtype) -> str:
    """``"float32"`` etc. for a numpy/torch array or dtype, a numpy scalar type, or a dtype name."""
    if isinstance(x_or_dtype, str):
        return x_or_dtype
    dt = x_or_dtype if isinstance(x_or_dtype, type) else getattr(x_or_dtype, "dtype", x_or_dtype)
    try:
        return np.dtype(dt).name
    except TypeError:  # a torch dtype: "torch.bfloat16" -> "bfloat16"
        return str(dt).removeprefix("torch.")


def to_numpy(x) -> np.ndarray:
    """A float64 numpy copy of a numpy array, a torch tensor (any device/dtype) or a scalar."""
    if hasattr(x, "detach"):  # torch tensor; bfloat16 has no numpy twin, so go through float64
        import torch

        return x.detach().to(device="cpu", dtype=torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def tolerance(dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for a dtype (numpy or torch, object or name); integers and booleans are exact."""
    name = dtype_name(dtype)
    if name.startswith(("int", "uint", "bool")):
        return 0.0, 0.0
    if name not in TOLERANCES:
        raise KeyError(f"no tolerance defined for dtype {name!r}; known: {sorted(TOLERANCES)}")
    return TOLERANCES[name]


def assert_close(actual, expected, *, dtype=None, what: str = "") -> None:
    """Assert ``actual`` matches ``expected`` within the tolerance of ``dtype``.

    Parameters
    ----------
    actual, expected : numpy array, torch tensor or scalar
        Compared elementwise after conversion to float64 numpy; shapes must be equal (no broadcasting).
    dtype : numpy/torch dtype or name, optional
        Selects the tolerance. Defaults to the dtype of ``actual`` (float64 for Python scalars).
    what : str
        Describes the comparison in the failure message.
    """
    if dtype is None:
        dtype = getattr(actual, "dtype", "float64")
    rtol, atol = tolerance(dtype)
    a, e = to_numpy(actual), to_numpy(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != expected {e.shape}"
    where = f"{what} [{dtype_name(dtype)}: rtol={rtol}, atol={atol}]"
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, equal_nan=False, err_msg=where)


def summation_bound(abs_products_sum, n_terms: int, dtype) -> np.ndarray:
    """The worst-case rounding error of a sum of ``n_terms`` products in ``dtype``, whatever the order.

    ``|fl(sum_j x_j y_j) - sum_j x_j y_j| <= gamma_n sum_j |x_j y_j|`` with ``gamma_n = n u / (1 - n u)``
    (Higham, *Accuracy and Stability of Numerical Algorithms*, 3.1), for any order of summation and any
    blocking of the sum: the tolerance of a form whose summation order is its own business (a compiled
    kernel, threads, a BLAS). ``abs_products_sum`` is ``sum_j |x_j y_j|`` computed in float64.
    """
    units = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
    u = units[dtype_name(dtype)]
    nu = n_terms * u
    if nu >= 0.5:
        raise ValueError(f"{n_terms} terms in {dtype_name(dtype)}: the bound n u / (1 - n u) is meaningless")
    return nu / (1.0 - nu) * to_numpy(abs_products_sum)
