"""The stored full-preset runs (linattn_core/lm/results/full-KIND.json, and full-KIND-seed1.json with
seed 1): what the training chapter's table shows.

Each file must come from the current ``full`` preset, have run to its end, have learned from context,
and reproduce: its first training losses, recomputed here from its configuration on the real text
(one thread, as the stored runs were trained), equal the stored ones to float32 rounding.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import numpy as np
import pytest
from _tolerances import assert_close

torch = pytest.importorskip("torch")

from linattn_core.lm import data, stored  # noqa: E402 - after the importorskip
from linattn_core.lm import train as T  # noqa: E402
from linattn_core.lm.model import KINDS  # noqa: E402

RESULTS = stored.directory()  # linattn_core/lm/results/, installed with the package
SEEDS = (0, 1)
STORED = {(kind, seed): RESULTS / f"full-{kind}{'' if seed == 0 else f'-seed{seed}'}.json"
          for kind in KINDS for seed in SEEDS}
RUNS = sorted(STORED, key=lambda ks: (ks[1], KINDS.index(ks[0])))


def run_id(ks) -> str:
    return f"{ks[0]}-seed{ks[1]}"


def test_every_kind_has_its_stored_runs():
    missing = [run_id(ks) for ks, path in STORED.items() if not path.is_file()]
    assert not missing, f"no stored full run for {missing}: python -m linattn_core.train --preset full ..."


@pytest.mark.parametrize("ks", RUNS, ids=run_id)
def test_stored_run_is_the_current_preset_run_to_its_end(ks):
    kind, seed = ks
    run = json.loads(STORED[ks].read_text())
    want = asdict(replace(T.PRESETS["full"], attention=kind, seed=seed))
    assert run["config"] == want, "the preset changed: rerun it"
    assert run["preset"] == "full" and run["steps_done"] == run["config"]["max_steps"]
    assert run["command"].startswith(f"python -m linattn_core.train --attention {kind} --preset full")
    assert run["hardware"]["torch_threads"] == 1 and len(run["git_commit"] or "") == 40
    curves = run["curves"]
    assert curves["step"][: T.FIRST_LOSSES] == list(range(T.FIRST_LOSSES))
    assert curves["val_step"][-1] == run["steps_done"] and run["final_val_loss"] == curves["val_loss"][-1]
    # learned from context: far below the entropy of the characters' frequencies
    assert run["final_val_loss"] < run["unigram_entropy"] - 0.4


@pytest.fixture(scope="module")
def corpus():
    if not data.tarball_path().is_file():
        pytest.skip("real text not fetched (make data)")
    return data.load_corpus()


@pytest.mark.parametrize("ks", RUNS, ids=run_id)
def test_stored_run_reproduces_its_first_losses(ks, corpus):
    kind, seed = ks
    run = json.loads(STORED[ks].read_text())
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the stored runs were trained on one thread: the same summation order
    try:
        again = T.replay_losses(run, corpus, T.FIRST_LOSSES)
    finally:
        torch.set_num_threads(before)
    assert_close(np.array(again), np.array(run["curves"]["train_loss"][: T.FIRST_LOSSES]), dtype="float32",
                 what=f"first losses of the stored {kind} run, seed {seed}")
