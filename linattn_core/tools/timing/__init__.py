"""Timing attention honestly: device choice, timers, peak memory, the one cost model, sweeps and plots.

Everything a timing claim in the book rests on lives here, so that it can be read, tested and reused:

- device choice and records (from :mod:`linattn_core._provenance`, shared with training and the
  benchmark): :func:`pick_device` chooses CUDA, then Apple MPS, then the CPU (or what the reader asks
  for, by argument or the ``LINATTN_DEVICE`` environment variable); :func:`describe_device` names it,
  :func:`environment` records hardware and software;
- :mod:`~linattn_core.tools.timing.clock`: :func:`time_calls`, the one timer, times several callables
  interleaved (warm-up, accelerator synchronisation, blocks of each in turn round after round; median
  and inter-quartile range), :func:`time_call` one of them, :func:`time_steps` stateful steps (a
  generated token), :func:`noisy` flags a spread wider than its median, :func:`synchronizer` waits for
  an accelerator before the clock is read (the sweeps' warm-up uses it too); :func:`matmul_rate` and
  :func:`copy_rate` measure the machine's rates;
- :mod:`~linattn_core.tools.timing.memory`: :func:`peak_memory` *measures* the extra memory a call needs;
- :mod:`~linattn_core.tools.timing.cost`: the one cost model, :func:`flops`, :func:`bytes_moved`,
  :func:`predicted_bytes`, :func:`flop_crossover`, :func:`cost_curves`, :func:`decode_memory`, the
  roofline :class:`CostModel` and :func:`crossover_length`; the associative and trade-offs chapters, the
  cost explorer, the timing chapter and the benchmark all count with it;
- :mod:`~linattn_core.tools.timing.sweeps`: :func:`sweep` runs several methods over several lengths, skipping
  with a stated reason what would not fit or would run past a time budget, and returns :class:`Record`
  objects; :func:`loglog_slope` and :func:`measured_crossover` read them;
- :mod:`~linattn_core.tools.timing.plots`: :func:`time_figure`, :func:`memory_figure`, :func:`model_figure`,
  :func:`throughput_figure` (the whole model's tokens/s against context, one line per layer);
- :mod:`~linattn_core.tools.timing.decode`: :func:`decode_times`, one generated token with a KV cache
  against a fixed-size state, at growing contexts.

torch, tqdm and plotly are imported inside the functions that need them, so importing this package is cheap.

Glossary (code -> text)
-----------------------
``N``            sequence length (tokens)
``d``, ``d_v``   query/key width and value width
``d_phi``        feature dimension of phi (``d`` for elementwise maps such as elu+1)
``C``            chunk size of the chunked causal form (``chunk_size``)
``batch_heads``  batch size times number of heads: independent attention problems done together
"""

from __future__ import annotations

from ..._provenance import (
    ENV_DEVICE,
    cpu_name,
    describe_device,
    device_name,
    environment,
    num_threads,
    pick_device,
    torch_device,
)
from .clock import Timing, copy_rate, matmul_rate, noisy, synchronizer, time_call, time_calls, time_steps
from .cost import (
    COUNTED,
    METHODS,
    CostModel,
    bytes_moved,
    cost_curves,
    crossover_length,
    decode_memory,
    flop_crossover,
    flops,
    predicted_bytes,
)
from .memory import available_memory, format_bytes, peak_memory
from .plots import memory_figure, model_figure, throughput_figure, time_figure
from .sweeps import (
    Method,
    Record,
    crossing,
    format_table,
    loglog_slope,
    measured_crossover,
    standard_methods,
    sweep,
)

__all__ = [
    "COUNTED",
    "ENV_DEVICE",
    "METHODS",
    "CostModel",
    "Method",
    "Record",
    "Timing",
    "available_memory",
    "bytes_moved",
    "copy_rate",
    "cost_curves",
    "cpu_name",
    "crossing",
    "crossover_length",
    "decode_memory",
    "describe_device",
    "device_name",
    "environment",
    "flop_crossover",
    "flops",
    "format_bytes",
    "format_table",
    "loglog_slope",
    "matmul_rate",
    "measured_crossover",
    "memory_figure",
    "model_figure",
    "noisy",
    "num_threads",
    "peak_memory",
    "pick_device",
    "predicted_bytes",
    "standard_methods",
    "sweep",
    "synchronizer",
    "throughput_figure",
    "time_call",
    "time_calls",
    "time_figure",
    "time_steps",
    "torch_device",
]
