"""A session's home (hci_envs.sandbox.homes): restored from a template on another filesystem, as an image's
template (in its layers) is restored into a home on a tmpfs: every file arrives whole, holes stay holes."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from hci_envs.sandbox.homes import HomeStore

pytestmark = pytest.mark.fake


def test_a_template_on_another_filesystem_is_copied_whole(tmp_path):
    template = Path(tempfile.mkdtemp(prefix="hci-envs-template-", dir="/dev/shm"))
    store = HomeStore()
    try:
        assert os.stat(template).st_dev != os.stat(store.path).st_dev, \
            "the test needs /dev/shm and the temporary folder on two filesystems"
        (template / ".config").mkdir()
        (template / ".config" / "mimeapps.list").write_text("[Default Applications]\n")
        script = template / "run.sh"
        script.write_text("#!/bin/sh\necho hi\n")
        script.chmod(0o750)
        with open(template / "sparse.bin", "wb") as f:  # 8 MiB, of which 4 KiB of data at the end
            f.seek(8 * 1024 * 1024 - 4096)
            f.write(b"x" * 4096)
        store.restore(template)
        home = Path(store.path)
        assert (home / ".config" / "mimeapps.list").read_text() == "[Default Applications]\n"
        assert (home / "run.sh").read_bytes() == script.read_bytes() and (home / "run.sh").stat().st_mode & 0o777 == 0o750
        copied = home / "sparse.bin"
        assert copied.stat().st_size == 8 * 1024 * 1024 and copied.read_bytes()[-4096:] == b"x" * 4096
        assert copied.stat().st_blocks * 512 < 1024 * 1024  # the hole stayed a hole
    finally:
        shutil.rmtree(template, ignore_errors=True)
        shutil.rmtree(store.path, ignore_errors=True)


def test_a_home_restored_from_an_open_template_is_its_owners_alone(tmp_path):
    """A template folder is usually 0755 (an image's, a task's): the home restored from it stays 0700, or every
    other session's agent could list and read it (a loaded test run found two such homes)."""
    template = tmp_path / "template"
    (template / "docs").mkdir(parents=True)
    (template / "docs" / "plan.txt").write_text("secret plan\n")
    template.chmod(0o755)
    store = HomeStore()
    try:
        store.restore(template)
        assert Path(store.path).stat().st_mode & 0o777 == 0o700
        assert (Path(store.path) / "docs" / "plan.txt").read_text() == "secret plan\n"
    finally:
        shutil.rmtree(store.path, ignore_errors=True)
