"""Builds the one compiled part of linattn_core: the fused chunked kernel (linattn_core/fast/_chunked.c).

Everything else is in pyproject.toml. The extension is optional: without a C compiler (or on a CPU
it has no code for) the package installs all the same and linear_attention uses its torch forms.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "linattn_core.fast._chunked",
            sources=["linattn_core/fast/_chunked.c"],
            depends=["linattn_core/fast/_chunked_body.h", "linattn_core/fast/_chunked_back.h",
                     "linattn_core/fast/_delta.h"],
            # -O3 for the unrolled tiles; no -ffast-math (exp's rounding trick needs IEEE arithmetic)
            # and no -march=native (each instruction set is chosen at run time inside the file).
            # -fopenmp-simd: the `omp simd` loops of _delta.h (vector reductions), no OpenMP runtime.
            extra_compile_args=["-O3", "-std=gnu11", "-fopenmp-simd"],
            extra_link_args=["-pthread"],
            optional=True,
        )
    ]
)
