"""The build context as COPY sees it: ``.dockerignore``, a source's files, their content key,
and copying them into a stage's root the way docker does.

The content key is what makes an unchanged image cost only the time to hash its context:
it covers exactly what COPY would copy (names, modes, bytes, link targets), so a change to an
ignored file, or to a file no COPY names, leaves the image's cache entry valid.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
from pathlib import Path

from horus.common.errors import ValidationError
from horus.devcluster.layers import file_digest


class Ignore:
    """The ``.dockerignore`` patterns of a build context (``**`` and ``!`` supported)."""

    def __init__(self, context: Path) -> None:
        self.rules: list[tuple[bool, str]] = []
        path = context / ".dockerignore"
        if path.is_file():
            for raw in path.read_text().splitlines():
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                negate = line.startswith("!")
                pattern = line.lstrip("!").strip("/")
                self.rules.append((negate, pattern))

    def ignored(self, rel: str) -> bool:
        out = False
        for negate, pattern in self.rules:
            if self._match(rel, pattern):
                out = not negate
        return out

    @staticmethod
    def _match(rel: str, pattern: str) -> bool:
        parts = rel.split("/")
        # a pattern matches the path or any of its parent folders
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatchcase(prefix, pattern):
                return True
            if pattern.startswith("**/") and any(
                fnmatch.fnmatchcase("/".join(parts[j:i]), pattern[3:]) for j in range(i)
            ):
                return True
        return False


def walk_sources(context: Path, source: str, ignore: Ignore, where: str) -> list[Path]:
    """Files and folders of one COPY source, relative to the context, without ignored ones."""
    base = (context / source).resolve()
    if context.resolve() not in (base, *base.parents):
        raise ValidationError(f"{where}: COPY source {source!r} is outside the build context")
    if not base.exists():
        raise ValidationError(f"{where}: COPY source {source!r} does not exist in {context}")
    if base.is_file() or base.is_symlink():
        return [base]
    out = [base]
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        here = Path(dirpath)
        keep = []
        for d in dirnames:
            if not ignore.ignored(str((here / d).relative_to(context.resolve()))):
                keep.append(d)
                out.append(here / d)
        dirnames[:] = keep
        for f in sorted(filenames):
            p = here / f
            if not ignore.ignored(str(p.relative_to(context.resolve()))):
                out.append(p)
    return out


def content_key(context: Path, sources: list[str], ignore: Ignore, where: str) -> str:
    """A digest of what COPY would copy: names, modes and bytes."""
    h = hashlib.sha256()
    for source in sources:
        root = (context / source).resolve()
        for p in walk_sources(context, source, ignore, where):
            st = p.lstat()
            rel = str(p.relative_to(root.parent))
            h.update(f"{rel}\0{st.st_mode:o}\0".encode())
            if p.is_symlink():
                h.update(os.readlink(p).encode())
            elif p.is_file():
                h.update(file_digest(p).encode())
    return h.hexdigest()


def tree(root: Path) -> list[Path]:
    """Every folder and file under ``root``, sorted within each folder."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        out += [Path(dirpath) / d for d in dirnames]
        out += [Path(dirpath) / f for f in sorted(filenames)]
    return out


def copy_entries(entries: list[Path], src_root: Path, target: Path, as_dir: bool) -> None:
    """Copy like docker's COPY: a folder's contents into ``target``, a file to ``target`` (or
    into it when it is a folder), owned by root, modes and mtimes kept."""
    if not src_root.is_dir() or src_root.is_symlink():
        dest = target / src_root.name if (as_dir or target.is_dir()) else target
        dest.parent.mkdir(parents=True, exist_ok=True)
        _copy_one(src_root, dest)
        return
    target.mkdir(parents=True, exist_ok=True)
    for p in entries[1:]:
        _copy_one(p, target / p.relative_to(src_root))


def _copy_one(src: Path, dest: Path) -> None:
    if src.is_dir() and not src.is_symlink():
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copystat(src, dest)
    else:
        if dest.is_symlink() or dest.exists():
            dest.unlink()  # a new inode, so the layer sees the change
        if src.is_symlink():
            os.symlink(os.readlink(src), dest)
        else:
            shutil.copy2(src, dest)
    os.lchown(dest, 0, 0)
