"""Run ids stay unique when many processes make them at once, and a result is never written over another."""

import multiprocessing
import os

from scalelab import results
from scalelab.launch import slurm_env

SLURM = {"SLURM_JOB_ID": "4242"}  # the same job for every process: only pid and randomness tell them apart


def _ids(args):
    environ, n = args
    return [results.new_run_id("mlp", 2, run_name="same", job=slurm_env.job_label(environ)) for _ in range(n)]


def test_run_ids_unique_across_many_processes():
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters: nothing shared, as separate runs
    with ctx.Pool(8) as pool:
        batches = pool.map(_ids, [({}, 200)] * 8 + [(SLURM, 200)] * 8)
    ids = [i for batch in batches for i in batch]
    assert len(ids) == 3200 and len(set(ids)) == 3200
    assert sum("job4242-pid" in i for i in ids) == 1600


def _write(args):
    folder, run_id = args
    from helpers import make_result

    return results.write(folder, make_result(run_id))


def test_same_run_id_written_at_once_keeps_both(tmp_path):
    """Even if two runs drew the same id (they should not), mkdir decides: the second gets its own folder."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(4) as pool:
        paths = pool.map(_write, [(str(tmp_path), "same-id")] * 8)
    assert len(set(paths)) == 8 and all(os.path.exists(p) for p in paths)
    found, skipped = results.scan(str(tmp_path))
    assert len(found) == 8 and not skipped and len({r["run_id"] for r in found}) == 8
