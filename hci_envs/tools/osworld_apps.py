"""The programs OSWorld's tasks start by name, as the agent finds them: ``google-chrome`` (chromium with its
DevTools relayed, :mod:`.osworld_chrome`) and ``vlc`` (VLC with its HTTP interface behind a password of its own,
:mod:`.osworld_vlc`), first on the PATH of everything the OSWorld side starts (:func:`with_osworld_apps`)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_bin: Path | None = None


def agent_bin() -> Path:
    """A folder of this process, readable by agents and written by nobody else, holding the programs' files;
    made once per process, removed at its exit."""
    from . import osworld_chrome, osworld_vlc

    global _bin
    if _bin is None or not _bin.is_dir():
        folder = Path(tempfile.mkdtemp(prefix="hci-envs-osworld-bin-"))
        for name, text in {**osworld_chrome.shims(), **osworld_vlc.shims()}.items():
            path = folder / name
            path.write_text(text)
            path.chmod(0o755)
        folder.chmod(0o755)
        atexit.register(shutil.rmtree, folder, True)
        _bin = folder
    return _bin


def with_osworld_apps(env: dict[str, str]) -> dict[str, str]:
    """``env`` (the agent's) with :func:`agent_bin` first on its PATH."""
    return {**env, "PATH": f"{agent_bin()}{os.pathsep}{env.get('PATH', '')}"}
