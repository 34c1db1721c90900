"""Gather the real-document corpus into its cache from fetched mirrors (bench/corpus/README.md).

For every entry of every manifest (``bench/corpus/*.json``) whose file is missing from the
cache, copy ``commit:path`` out of a mirror of ``repo`` found under ``--mirrors`` (a bare
git directory ``<owner>+<name>/…``, as the session's fetch tool leaves it), check its
sha256 and write it to the cache. What it cannot find, or finds different, it skips and
says so; it downloads nothing.

    .venv/bin/python bench/corpus_fetch.py
    .venv/bin/python bench/corpus_fetch.py --cache /tmp/corpus --mirrors /srv/mirrors
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

MANIFESTS = Path(__file__).resolve().parent / "corpus"
DEFAULT_CACHE = Path(os.environ.get("BLOCKBATCH_CORPUS", "/work/corpus"))
DEFAULT_MIRRORS = Path("/work/.mirror")


def documents(manifests: Path = MANIFESTS) -> list[dict[str, Any]]:
    """Every manifest's entries, in file name order (pdf.json, formats.json, ...)."""
    out: list[dict[str, Any]] = []
    for path in sorted(manifests.glob("*.json")):
        out.extend({**e, "manifest": path.name} for e in json.loads(path.read_text())["documents"])
    return out


def git_dirs(mirrors: Path, repo: str) -> list[Path]:
    """Git directories under ``mirrors`` holding a copy of ``repo`` (owner/name)."""
    base = mirrors / repo.replace("/", "+")
    if not base.is_dir():
        return []
    found = [p.parent for p in base.rglob("HEAD") if (p.parent / "objects").is_dir()]
    return sorted(found)


def read_blob(git_dir: Path, commit: str, path: str) -> bytes | None:
    done = subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
        capture_output=True,
        check=False,
    )
    return done.stdout if done.returncode == 0 else None


def gather(cache: Path, mirrors: Path) -> tuple[int, int, list[str]]:
    """(files already there, files copied, what was skipped and why)."""
    present = copied = 0
    skipped: list[str] = []
    for doc in documents():
        target = cache / doc["file"]
        if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == doc["sha256"]:
            present += 1
            continue
        data = None
        for git_dir in git_dirs(mirrors, doc["repo"]):
            data = read_blob(git_dir, doc["commit"], doc["path"])
            if data is not None:
                break
        if data is None:
            skipped.append(
                f"{doc['file']}: no mirror of {doc['repo']} at {doc['commit'][:10]} holds "
                f"{doc['path']} (fetch github:{doc['repo']} first)"
            )
            continue
        if hashlib.sha256(data).hexdigest() != doc["sha256"]:
            skipped.append(f"{doc['file']}: {doc['repo']}:{doc['path']} differs from its sha256")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        copied += 1
    return present, copied, skipped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    args = parser.parse_args()
    present, copied, skipped = gather(args.cache, args.mirrors)
    print(f"corpus in {args.cache}: {present} present, {copied} copied, {len(skipped)} skipped")
    for line in skipped:
        print(f"  skipped {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
