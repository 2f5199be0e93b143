"""Where the simulator's measured data lives, under which licence, and how to get what is missing.

Why one module: the data folder is chosen in one place (``--data-dir`` > ``$HORUS_DATA_DIR`` >
the repository's ``data/``), each dataset is looked up the same way, and a missing one gives
one message that names what gets it. The layout is the repository's (``data/README.md``):
``gavel/`` (MIT), ``noncommercial/lucid/`` (S-Lab License 1.0, non-commercial, kept apart) and
``external/alibaba-gpu-v2023/`` (no licence to redistribute: fetched by the user with
:func:`fetch_alibaba`, never committed). A folder laid out as the older ``shared/data``
(``lucid/`` and ``alibaba-gpu-v2023/`` at its top) is found too.

The data ships with the repository, not with the Python package: an installed wheel has no
``data/`` beside it, so it needs ``--data-dir``/``HORUS_DATA_DIR`` and says so.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from horus.common.errors import ValidationError
from horus.predictor.tables import LUCID_FOLDERS

#: Environment variable naming the data folder (``--data-dir`` wins over it).
ENV_DATA_DIR = "HORUS_DATA_DIR"
#: ``data/`` of the repository checkout this module runs from (absent in an installed wheel).
REPO_DATA_DIR = Path(__file__).resolve().parents[3] / "data"
#: The simulator's ground truth when none is named: Gavel (MIT), which anyone may use; Lucid
#: (non-commercial) only when asked for by name (``docs/decisions.md``).
DEFAULT_TRUTH = "gavel"


@dataclass(frozen=True)
class Dataset:
    """One measured dataset: where it may sit under a data folder and how to get it."""

    name: str
    title: str
    licence: str
    folders: tuple[str, ...]  # candidates relative to the data folder, first match wins
    get: str  # what gets it, for the message when it is missing


GAVEL = Dataset(
    "gavel",
    "Gavel's measured throughputs and Philly-derived traces",
    "MIT",
    ("gavel",),
    "it ships with the Horus repository in data/gavel (see data/gavel/PROVENANCE.md)",
)
LUCID = Dataset(
    "lucid",
    "Lucid's measured job profiles and pairs",
    "S-Lab License 1.0, non-commercial use only",
    LUCID_FOLDERS,
    "it ships with the Horus repository in data/noncommercial/lucid (non-commercial use only; "
    "the source is simulation/analyzer/single_data.csv and simulation/data/colocate_info.csv "
    "of https://github.com/S-Lab-System-Group/Lucid at commit 63685a3), or use --truth gavel",
)
ALIBABA = Dataset(
    "alibaba",
    "the Alibaba GPU v2023 trace",
    "no licence published; research or study use",
    ("external/alibaba-gpu-v2023", "alibaba-gpu-v2023"),
    "it is not redistributed with Horus; download it with: horus sim fetch alibaba "
    "(see data/external/README.md), or pass --trace-file",
)
DATASETS = {d.name: d for d in (GAVEL, LUCID, ALIBABA)}

ALIBABA_FILE = "openb_pod_list_default.csv"
ALIBABA_COMMIT = "50a91c7c74abe3b658188dc78ac1dd302970d40c"  # last change to the v2023 CSVs
ALIBABA_URL = (
    f"https://raw.githubusercontent.com/alibaba/clusterdata/{ALIBABA_COMMIT}/"
    f"cluster-trace-gpu-v2023/csv/{ALIBABA_FILE}"
)
ALIBABA_SHA256 = "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8"
ALIBABA_BYTES = 575_468
_MAX_DOWNLOAD = 8 * 1024 * 1024  # far above the file's size; a larger answer is not it


def data_dir(cli: Path | None = None) -> Path:
    """The data folder: ``cli`` (``--data-dir``), else ``$HORUS_DATA_DIR``, else ``data/``."""
    if cli is not None:
        return cli
    env = os.environ.get(ENV_DATA_DIR, "").strip()
    return Path(env) if env else REPO_DATA_DIR


def missing(dataset: Dataset, file: str, folder: Path | None = None) -> str | None:
    """Why ``file`` of ``dataset`` cannot be read from the data folder, or None if it can."""
    base = data_dir(folder)
    if _find(dataset, file, base) is not None:
        return None
    if not base.is_dir():
        return (
            f"there is no data folder {base}"
            + (
                " (Horus's data ships with its repository, not with the Python package)"
                if base == REPO_DATA_DIR
                else ""
            )
            + f"; pass --data-dir DIR or set {ENV_DATA_DIR}=DIR to a folder laid out as the "
            f"repository's data/ (data/README.md). For {dataset.title}: {dataset.get}"
        )
    tried = " or ".join(str(base / f / file) for f in dataset.folders)
    return f"{dataset.title} ({dataset.licence}): not in {base} (no {tried}); {dataset.get}"


def dataset_file(dataset: Dataset, file: str, folder: Path | None = None) -> Path:
    """The path of ``file`` of ``dataset`` under the data folder; a clear error if absent."""
    path = _find(dataset, file, data_dir(folder))
    if path is None:
        raise ValidationError(missing(dataset, file, folder) or file)
    return path


def _find(dataset: Dataset, file: str, base: Path) -> Path | None:
    for sub in dataset.folders:
        path = base / sub / file
        if path.exists():
            return path
    return None


def fetch_alibaba(
    folder: Path | None = None,
    url: str = ALIBABA_URL,
    sha256: str = ALIBABA_SHA256,
    timeout: float = 60.0,
) -> tuple[Path, bool]:
    """Download the pinned Alibaba v2023 pod list into ``<data>/external/alibaba-gpu-v2023/``.

    Refuses anything whose SHA-256 is not the pinned one (nothing is written then); a file
    already there with the right digest is kept. Returns the path and whether it downloaded.
    """
    import urllib.error
    import urllib.request

    dest = data_dir(folder) / ALIBABA.folders[0] / ALIBABA_FILE
    if dest.exists() and _sha256(dest.read_bytes()) == sha256:
        return dest, False
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read(_MAX_DOWNLOAD + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ValidationError(
            f"could not download {url}: {exc}; download it by hand into {dest} "
            "(data/external/README.md has the command)"
        ) from None
    if len(body) > _MAX_DOWNLOAD:
        raise ValidationError(f"{url} sent more than {_MAX_DOWNLOAD} bytes; not the trace file")
    digest = _sha256(body)
    if digest != sha256:
        raise ValidationError(
            f"{url} sent {len(body)} bytes with SHA-256 {digest}, not the pinned {sha256}; "
            "nothing was written"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    tmp.write_bytes(body)
    os.replace(tmp, dest)
    return dest, True


def _sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()
