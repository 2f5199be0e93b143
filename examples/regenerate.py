"""Regenerate the example graph profiles and the inline features in the DLJob examples.

The features in ``examples/*.yaml`` are never typed by hand: they are what ``horus profile``
prints for the model and batch size each example names. Run this after the feature extractor
or the profile schema changes (it needs the ``[profile]`` extra, i.e. torch)::

    .venv/bin/python examples/regenerate.py

It writes ``examples/profiles/<name>.yaml`` with ``horus profile``, then replaces the text
between ``# BEGIN horus profile <name>`` and ``# END horus profile`` in every manifest with
that profile (indented to the marker; ``apiVersion``/``kind`` dropped where inlined under
``spec.profile``, kept whole inside a ConfigMap). tests/unit/api checks that they agree.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HORUS = [sys.executable, "-m", "horus"]

# profile file name -> `horus profile` arguments
PROFILES: dict[str, list[str]] = {
    "resnet50-bs64": ["--zoo", "resnet50", "--batch-size", "64"],
    "bert-base-bs16": ["--zoo", "bert-base", "--batch-size", "16"],
    "lstm-lm-bs20": ["--zoo", "lstm-lm", "--batch-size", "20"],
    "mobilenetv2-cifar-bs128": ["--zoo", "mobilenetv2-cifar", "--batch-size", "128"],
    "vgg16-bs256": ["--zoo", "vgg16", "--batch-size", "256"],
}

BLOCK = re.compile(
    r"^(?P<indent>[ ]*)# BEGIN horus profile (?P<name>[-\w.]+)(?P<mode> whole)?\n"
    r".*?"
    r"^(?P=indent)# END horus profile\n",
    re.MULTILINE | re.DOTALL,
)


def profile_path(name: str) -> Path:
    return HERE / "profiles" / f"{name}.yaml"


def render(name: str, indent: str, whole: bool) -> str:
    lines = profile_path(name).read_text().splitlines()
    if not whole:
        lines = [ln for ln in lines if not ln.startswith(("apiVersion:", "kind:"))]
    body = "".join(f"{indent}{ln}\n" for ln in lines)
    mode = " whole" if whole else ""
    return f"{indent}# BEGIN horus profile {name}{mode}\n{body}{indent}# END horus profile\n"


def fill(text: str) -> str:
    def sub(m: re.Match[str]) -> str:
        return render(m["name"], m["indent"], bool(m["mode"]))

    return BLOCK.sub(sub, text)


def main() -> int:
    (HERE / "profiles").mkdir(exist_ok=True)
    for name, args in PROFILES.items():
        print(f"horus profile {' '.join(args)} -> profiles/{name}.yaml", flush=True)
        subprocess.run([*HORUS, "profile", *args, "-o", str(profile_path(name))], check=True)
    for manifest in sorted(HERE.glob("*.yaml")):
        old = manifest.read_text()
        new = fill(old)
        if new != old:
            manifest.write_text(new)
            print(f"updated {manifest.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
