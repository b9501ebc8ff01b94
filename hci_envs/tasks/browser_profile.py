"""A chromium profile as a checker reads it: bookmarks (the ``Bookmarks`` JSON file), visited pages and finished
downloads (the ``History`` SQLite database). The files are the agent's: they are read with the checkers'
limits (see :func:`hci_envs.tasks.scoring.read_agent_file`) and the database is opened from a private copy,
never in place.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: chromium's download states (history's downloads.state): 1 is COMPLETE.
DOWNLOAD_COMPLETE = 1


@dataclass
class Profile:
    bookmarks: list[dict[str, str]] = field(default_factory=list)   # {name, url, folder}
    visits: list[dict[str, str]] = field(default_factory=list)      # {url, title}
    downloads: list[dict[str, Any]] = field(default_factory=list)   # {path, state}


def read_profile(folder: Path, read: Callable[[Path], bytes]) -> Profile:
    """The ``Default`` profile of a chromium user-data folder; ``read`` reads one agent file (or raises
    OSError). Missing files are an empty part of the profile (a browser that saved nothing yet)."""
    profile = Profile()
    default = folder / "Default"
    try:
        data = json.loads(read(default / "Bookmarks").decode("utf-8"))
    except (OSError, ValueError):
        data = {}
    roots = data.get("roots") if isinstance(data, dict) else None
    if isinstance(roots, dict):
        for root_name, folder_name in (("bookmark_bar", "bookmark_bar"), ("other", "other"), ("synced", "other")):
            for node in _walk(roots.get(root_name)):
                if node.get("type") == "url":
                    profile.bookmarks.append({"name": str(node.get("name", "")), "url": str(node.get("url", "")),
                                              "folder": folder_name})
    with tempfile.TemporaryDirectory(prefix="hci-envs-history-") as private:
        copy = Path(private) / "History"
        try:
            copy.write_bytes(read(default / "History"))
        except OSError:
            return profile
        for suffix in ("-wal", "-journal"):  # a write-ahead log the browser left holds the newest rows
            try:
                (Path(private) / f"History{suffix}").write_bytes(read(default / f"History{suffix}"))
            except OSError:
                pass
        try:
            with sqlite3.connect(f"file:{copy}?mode=ro", uri=True) as db:
                profile.visits = [{"url": url or "", "title": title or ""}
                                  for url, title in db.execute("SELECT url, title FROM urls WHERE visit_count > 0")]
                profile.downloads = [{"path": path or "", "state": state}
                                     for path, state in db.execute("SELECT target_path, state FROM downloads")]
        except sqlite3.DatabaseError:
            pass  # not a database, or one the browser was still writing: nothing read from it
    return profile


def _walk(node: Any, depth: int = 0) -> Iterator[dict[str, Any]]:
    if not isinstance(node, dict) or depth > 64:
        return
    yield node
    for child in node.get("children", []) if isinstance(node.get("children"), list) else []:
        yield from _walk(child, depth + 1)
