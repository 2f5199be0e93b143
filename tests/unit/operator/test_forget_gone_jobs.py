"""What the operator remembers per job is forgotten when the job is gone, and only then.

Why: each pass keeps per-UID memories — the highest record epoch this process signed (the
floor below which a status record is a rollback, not trusted) and the admitted profiles.
Kept for every job ever seen, they grew with each create/delete cycle (issue 27), and the
epoch map was then cleared whole at 100,000 entries, dropping live jobs' floors with the dead
ones'.
"""

from __future__ import annotations

from fakeapi import FakeJobApi
from opfixtures import KEY, dljob, node

from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor

PREDICTOR = load_default_predictor()


def _job(name: str) -> dict[str, object]:
    return dljob(name, gpu={"mode": "explicit", "corePercent": 25, "memoryMiB": 8000})


def test_a_deleted_jobs_signed_epoch_is_forgotten_a_live_ones_kept() -> None:
    api = FakeJobApi([node("n1", gpus=4)])
    rec = Reconciler(api, PREDICTOR, KEY, workers=2)
    try:
        api.add_dljob(_job("gone"))
        api.add_dljob(_job("stays"))
        assert rec.run_pass().placed == 2
        floor = rec.writer.highest_signed("uid-stays")
        assert floor >= 1 and rec.writer.highest_signed("uid-gone") >= 1
        with api.lock:
            del api.dljobs[("default", "gone")]
        rec.run_pass()
        assert rec.writer.highest_signed("uid-gone") == 0
        assert rec.writer.highest_signed("uid-stays") == floor
        assert set(rec.admission._profiles) <= {"uid-stays"}
    finally:
        rec.close()
