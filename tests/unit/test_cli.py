"""`horus --version`/`--help` work without torch or a cluster, and errors are one clear line."""

from __future__ import annotations

import subprocess
import sys

from horus import __version__
from horus.cli import main


def test_version(capsys) -> None:
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert capsys.readouterr().out.strip() == f"horus {__version__}"


def test_help_lists_roles() -> None:
    proc = subprocess.run([sys.executable, "-m", "horus", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for word in ("dev", "operator", "deviceplugin", "agent"):
        assert word in proc.stdout


def test_help_does_not_import_torch() -> None:
    code = "import sys; from horus.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "False"


def test_unknown_command_is_an_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "horus", "frobnicate"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
