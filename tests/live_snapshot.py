"""Everything a live state says, as plain values to compare (two states are the same when
their snapshots are equal): every GPU's counters — the utilisation sum to the bit — and
residents in order, the jobs and residents in order, problems and measured pairs."""

from __future__ import annotations

from typing import Any

from horus.operator.residents import LiveState


def snapshot(live: LiveState) -> dict[str, Any]:
    st = live.state
    return {
        "mem": st.mem_used.tolist(),
        "core": st.core_used.tolist(),
        "util": st.util_sum.tolist(),
        "njobs": st.njobs.tolist(),
        "healthy": st.healthy.tolist(),
        "sig": [st.signatures[int(s)] for s in st.sig_id],
        "on_gpu": [[(r.job, r.kind, r.core, r.memory, r.util) for r in rs] for rs in st.residents],
        "jobs": [(k, v.request, v.prediction, v.gpus) for k, v in st.jobs.items()],
        "residents": list(live.residents.items()),
        "excluded": live.excluded_nodes,
        "problems": live.problems,
        "pairs": live.observed_pairs,
    }
