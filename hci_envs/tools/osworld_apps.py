"""The programs OSWorld's tasks start by name, as the agent finds them: ``google-chrome`` (chromium with its
DevTools relayed, :mod:`.osworld_chrome`), ``vlc`` (VLC with its HTTP interface behind a password of its own,
:mod:`.osworld_vlc`) and ``gnome-terminal`` (xterm as GNOME's terminal, :mod:`.osworld_terminal`), first on the
PATH of everything the OSWorld side starts (:func:`with_osworld_apps`)."""

from __future__ import annotations

import atexit
import os
from pathlib import Path

from ..sandbox.watchdog import remove_temporary_dir, temporary_dir

_bin: Path | None = None
#: A folder where an image has written the programs already (write_programs): a container's /tmp is mounted
#: noexec, so the programs cannot be made there.
PREPARED_BIN_ENV = "HCI_ENVS_OSWORLD_BIN"


def write_programs(folder: str | Path) -> Path:
    """Write the programs' files into ``folder`` (made if missing), readable and runnable by all."""
    from . import osworld_chrome, osworld_terminal, osworld_vlc

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in {**osworld_chrome.shims(), **osworld_vlc.shims(), **osworld_terminal.shims()}.items():
        path = folder / name
        path.write_text(text)
        path.chmod(0o755)
    for name, target in osworld_terminal.links().items():
        (folder / name).unlink(missing_ok=True)
        (folder / name).symlink_to(target)
    folder.chmod(0o755)
    return folder


def agent_bin() -> Path:
    """The folder of the programs' files: HCI_ENVS_OSWORLD_BIN where an image prepared it, else a folder of this
    process, readable by agents and written by nobody else, made once per process and removed at its exit."""
    global _bin
    prepared = os.environ.get(PREPARED_BIN_ENV)
    if prepared:
        return Path(prepared)
    if _bin is None or not _bin.is_dir():
        folder = write_programs(str(temporary_dir("hci-envs-osworld-bin-")))
        atexit.register(remove_temporary_dir, folder)
        _bin = folder
    return _bin


def with_osworld_apps(env: dict[str, str]) -> dict[str, str]:
    """``env`` (the agent's) with :func:`agent_bin` first on its PATH."""
    return {**env, "PATH": f"{agent_bin()}{os.pathsep}{env.get('PATH', '')}"}
