"""Shared pieces of the adversarial corpus (issue 20): hostile files, flags, requests and RPCs.

Every case runs through the real entry point (``horus.cli.main``, the extender's HTTP server,
the device plugin's gRPC server, the agent's cycle) and asserts three things: a clear error
that names the field or file and the fix, nothing lost (inputs untouched, nothing written,
other objects still served) and the process alive (the next good request still works).

The helper modules of the extender and device-plugin tests are shared, not copied.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

_UNIT = Path(__file__).resolve().parents[1]
for _helpers in ("operator", "deviceplugin", "agent"):
    if str(_UNIT / _helpers) not in sys.path:
        sys.path.insert(0, str(_UNIT / _helpers))


class CliResult:
    def __init__(self, rc: int, out: str, err: str) -> None:
        self.rc, self.out, self.err = rc, out, err

    def refused(self, *words: str) -> None:
        """Exit 2 with one error line (argparse may print its usage first) naming ``words``,
        and no traceback."""
        assert self.rc == 2, (self.rc, self.out, self.err)
        assert "Traceback" not in self.err, self.err
        lines = [ln for ln in self.err.splitlines() if "error:" in ln]
        assert len(lines) == 1, self.err
        line = lines[0]
        assert self.err.rstrip().endswith(line), self.err  # the error is the last line
        for word in words:
            assert word in line, f"{word!r} not in {line!r}"


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """Run ``horus <argv>`` in this process; returns its exit status and output."""
    from horus.cli import main

    def run(argv: Sequence[str]) -> CliResult:
        capsys.readouterr()
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse refusing a flag
            rc = int(exc.code or 0)
        out, err = capsys.readouterr()
        return CliResult(rc, out, err)

    return run
