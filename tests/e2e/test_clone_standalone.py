"""A clone of the repository, with nothing beside it, runs the data-reading tests and every
``horus sim`` command of the README (issue 19: "the repository stands alone").

What this checks, and why not ``make test`` inside the clone: the suite already runs from a
clean clone in CI (``.ci/run``), so what a second clone can catch is a file the code reads at
run time that is not committed, or one read from *beside* the checkout (the simulator's data
used to sit in ``../shared/data``). ``make test`` nested in ``make test`` would double CI time
(7-10 minutes warm on two cores, plus another control plane) to re-run tests that read nothing
outside the repository. So this test clones HEAD (``git clone``: committed files only) into an
empty temporary folder, where no ``../shared`` exists and ``HORUS_DATA_DIR`` is unset, imports
Horus from the clone's ``src`` (asserted), and there runs

* the unit tests that read the data folder (``tests/unit/sim``: ground truths, traces, data
  layout, licences, the fetch of the Alibaba trace from a local file);
* every ``horus sim`` line in the README's shell blocks, as written (but ``horus sim fetch``,
  which downloads from GitHub; ``test_sim_data.py`` runs it against a local file);
* ``horus sim --trace alibaba``, whose trace is not redistributed: one error line naming
  ``horus sim fetch alibaba``.

Everything else the suite reads is under ``src/horus`` (package data) or committed test and
chart files; ``tests/unit/sim/test_sim_data.py`` fails if code names a path beside the
repository again. Run from a working tree with uncommitted changes, this tests HEAD.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _readme_sim_commands(readme: str) -> list[str]:
    """``horus sim …`` lines of the README's fenced shell blocks (comments stripped)."""
    cmds = []
    for lang, block in re.findall(r"^```(\w*)\n(.*?)^```", readme, flags=re.S | re.M):
        if lang not in ("", "bash", "sh", "console"):
            continue
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line.startswith("horus sim"):
                cmds.append(line)
    return cmds


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout (or no git): nothing to clone")
    dest = tmp_path_factory.mktemp("standalone") / "horus"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(dest)], check=True, timeout=300)
    assert os.listdir(dest.parent) == ["horus"]  # no ../shared (or anything) beside it
    return dest


def _run(clone: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HORUS_DATA_DIR"}
    env["PYTHONPATH"] = str(clone / "src")
    return subprocess.run(
        [sys.executable, *args],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_horus_runs_from_the_clone_with_its_own_data(clone: Path) -> None:
    proc = _run(
        clone,
        "-c",
        "import horus; from horus.sim.datasets import data_dir; print(horus.__file__, data_dir())",
    )
    assert proc.returncode == 0, proc.stderr
    module, data = proc.stdout.split()
    assert Path(module).is_relative_to(clone / "src"), module
    assert Path(data) == clone / "data"


def test_the_data_reading_unit_tests_pass_in_the_clone(clone: Path) -> None:
    proc = _run(clone, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/sim")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"\d+ passed", proc.stdout), proc.stdout[-2000:]


def test_every_readme_sim_command_runs_in_the_clone(clone: Path) -> None:
    found = _readme_sim_commands((clone / "README.md").read_text())
    cmds = [c for c in found if not c.startswith("horus sim fetch")]
    assert cmds, "the README shows no horus sim command"
    for cmd in cmds:
        argv = shlex.split(cmd)
        proc = _run(clone, "-m", "horus.cli", *argv[1:], "--no-progress", timeout=600)
        assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        assert "makespan" in proc.stdout, proc.stdout[-2000:]


def test_the_alibaba_trace_is_asked_for_by_name(clone: Path) -> None:
    proc = _run(clone, "-m", "horus.cli", "sim", "--trace", "alibaba", "--no-progress")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "horus sim fetch alibaba" in lines[0], proc.stderr
