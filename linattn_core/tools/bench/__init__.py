"""The benchmark: softmax and linear attention side by side, on this machine, in one run.

Run it with ``python -m linattn_core.bench`` (or ``make bench``). Options:

``--quick``        tiny sizes, a smoke test of the whole pipeline in seconds
``--max-n N``      stop at sequence length N
``--device DEV``   ``cpu``, ``cuda``, ``mps`` (default: :func:`linattn_core.tools.timing.pick_device`)
``--json PATH``    also write the results as JSON
``--max-call-s S`` per-call time budget (longer lengths of a method that exceeds it are skipped)
``--budget-s S``   time budget of the whole sweep
``--threads T``    torch CPU threads during the sweep (one gives steadier numbers on a busy machine)
``--parts P ...``  only these parts: ``forward training decoding layers models`` (default: all)

What is measured (float32, ``batch_heads = 8``, ``d = d_v = 64``, ``N = 256 .. 65536``): the naive softmax
form, ``torch.nn.functional.scaled_dot_product_attention`` (SDPA), non-causal linear attention, and the
causal forms (naive softmax and SDPA with the causal mask, linear ``recurrent``, ``cumsum``, ``chunked``,
``auto``), plus this machine's float32 matmul rate (best of 2048³ and 4096³ products, measured before and
after the sweep; the higher is used) as the yardstick for GFLOP/s. All of it goes through
:mod:`linattn_core.tools.timing`: the same timer, memory measurement and guards as
the book. At each length the methods are timed together, interleaved (``timing.time_calls``: a block of
each in turn, 15 rounds at least where the time allows), so that a busy machine's phases land on all of
them and show in their interquartile ranges; a target whose measurements spread wider than their
median prints its value with ``noisy: IQR > median, no verdict`` instead of PASS or FAIL. The targets at
the end are *reported*, not tested: the command always exits 0. Among them: the non-causal form
against the causal chunked form of the same pass on the same inputs (at most as slow from N = 1024 on)
and its fraction of the matmul rate at 16,384 (at least 60%).

The parts, one module each: :mod:`.suite` (the forward sweep and the whole run), :mod:`.train`
(forward + backward), :mod:`.decode` (one generated token, KV cache against state), :mod:`.layers`
(one training step of the whole language model per attention layer, against softmax's), :mod:`.models`
(the whole model against context: training and generation tokens/s per layer from 128 to 8,192 tokens
and the context where each linear layer overtakes softmax; ``python -m linattn_core.tools.bench.models``
alone), :mod:`.noncausal` (the non-causal kernel, the causal kernel and a matmul of the same FLOPs in one
interleaved pass: the forward part runs it at 16,384 for the fraction-of-matmul target;
``python -m linattn_core.tools.bench.noncausal`` alone), :mod:`.targets` (what is reported and how).

FLOPs come from the one cost model, :func:`linattn_core.tools.timing.flops`. The chunked rows count the
masked intra-chunk products in full, ``4 N d d_v + 2 N C (d + d_v)`` per batch-head, so that every
implementation of the chunked form is measured against the same work. On a CPU with the compiled kernel
(see :mod:`linattn_core.fast.kernel`) that count credits work the kernel does not do: it skips the score
blocks above the diagonal and so performs about 79% of it (77% with AVX2) at ``C = d = d_v = 64``
(``timing.flops(..., skip_masked=True)`` counts half of the masked products). It also runs AVX-512
where MKL's float32 matmul, the yardstick, may not (on AMD CPUs it uses AVX2). Both are why its
"fraction of the matmul rate" can pass 100%.

The non-causal pass runs in a process of its own whose torch OpenMP workers sleep as soon as they are
idle (``OMP_WAIT_POLICY=PASSIVE``, :func:`.noncausal.measure_apart`): under libgomp's default they spin
for a while after each ``torch.mm`` of the pass, on the cores the kernel's threads need next (measured:
the kernel at N = 16,384 on 2 threads took 14.6 ms interleaved under the default policy, 12.4 ms with
it). The rest of the benchmark runs under the caller's policy, recorded as ``omp_wait_policy``.
"""

from .suite import Config, evaluate_targets, main, run
from .targets import Target

__all__ = ["Config", "Target", "evaluate_targets", "main", "run"]
