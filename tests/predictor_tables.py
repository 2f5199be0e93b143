"""A thinned copy of the shipped training tables, for tests that train a predictor.

Every 8th GPUMemNet row and every 4th Gavel pair: enough to train every head, in seconds.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from horus.predictor.tables import DATA_DIR


def small_tables(tmp_path: Path) -> Path:
    """Write the thinned tables under ``tmp_path/data`` and return that folder."""
    d = tmp_path / "data"
    d.mkdir()
    shutil.copy(DATA_DIR / "job_types.csv", d / "job_types.csv")
    for name, step in (("gpumemnet.csv", 8), ("gavel_pairs.csv", 4)):
        with (DATA_DIR / name).open() as src, (d / name).open("w", newline="") as dst:
            rows = list(csv.reader(src))
            w = csv.writer(dst, lineterminator="\n")
            w.writerow(rows[0])
            w.writerows(rows[1::step])
    return d
