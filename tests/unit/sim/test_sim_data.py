"""The simulator's data: found in the repository's ``data/`` (never beside it), chosen by
``--data-dir`` > ``$HORUS_DATA_DIR`` > ``data/``, each dataset with its licence and provenance,
one clear message naming what gets a missing dataset, and the Alibaba trace fetched (pinned by
SHA-256), never committed."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from horus.cli import main
from horus.common.errors import ValidationError
from horus.sim import datasets
from horus.sim.datasets import (
    ALIBABA,
    ALIBABA_FILE,
    ALIBABA_SHA256,
    DEFAULT_TRUTH,
    ENV_DATA_DIR,
    GAVEL,
    LUCID,
    REPO_DATA_DIR,
    data_dir,
    dataset_file,
    fetch_alibaba,
    missing,
)
from horus.sim.groundtruth import load_lucid, load_truth
from horus.sim.run import TraceSpec, load, load_trace
from horus.sim.traces import load_alibaba

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_DATA_DIR, raising=False)


def test_the_data_folder_is_the_repositorys_and_flag_beats_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert REPO_DATA_DIR == ROOT / "data"
    assert data_dir() == REPO_DATA_DIR
    monkeypatch.setenv(ENV_DATA_DIR, str(tmp_path))
    assert data_dir() == tmp_path
    assert data_dir(tmp_path / "flag") == tmp_path / "flag"
    monkeypatch.setenv(ENV_DATA_DIR, "  ")  # blank means unset
    assert data_dir() == REPO_DATA_DIR


@pytest.mark.parametrize(
    ("folder", "licence"),
    [("gavel", "LICENSE"), ("gpumemnet", "LICENSE.md"), ("noncommercial/lucid", "LICENSE")],
)
def test_each_dataset_keeps_its_licence_and_provenance(folder: str, licence: str) -> None:
    d = REPO_DATA_DIR / folder
    if folder.startswith("noncommercial") and not d.exists():
        pytest.skip(f"{d} was removed (non-commercial data is optional)")
    assert (d / licence).is_file() and (d / "PROVENANCE.md").is_file()
    prov = (d / "PROVENANCE.md").read_text()
    assert "Commit" in prov or "commit" in prov
    data_files = [p.name for p in d.rglob("*") if p.suffix in (".csv", ".trace")]
    assert data_files
    for name in {n for n in data_files if n.endswith(".csv")}:
        assert name in prov, f"{folder}/PROVENANCE.md does not describe {name}"


def test_lucid_is_kept_apart_with_its_notice() -> None:
    d = REPO_DATA_DIR / "noncommercial" / "lucid"
    if not d.exists():
        pytest.skip(f"{d} was removed (non-commercial data is optional)")
    assert "S-Lab License 1.0" in (d / "LICENSE").read_text()
    assert "NON-COMMERCIAL" in (d / "NOTICE").read_text()
    assert not (REPO_DATA_DIR / "lucid").exists()  # nowhere but under noncommercial/


def test_the_alibaba_trace_is_never_committed() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(
        ["git", "ls-files", "data"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "data/external/README.md" in tracked
    assert [p for p in tracked if p.startswith("data/external/")] == [
        "data/external/.gitignore",
        "data/external/README.md",
    ]
    assert not [p for p in tracked if "openb_" in p or "alibaba" in p.lower()]


#: How code used to reach the data beside the checkout (``ROOT.parent / "shared" / "data"``,
#: ``Path(...) / ".." / "shared"``, ``"../shared/data"``).
_BESIDE = re.compile(
    r"""["']\.\./shared|["']\.\.["']\s*/\s*["']shared["']|parent\s*/\s*["']shared["']"""
)


def test_no_code_reads_beside_the_repository() -> None:
    hits = []
    for top in ("src", "tests", "benchmarks", "tools"):
        for path in (ROOT / top).rglob("*.py"):
            if path == Path(__file__).resolve():
                continue
            for no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if _BESIDE.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_default_commands_read_only_the_repository() -> None:
    """The default ground truth is Gavel (MIT) and the philly trace is Gavel's: both from
    data/ in the checkout, with nothing beside it needed."""
    assert DEFAULT_TRUTH == "gavel"
    truth, trace = load(TraceSpec("philly"))
    assert truth.source == "gavel" and len(truth.types) == 26
    assert len(trace) == 15_264
    assert dataset_file(GAVEL, "traces_msr_seed0").is_relative_to(REPO_DATA_DIR)


def test_a_missing_dataset_names_what_gets_it(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="non-commercial use only") as err:
        load_truth("lucid", tmp_path)
    assert "data/noncommercial/lucid" in str(err.value)
    assert "S-Lab-System-Group/Lucid" in str(err.value)
    truth = load_truth("gavel")
    with pytest.raises(ValidationError, match="horus sim fetch alibaba"):
        load_trace(TraceSpec("alibaba"), truth, tmp_path)
    with pytest.raises(ValidationError, match=f"set {ENV_DATA_DIR}=DIR") as err:
        load_truth("gavel", tmp_path / "nothing-here")
    assert "data/gavel" in str(err.value)


def test_an_installed_package_without_the_repository_says_where_data_comes_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A wheel has no data/ beside it: this module's repository data folder does not exist.
    monkeypatch.setattr(datasets, "REPO_DATA_DIR", tmp_path / "site-packages-has-no-data")
    with pytest.raises(ValidationError, match="ships with its repository, not with the Python"):
        load_truth("gavel")


def test_the_cli_prints_one_line_naming_the_fetch_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gavel").symlink_to(REPO_DATA_DIR / "gavel")  # the truth is there, the trace not
    assert main(["sim", "--trace", "alibaba", "--data-dir", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("horus: error: ")
    assert "horus sim fetch alibaba" in err[0]


def test_an_older_layout_with_lucid_on_top_is_found(tmp_path: Path) -> None:
    if missing(LUCID, "colocate_info.csv"):
        pytest.skip(missing(LUCID, "colocate_info.csv") or "")
    src = dataset_file(LUCID, "single_data.csv").parent
    shutil.copytree(src, tmp_path / "lucid")
    assert missing(LUCID, "colocate_info.csv", tmp_path) is None
    assert load_lucid(tmp_path).measured == load_lucid().measured


def _serve(tmp_path: Path, body: bytes) -> str:
    f = tmp_path / "upstream.csv"
    f.write_bytes(body)
    return f.as_uri()


def test_fetch_writes_only_the_pinned_file(tmp_path: Path) -> None:
    body = b"name,num_gpu\n"
    url = _serve(tmp_path, body)
    folder = tmp_path / "data"
    with pytest.raises(ValidationError, match="nothing was written"):
        fetch_alibaba(folder, url=url)  # the real pin: this body is not the trace
    dest = folder / "external" / "alibaba-gpu-v2023" / ALIBABA_FILE
    assert not dest.exists()
    digest = hashlib.sha256(body).hexdigest()
    assert fetch_alibaba(folder, url=url, sha256=digest) == (dest, True)
    assert dest.read_bytes() == body
    assert dataset_file(ALIBABA, ALIBABA_FILE, folder) == dest
    assert fetch_alibaba(folder, url=url, sha256=digest) == (dest, False)  # already there
    with pytest.raises(ValidationError, match=r"could not download .*data/external/README\.md"):
        fetch_alibaba(tmp_path / "other", url=(tmp_path / "absent.csv").as_uri())


def test_fetch_refuses_an_oversized_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets, "_MAX_DOWNLOAD", 10)
    url = _serve(tmp_path, b"x" * 11)
    with pytest.raises(ValidationError, match="more than 10 bytes"):
        fetch_alibaba(tmp_path / "data", url=url, sha256=hashlib.sha256(b"x" * 11).hexdigest())


def test_the_fetched_alibaba_trace_loads() -> None:
    why = missing(ALIBABA, ALIBABA_FILE)
    if why:
        pytest.skip(why)
    path = dataset_file(ALIBABA, ALIBABA_FILE)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == ALIBABA_SHA256
    jobs = load_alibaba(path, load_truth("gavel"))
    assert 0 < len(jobs) < 8152 and all(j.num_gpus >= 1 for j in jobs)
