"""What a measuring run keeps: ``measure.json`` (read back bounded, to resume; written after
every measurement) and the training rows made from it (``training-rows.csv``,
``pair-rows.csv``, in the columns ``horus predictor train --extra-rows`` /
``--extra-pair-rows`` read), plus how far the agent's pair estimate was from the truth."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from horus.common.errors import ValidationError
from horus.predictor.interface import GraphProfile
from horus.predictor.measure.gpu import SHARING_TIME_SLICING
from horus.predictor.measure.jobs import parse_job
from horus.predictor.schema import FEATURE_NAMES
from horus.predictor.userdata import PAIR_ROW_COLUMNS, TRAINING_ROW_COLUMNS

RESULTS_FILE = "measure.json"
TRAINING_ROWS_FILE = "training-rows.csv"
PAIR_ROWS_FILE = "pair-rows.csv"
RESULTS_FORMAT = "horus-measure/v1"
TRAINING_PROVENANCE = [
    "backend",
    "sharing",
    "model",
    "family",
    "job",
    "steps_per_s",
    "torch_peak_mib",
]
PAIR_PROVENANCE = ["backend", "sharing", "model", "other_model", "job", "other", "proxy_speed"]


#: Largest measure.json read (a full zoo with every pair is a few MB).
MAX_RESULTS_BYTES = 256 << 20


def load_results(path: Path) -> dict[str, Any]:
    """``measure.json`` of an earlier run (to resume), or a fresh one."""
    if not path.exists():
        return {"format": RESULTS_FORMAT, "solo": {}, "pairs": {}, "failed": {}}
    from horus.common.documents import load_json, read_text_file

    try:  # bounded (size, UTF-8, nesting): the folder may be anyone's
        data = load_json(
            read_text_file(path, max_bytes=MAX_RESULTS_BYTES),
            str(path),
            max_bytes=MAX_RESULTS_BYTES,
        )
    except ValidationError as exc:
        raise ValidationError(
            f"{path} is not a measure.json this tool wrote ({exc}); move it away to start over"
        ) from None
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise ValidationError(
            f"{path}: format is {data.get('format') if isinstance(data, dict) else None!r}, "
            f"expected {RESULTS_FORMAT!r}; move it away to start over"
        )
    for section in ("solo", "pairs", "failed"):
        entries = data.setdefault(section, {})
        objects = section != "failed"  # failed: job (or pair) -> its error text
        if not isinstance(entries, dict) or (
            objects and not all(isinstance(v, dict) for v in entries.values())
        ):
            raise ValidationError(
                f"{path}: '{section}' must map each job (or pair) to an object; this file was "
                "not written by 'horus predictor measure' (or was edited): move it away"
            )
    return data


def save_results(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``measure.json`` whole or not at all (a temporary file, then a rename)."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def write_rows(results: Mapping[str, Any], out_dir: Path) -> tuple[int, int]:
    """Rewrite ``training-rows.csv`` and ``pair-rows.csv`` from ``results``; (rows, pair rows).

    Nothing is written without a GPU (a dry run) or for readings NVML did not give."""
    gpu = results.get("gpu")
    if not gpu:
        return 0, 0
    from horus.predictor.gpus import gpu_spec

    gpu_spec(gpu)  # an unknown GPU is an error here, not when training reads the rows

    def profile(key: str) -> GraphProfile:
        return solo_profile(key, results["solo"][key])

    backend = results.get("backend", "")
    sharing = results.get("sharing", SHARING_TIME_SLICING)
    rows = []
    for key, r in sorted(results["solo"].items()):
        if r.get("util") is None or r.get("memory_mib") is None:
            continue
        p = profile(key)
        row: dict[str, Any] = {"gpu": gpu, "util": round(r["util"], 3)}
        row["memory_mib"] = round(r["memory_mib"], 1)
        row.update({k: p.features[k] for k in FEATURE_NAMES})
        row.update(
            backend=backend,
            sharing=sharing,
            model=p.model,
            family=p.family,
            job=key,
            steps_per_s=round(r["steps_per_s"], 4),
            torch_peak_mib=round(r["torch_peak_mib"], 1),
        )
        rows.append(row)
    pair_rows = []
    for key, r in sorted(results["pairs"].items()):
        ka, kb = key.split("|")
        # both orders are rows; a job next to a copy of itself gives two measurements too
        for (me, other), side in (((ka, kb), "a"), ((kb, ka), "b")):
            pa, pb = profile(me), profile(other)
            speed = r[side]["speed"]
            row = {"gpu": gpu, "speed": round(min(speed, 2.0), 4)}
            row.update({f"a_{k}": pa.features[k] for k in FEATURE_NAMES})
            row.update({f"b_{k}": pb.features[k] for k in FEATURE_NAMES})
            proxy = r[side]["proxy_speed"]
            row.update(
                backend=backend,
                sharing=sharing,
                model=pa.model,
                other_model=pb.model,
                job=me,
                other=other,
                proxy_speed="" if proxy is None else round(proxy, 4),
            )
            pair_rows.append(row)
    _write_csv(out_dir / TRAINING_ROWS_FILE, [*TRAINING_ROW_COLUMNS, *TRAINING_PROVENANCE], rows)
    _write_csv(out_dir / PAIR_ROWS_FILE, [*PAIR_ROW_COLUMNS, *PAIR_PROVENANCE], pair_rows)
    return len(rows), len(pair_rows)


def solo_profile(key: str, entry: Mapping[str, Any]) -> GraphProfile:
    """The graph profile a solo entry of ``measure.json`` stores (what the extractor said about
    the job when it was measured), so rows and the simulator need no torch later."""
    j = parse_job(key)
    try:
        features = {k: float(entry["features"][k]) for k in FEATURE_NAMES}
        bad = [k for k, v in features.items() if not (math.isfinite(v) and v >= 0)]
        if bad:
            raise ValueError(f"{', '.join(bad)} not a finite number >= 0")
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationError(
            f"{RESULTS_FILE}: solo entry {key!r} has no complete 'features' ({exc}); "
            "measure it again (move the entry away)"
        ) from None
    return GraphProfile(j.zoo, j.batch_size, features, str(entry.get("family", j.zoo)))


def _write_csv(path: Path, columns: list[str], rows: Sequence[Mapping[str, Any]]) -> None:
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def proxy_summary(results: Mapping[str, Any]) -> dict[str, Any]:
    """How far the agent's utilisation-ratio estimate is from the true pair speeds."""
    errs = [
        (s["proxy_speed"] - s["speed"])
        for r in results["pairs"].values()
        for s in (r["a"], r["b"])
        if s.get("proxy_speed") is not None
    ]
    if not errs:
        return {"pairs_with_estimate": 0}
    return {
        "pairs_with_estimate": len(errs),
        "estimate_bias": sum(errs) / len(errs),
        "estimate_mae": sum(abs(e) for e in errs) / len(errs),
    }
