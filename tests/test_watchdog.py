"""Temporary folders (hci_envs.sandbox.watchdog): what ``temporary_dir`` made is removed whole, and nothing else
is, whatever a caller passes (a removal that detaches mounts and deletes everything must never reach a folder
that is not a session's own, a checkout say)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hci_envs.sandbox.watchdog import remove_temporary_dir, temporary_dir

pytestmark = pytest.mark.fake


def test_a_temporary_folder_is_removed_whole(tmp_path: Path):
    made = temporary_dir("test-", parent=tmp_path)
    (made / "inside").mkdir()
    (made / "inside" / "file").write_text("x")
    remove_temporary_dir(made)
    assert not made.exists()


def test_a_folder_it_did_not_make_is_refused_and_left_whole(tmp_path: Path, caplog):
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    (checkout / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    for path in (checkout, str(checkout), checkout / ".." / "checkout", tmp_path):
        remove_temporary_dir(path)  # type: ignore[arg-type]
    assert (checkout / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert "refused to remove" in caplog.text
    made = temporary_dir("test-", parent=tmp_path)
    remove_temporary_dir(made)
    made.mkdir()  # a folder of that name made again, by someone else: no longer the one it made
    remove_temporary_dir(made)
    assert made.is_dir()
