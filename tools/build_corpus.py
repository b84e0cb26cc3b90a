"""Write posbook's shipped text corpus, src/posbook/experiments/data/stdlib-3.11.7.tar.xz: every corpus file of
CPython 3.11.7's standard library (posbook.experiments.corpus.is_corpus_file), in the order load_corpus reads a
folder, and the library's LICENSE.txt. Run it with Python 3.11.7 (the records were trained on its bytes):

    python tools/build_corpus.py

The archive is deterministic (no dates, owners or modes), so writing it twice gives the same file.
"""

from __future__ import annotations

import io
import platform
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from posbook.experiments.corpus import SHIPPED_CORPUS, folder_sources, stdlib_root  # noqa: E402

VERSION = "3.11.7"


def member(name: str, data: bytes) -> tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    return info, io.BytesIO(data)


def main() -> int:
    if platform.python_version() != VERSION:
        raise SystemExit(f"run with Python {VERSION} (the records' corpus), not {platform.python_version()}")
    root = stdlib_root()
    SHIPPED_CORPUS.parent.mkdir(parents=True, exist_ok=True)
    files = list(folder_sources(root))
    with tarfile.open(SHIPPED_CORPUS, "w:xz", format=tarfile.PAX_FORMAT, preset=9) as archive:
        archive.addfile(*member("LICENSE.txt", (root / "LICENSE.txt").read_bytes()))
        for rel, data in files:
            archive.addfile(*member(rel, data))
    print(f"{SHIPPED_CORPUS}: {len(files)} files, {sum(len(d) for _, d in files):,} bytes of source, "
          f"{SHIPPED_CORPUS.stat().st_size:,} bytes as tar.xz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
