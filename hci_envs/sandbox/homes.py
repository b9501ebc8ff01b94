"""A session's home directory and its snapshots.

The home belongs to the session's agent account (0700). The server restores it at reset from the start
state's template or a snapshot, and captures snapshots of it, always while no process of the agent runs
(reset has ended them; a snapshot stops them for the copy), so the agent cannot swap a file for a symlink
between the server's check and its read. Captured: regular files, directories and symlinks
(copied as links). Named pipes, sockets and devices are left out and listed; a file linked in
from elsewhere (not the agent's) is left out too. Sparse files stay sparse.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path
from types import EllipsisType
from typing import Any

from .accounts import AgentAccount, remove_private_dir
from .watchdog import remove_temporary_dir, temporary_dir
from ..errors import ConfigError, SnapshotError

#: The most a snapshot may hold, in bytes of data (holes of sparse files do not count).
DEFAULT_MAX_SNAPSHOT_BYTES = 2 * 1024**3
#: Snapshot names: what a file name can safely be.
MAX_SNAPSHOT_NAME = 128


class HomeStore:
    """One session's home directory and its named snapshots."""

    def __init__(self, account: AgentAccount | None = None, *,
                 max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES, disk: int | None = None) -> None:
        self.account = account
        self.max_snapshot_bytes = max_snapshot_bytes
        #: The most the home may hold (a tmpfs of that size: hci_envs.sandbox.space), where that can be had.
        self.disk = None
        if account is not None:
            self.path = account.private_dir("hci-envs-home-")
            from .space import bound_folder, unavailable

            if disk is not None and unavailable() is None:
                try:
                    bound_folder(self.path, disk, account.uid, account.gid)
                except BaseException:
                    remove_private_dir(self.path)
                    raise
                self.disk = disk
        else:
            self.path = temporary_dir("hci-envs-home-")
        self._snapshots: dict[str, Path] = {}
        self._snapshot_root: Path | None = None

    # -- reset -------------------------------------------------------------------------------------------
    def restore(self, source: str | Path | None, *, disk: int | None | EllipsisType = ...) -> None:
        """Empty the home and fill it from ``source`` (a template folder or a snapshot), owned by the agent,
        with room for ``disk`` bytes from now on where given (the episode's limit; None: no bound). The agent's
        processes must be stopped (reset ends them first)."""
        _empty(self.path)
        if disk is not ... and disk != self.disk:
            self._resize(disk)
        if source is not None:
            src = Path(source)
            if not src.is_dir():
                raise ConfigError(f"home template {str(src)!r} is not a directory")
            try:
                fill_home(self.path, src)
            except (shutil.Error, OSError) as exc:
                if "No space left" not in str(exc) and getattr(exc, "errno", None) != errno.ENOSPC:
                    raise
                _empty(self.path)
                raise ConfigError(f"home template {str(src)!r} does not fit the session's home, which may hold "
                                  f"{self.disk // 1024**2 if self.disk else '?'} MiB (the disk limit: ask for more "
                                  "with limits={'disk': ...} or a task's start_state.limits)", field="limits") from None
        os.chmod(self.path, 0o700)
        if self.account is not None:
            self.account.chown_tree(self.path)

    def _resize(self, disk: int | None) -> None:
        from .space import bound_folder, resize_folder, unbind_folder, unavailable

        if self.account is None or unavailable() is not None:
            return
        mounted = os.path.ismount(self.path)
        if mounted and disk is not None:
            resize_folder(self.path, disk)  # the home is empty (restore emptied it): any size fits
        elif mounted:  # no bound: the folder itself (a tmpfs cannot be resized to unlimited and back)
            unbind_folder(self.path)
        elif disk is not None:
            bound_folder(self.path, disk, self.account.uid, self.account.gid)
        self.disk = disk

    def fingerprint(self) -> frozenset[tuple[str, int, int]]:
        """Every entry of the home with its size and modification time (has anything changed?)."""
        entries = []
        for directory, dirs, files in os.walk(self.path):
            for name in (*dirs, *files):
                path = os.path.join(directory, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                entries.append((os.path.relpath(path, self.path), st.st_size, st.st_mtime_ns))
        return frozenset(entries)

    # -- snapshots ---------------------------------------------------------------------------------------
    def snapshot(self, name: str) -> dict[str, Any]:
        """Capture the home under ``name``. The caller stops the agent's processes for the duration."""
        check_snapshot_name(name)
        if self._snapshot_root is None:
            self._snapshot_root = temporary_dir("hci-envs-snapshots-")
        target = self._snapshot_root / name
        partial = self._snapshot_root / f".partial-{name}"
        shutil.rmtree(partial, ignore_errors=True)
        copier = _SnapshotCopier(self.path, partial, self.account, self.max_snapshot_bytes)
        try:
            copier.copy()
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        if target.exists():
            shutil.rmtree(target)
        os.replace(partial, target)
        self._snapshots[name] = target
        return {"name": name, "files": copier.files, "bytes": copier.bytes, "skipped": copier.skipped}

    def snapshot_path(self, name: str) -> Path:
        if name not in self._snapshots:
            raise ConfigError(f"no snapshot named {name!r}; known: {', '.join(sorted(self._snapshots)) or 'none'}")
        return self._snapshots[name]

    def names(self) -> list[str]:
        return sorted(self._snapshots)

    def adopt_snapshots(self, other: HomeStore) -> None:
        """Take over ``other``'s snapshots: a session that swaps in a spare desktop (and with it another home)
        keeps the snapshots it has taken."""
        if other is self:
            return
        self._snapshots, other._snapshots = other._snapshots, {}
        self._snapshot_root, other._snapshot_root = other._snapshot_root, None

    def close(self) -> None:
        remove_private_dir(self.path)
        if self._snapshot_root is not None:
            remove_temporary_dir(self._snapshot_root)


def check_snapshot_name(name: object) -> None:
    if not isinstance(name, str) or not name:
        raise ConfigError("a snapshot needs a non-empty name", field="name")
    if len(name) > MAX_SNAPSHOT_NAME:
        raise ConfigError(f"snapshot name too long ({len(name)} characters, at most {MAX_SNAPSHOT_NAME})",
                          field="name")
    if "/" in name or name.startswith(".") or any(ord(c) < 32 or c == "\x7f" for c in name):
        raise ConfigError(f"invalid snapshot name {name!r}: a plain name without \"/\", control characters or a "
                          "leading dot", field="name")


def fill_home(home: Path, source: Path, ignore: Any = None) -> None:
    """Fill the (empty) folder ``home`` with a copy of ``source`` (but what ``ignore`` leaves out, as copytree's):
    holes of sparse files stay holes, symlinks stay links. The home itself is left the agent's alone (0700),
    whatever the source's folder was: copytree gives it the source's mode (0755 for most), which would let every
    other session's agent list and read it."""
    shutil.copytree(source, home, symlinks=True, dirs_exist_ok=True, copy_function=_copy_sparse, ignore=ignore)
    os.chmod(home, 0o700)


def _empty(directory: Path) -> None:
    for child in directory.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _copy_sparse(src: str, dst: str, *, follow_symlinks: bool = True) -> str:
    """Copy a regular file's data (holes stay holes) and its mode and times; never follows a symlink."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", src)
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            _copy_data(fd, out, st.st_size)
            os.fchmod(out, stat.S_IMODE(st.st_mode))
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return dst


def _copy_data(src: int, dst: int, size: int) -> int:
    """Copy the data regions of ``src`` (SEEK_DATA/SEEK_HOLE); returns the bytes of data copied."""
    copied = 0
    offset = 0
    while offset < size:
        try:
            start = os.lseek(src, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                break
            start = offset  # no SEEK_DATA here: copy everything
        try:
            end = os.lseek(src, start, os.SEEK_HOLE)
        except OSError:
            end = size
        position = start
        while position < end:
            n = _copy_range(src, dst, end - position, position)
            if n == 0:
                break
            position += n
        copied += position - start
        offset = end
    os.ftruncate(dst, size)
    return copied


#: Why copy_file_range cannot copy between two files: EXDEV when they are on different filesystems (a home
#: template in an image's layers, the home on a tmpfs), the others where the kernel or filesystem lacks it.
_NO_COPY_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}


def _copy_range(src: int, dst: int, count: int, offset: int) -> int:
    """Copy up to ``count`` bytes at ``offset``: in the kernel where it can (no data through this process),
    else read and written here."""
    if hasattr(os, "copy_file_range"):
        try:
            return os.copy_file_range(src, dst, count, offset, offset)
        except OSError as exc:
            if exc.errno not in _NO_COPY_RANGE:
                raise
    return _pread_write(src, dst, count, offset)


def _pread_write(src: int, dst: int, count: int, offset: int) -> int:
    data = os.pread(src, min(count, 1 << 20), offset)
    os.pwrite(dst, data, offset)
    return len(data)


class _SnapshotCopier:
    def __init__(self, source: Path, target: Path, account: AgentAccount | None, limit: int) -> None:
        self.source, self.target, self.account, self.limit = source, target, account, limit
        self.files = 0
        self.bytes = 0
        self.skipped: list[str] = []

    def copy(self) -> None:
        os.mkdir(self.target, 0o700)
        for directory, dirs, files in os.walk(self.source):
            relative = os.path.relpath(directory, self.source)
            out_dir = self.target if relative == "." else self.target / relative
            for name in list(dirs):
                src = os.path.join(directory, name)
                st = os.lstat(src)
                os.mkdir(out_dir / name, stat.S_IMODE(st.st_mode) | 0o700)
            for name in files:
                self._file(os.path.join(directory, name), out_dir / name)

    def _linked_in(self, st: os.stat_result) -> bool:
        """A hard link to a file of someone else's: the agent may not pass it off as its own."""
        return self.account is not None and st.st_nlink > 1 and st.st_uid != self.account.uid

    def _file(self, src: str, dst: Path) -> None:
        relative = os.path.relpath(src, self.source)
        try:
            st = os.lstat(src)
        except FileNotFoundError:
            return
        kind = stat.S_IFMT(st.st_mode)
        if kind == stat.S_IFLNK:
            os.symlink(os.readlink(src), dst)
            return
        if kind != stat.S_IFREG:
            self.skipped.append(f"{relative} ({_KINDS.get(kind, 'special file')})")
            return
        if self._linked_in(st):
            self.skipped.append(f"{relative} (a hard link to a file that is not the agent's)")
            return
        data = min(st.st_size, st.st_blocks * 512)  # what a sparse file really holds, at most its size
        if self.bytes + data > self.limit:
            raise SnapshotError(
                f"the snapshot would exceed {self.limit} bytes (at {relative}); remove large files or raise "
                "the limit (max_snapshot_bytes)", limit=self.limit)
        try:
            _copy_sparse(src, str(dst))
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise SnapshotError("no space left on the device for the snapshot") from None
            if exc.errno in (errno.ELOOP, errno.EINVAL, errno.ENOENT):
                self.skipped.append(f"{relative} (changed while copied)")
                return
            raise
        self.files += 1
        self.bytes += data


_KINDS = {stat.S_IFIFO: "named pipe", stat.S_IFSOCK: "socket", stat.S_IFCHR: "device", stat.S_IFBLK: "device"}
