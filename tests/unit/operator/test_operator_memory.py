"""What the operator remembers about a job goes with the job (issue 27: RSS over cycles).

A long-running operator sees every DLJob ever created; whatever it keeps per job (the
admitted profile, parsed objects, signature checks) must go once the job is gone, or its
memory grows with each create/delete cycle of a busy cluster.
"""

from __future__ import annotations

from fakeapi import FakeJobApi
from opfixtures import KEY, dljob, node

from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor

PREDICTOR = load_default_predictor()


def test_a_deleted_jobs_profile_is_forgotten_by_the_next_pass() -> None:
    api = FakeJobApi([node("n1", gpus=4)])
    rec = Reconciler(api, PREDICTOR, KEY, workers=2)
    try:
        for cycle in range(3):
            names = [f"c{cycle}-{i}" for i in range(4)]
            for name in names:
                api.add_dljob(dljob(name))
            assert rec.run_pass().placed == 4
            uids = [api.job(n)["metadata"]["uid"] for n in names]
            assert all(rec.admission.known_profile(u) is not None for u in uids)
            kept = next(iter(uids[1:]))
            for name in names[:1]:  # one deleted, with its pods (the garbage collector's job)
                del api.dljobs[("default", name)]
                api.pods.pop(("default", f"{name}-0"), None)
            rec.run_pass()
            assert rec.admission.known_profile(uids[0]) is None
            assert rec.admission.known_profile(kept) is not None  # the others stay
            for name in names[1:]:
                del api.dljobs[("default", name)]
                api.pods.pop(("default", f"{name}-0"), None)
            rec.run_pass()
            assert all(rec.admission.known_profile(u) is None for u in uids)
    finally:
        rec.close()
