"""The home OSWorld's tasks expect to start from, as a home template: the folders of an Ubuntu user's home, and
LibreOffice as an installation that has been started once (its default profile, where OSWorld's getters read its
settings; no first-run dialog or tip to catch the first keys a task's solution types). What else OSWorld's
machine has and ours has not yet is listed in the README (OSWorld, unchanged)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..tasks.osworld import FOLDERS, home_files


def make_home_template(parent: str | Path | None = None) -> Path:
    """Write the template into a new folder (under ``parent``, else the system's temporary folder); returns it.
    Readable by all: the server copies it into each session's home."""
    root = Path(tempfile.mkdtemp(prefix="hci-envs-osworld-home-", dir=parent))
    root.chmod(0o755)
    for name in FOLDERS:
        (root / name).mkdir()
    for relative, content in home_files().items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root
