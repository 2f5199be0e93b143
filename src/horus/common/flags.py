"""Argument types for numeric command-line flags: finite, in range, named in the error.

Why: ``argparse``'s ``type=float`` accepts ``nan``, ``inf`` and ``1e999``, and ``type=int``
accepts ``-5`` for a count. A NaN that reaches a loop comparing times never compares true —
``horus sim --arrival-scale nan`` would run forever — and a negative count fails far from
the flag that caused it. Each factory here returns a ``type=`` callable that refuses such a
value with :class:`argparse.ArgumentTypeError`; argparse then prints one line naming the flag
(``argument --arrival-scale: must be a finite number > 0, got 'nan'``) and exits with status 2.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["count", "integer", "number", "seconds"]

#: The longest duration a flag may give in seconds (a year): beyond it is a typo, and
#: ``threading.Event.wait`` overflows on values near 1e308.
MAX_SECONDS = 365 * 24 * 3600.0


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def _bounds(lo: float | None, hi: float | None, lo_open: bool) -> str:
    low = (
        f"> {_fmt(lo)}"
        if lo is not None and lo_open
        else f">= {_fmt(lo)}"
        if lo is not None
        else ""
    )
    if lo is not None and hi is not None and not lo_open:
        return f"from {_fmt(lo)} to {_fmt(hi)}"
    if hi is not None:
        return f"{low} and <= {_fmt(hi)}" if low else f"<= {_fmt(hi)}"
    return low


def number(
    lo: float | None = None, hi: float | None = None, *, lo_open: bool = False
) -> Callable[[str], float]:
    """A finite float within ``lo``..``hi`` (``lo`` excluded when ``lo_open``)."""
    what = f"a finite number {_bounds(lo, hi, lo_open)}".rstrip()

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        bad = not math.isfinite(value)
        bad = bad or (lo is not None and (value <= lo if lo_open else value < lo))
        bad = bad or (hi is not None and value > hi)
        if bad:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    parse.__name__ = "number"  # argparse names the type in some messages
    return parse


def integer(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """A whole number within ``lo``..``hi``."""
    what = f"a whole number {_bounds(lo, hi, False)}".rstrip()

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    parse.__name__ = "integer"
    return parse


def count(hi: int = 10**9) -> Callable[[str], int]:
    """A positive whole number (a count of jobs, nodes, GPUs…) up to ``hi``."""
    return integer(1, hi)


def seconds(*, positive: bool = True, hi: float = MAX_SECONDS) -> Callable[[str], float]:
    """A finite duration in seconds: > 0 (or >= 0 with ``positive=False``), at most ``hi``."""
    return number(0.0, hi, lo_open=positive)
