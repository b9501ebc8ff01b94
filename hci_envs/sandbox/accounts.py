"""Agent accounts: the operating-system users that the agent side of each session runs as.

Everything an agent can start (its apps, the window manager, ``bash``, ``python``, the CodeAct worker, and
whatever they start) runs as an unprivileged account of its own, one per live session, taken from a pool of
accounts that ``python3 -m hci_envs install`` and the images create, each with its own uid, private group and
name (``hci-agent-N``, so that ``id``, ``ps -u``, ``userdel`` and name caches tell them apart). What an app
shows of its user (a shell prompt, a file's owner) is ``hci-agent`` in every session, so that episodes,
recordings and replays look alike whichever account runs them: a root server starts each agent program in a
mount namespace of its own (see :func:`agent_start`) where ``/etc/passwd`` and ``/etc/group`` are a view in
which the account's own entries bear that name. The images, whose server cannot make mount namespaces, name
all their accounts ``hci-agent`` instead (their account files are the image's, with no one to administer
them). The boundary is
the kernel's: another uid cannot read the server's secrets (``/proc/PID/environ``, 0600 files), signal or
trace the server, read another session's home, runtime directory or X cookie, or outlive its session, since
ending a session kills every process of its uid.

Switching users needs privileges: the server runs as root, or (in the images) as its own user with exactly
the capabilities below as ambient capabilities. Children are started through ``setpriv`` (util-linux), which
sets the uid and gid, clears the supplementary groups and every inheritable and ambient capability, and sets
``no_new_privs``, so no setuid program or file capability can lift an agent process back up.

A server without those privileges, or without accounts, runs with ``isolation: none`` and says so.

Leases are machine-wide: one lock file per uid under ``/run/hci-envs/accounts`` (``HCI_ENVS_RUN_DIR``),
held with ``flock`` by the server that uses the account and by its watchdog, so that two servers never share
an account and an account is not handed out again before the watchdog of a killed server has ended its
processes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import pwd
import re
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import CapacityError, ConfigError
from .watchdog import WATCHDOG, remove_temporary_dir, temporary_dir
from .watchdog_process import remove_folder

log = logging.getLogger(__name__)

#: The name an agent's programs see as their user's; the accounts themselves are ACCOUNT_NAME-N (or, in the
#: images and on machines set up before, ACCOUNT_NAME itself).
ACCOUNT_NAME = "hci-agent"
_ACCOUNT = re.compile(rf"{re.escape(ACCOUNT_NAME)}(-\d+)?")

#: The capabilities the server needs to run agents as other users, and why (the Docker provider keeps
#: exactly these; README "Containment" lists them too).
CAPABILITIES: dict[str, tuple[int, str]] = {
    "CAP_SETUID": (7, "start the agent's processes as its own uid"),
    "CAP_SETGID": (6, "give them the account's group and no supplementary groups"),
    "CAP_KILL": (5, "stop and interrupt the agent's processes (reset, timeouts, session end)"),
    "CAP_CHOWN": (0, "hand the restored home directory to the agent's uid"),
    "CAP_DAC_OVERRIDE": (1, "read and remove the agent's files whatever their modes (snapshots, checkers, reset)"),
    "CAP_FOWNER": (3, "set modes and times on the agent's files, remove them from sticky directories"),
}

#: World-writable places where an agent can leave files outside its home; swept at reset and session end.
#: /dev/mqueue holds POSIX message queues (mounted here where it is not, see _mount_mqueue).
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock", "/run/shm", "/tmp/.X11-unix",
                   "/tmp/.ICE-unix", "/tmp/.font-unix", "/tmp/.XIM-unix", "/tmp/.Test-unix")

#: The PATH agent processes get: the system's programs, never the server's virtual environment.
AGENT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def run_dir() -> Path:
    return Path(os.environ.get("HCI_ENVS_RUN_DIR", "/run/hci-envs"))


def effective_capabilities() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def missing_capabilities() -> list[str]:
    have = effective_capabilities()
    return [name for name, (bit, _why) in CAPABILITIES.items() if not have & (1 << bit)]


@dataclass(frozen=True)
class AgentAccount:
    """One agent account: its name, uid and gid."""

    name: str
    uid: int
    gid: int

    @property
    def label(self) -> str:
        return f"{self.name} (uid {self.uid})"

    def command(self, argv: Sequence[str], *, max_processes: int = 0) -> list[str]:
        """``argv`` run as this account, with no capabilities, no supplementary groups and no_new_privs."""
        prefix: list[str] = []
        if max_processes > 0:
            # RLIMIT_NPROC counts the processes of the real uid: a per-session bound, since uids are per session
            prefix = [_program("prlimit"), f"--nproc={max_processes}:{max_processes}"]
        return [
            *prefix, _program("setpriv"), "--reuid", str(self.uid), "--regid", str(self.gid), "--clear-groups",
            "--inh-caps=-all", "--ambient-caps=-all", "--no-new-privs", "--", *argv,
        ]

    def live_pids(self) -> list[int]:
        """Processes running as this uid that can still run code of their own: zombies, exiting processes and
        processes with a SIGKILL pending are left out (none of them returns to user space again)."""
        return [pid for pid, uid, state in _processes() if uid == self.uid and state not in "ZX" and not _doomed(pid)]

    def signal_all(self, sig: str) -> None:
        """Send ``sig`` (a name: KILL, STOP, CONT) to every process of this uid at once: kill(-1) from a process
        running as the uid reaches exactly its processes, and the kernel walks them under the lock that
        fork takes, so nothing forked in between escapes."""
        try:
            subprocess.run(self.command([_program("kill"), f"-{sig}", "--", "-1"]), stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("could not signal the processes of %s: %s", self.label, exc)

    def kill_all(self, timeout: float = 5.0) -> list[int]:
        """End every process of this uid; returns the pids still alive after ``timeout`` (normally none)."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.live_pids()
            if not left:
                return []
            if time.monotonic() > deadline:
                log.warning("processes of %s survived SIGKILL: %s", self.label, left)
                return left
            self.signal_all("KILL")
            time.sleep(0.002)

    @contextlib.contextmanager
    def frozen(self, timeout: float = 2.0) -> Iterator[None]:
        """Stop every process of this uid for the duration (SIGSTOP, which no process can catch), so that the
        server can read the agent's files without racing it: no symlink swapped in between a check and a
        read, nothing tracing the checker."""
        self.signal_all("STOP")
        deadline = time.monotonic() + timeout
        while any(state not in "TtZX" for pid, uid, state in _processes() if uid == self.uid):
            if time.monotonic() > deadline:
                break
            time.sleep(0.002)
        try:
            yield
        finally:
            self.signal_all("CONT")

    def sweep_files(self, keep: Sequence[Path] = ()) -> int:
        """Remove what this uid left in shared writable places (/tmp, /dev/shm, ...) and the folders made for it
        (:meth:`private_dir`) but ``keep`` (the session's own home and runtime directory), and its System V IPC
        objects. Returns how many entries went."""
        kept = {os.path.realpath(k) for k in keep}
        _mount_mqueue()
        entries = [entry for place in dict.fromkeys(os.path.realpath(p) for p in SHARED_WRITABLE)
                   for entry in _scan(place)]
        removed = self._sweep_private_dirs(kept, [e.path for e in entries if e.name.startswith(PRIVATE_DIR_PREFIXES)])
        for entry in entries:  # (a private folder is root's: only its inner folder is the uid's)
            try:
                if entry.stat(follow_symlinks=False).st_uid != self.uid or os.path.realpath(entry.path) in kept:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
                removed += 1
            except OSError:
                continue
        if _owns_ipc(self.uid):
            subprocess.run(self.command([_program("ipcrm"), "--all"]), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=10, check=False)
        return removed

    def chown_tree(self, root: Path) -> None:
        """Give ``root`` and everything under it to this account (symlinks themselves, not their targets)."""
        os.lchown(root, self.uid, self.gid)
        for directory, dirs, files in os.walk(root):
            for name in (*dirs, *files):
                os.lchown(os.path.join(directory, name), self.uid, self.gid)

    def private_dir(self, prefix: str) -> Path:
        """A new directory (0700) owned by this account, in a folder of this process's own (0711: it may be
        passed through, not listed or written) in the system's temporary directory. The account can use the
        directory but not rename it away or put a symlink in its place: in a sticky /tmp its own directory
        would be its to move, and the server, which empties and fills it as itself, would follow the
        symlink. :func:`remove_private_dir` removes both."""
        parent = temporary_dir(prefix)
        parent.chmod(0o711)
        _record_private_dir(self.uid, parent)
        path = parent / PRIVATE_DIR_NAME
        path.mkdir(mode=0o700)
        os.chown(path, self.uid, self.gid)
        return path

    def _sweep_private_dirs(self, kept: set[str], unrecorded: list[str]) -> int:
        """Remove the folders :meth:`private_dir` made for this account that are not ``kept``: left by an earlier
        holder of the account (a server killed with its watchdog, a close cut short), wherever that holder's
        temporary directory was (the machine-wide record), or found in the shared places (``unrecorded``). A home
        or runtime folder is a tmpfs mount, which only ``remove_folder`` detaches: left mounted, the account's
        next session could enter it."""
        removed = 0
        with _RECORD_LOCK:
            record = _private_dir_record(self.uid)
            try:
                listed = record.read_text(encoding="utf-8").splitlines()
            except OSError:
                listed = []
            still = []
            for folder in dict.fromkeys([*filter(None, listed), *unrecorded]):
                own = os.path.join(folder, PRIVATE_DIR_NAME)
                try:
                    if os.lstat(own).st_uid != self.uid:
                        continue
                except OSError:
                    continue  # gone, or not a folder of this kind
                if os.path.realpath(own) in kept:
                    still.append(folder)
                elif remove_folder(folder):
                    removed += 1
                else:
                    log.warning("could not remove %s, left by an earlier session of %s", folder, self.label)
                    still.append(folder)
            _write_record(record, still)
        return removed


#: The account's own directory inside the folder :meth:`AgentAccount.private_dir` makes, and the prefixes of
#: those folders (a home, a runtime folder).
PRIVATE_DIR_NAME = "own"
PRIVATE_DIR_PREFIXES = ("hci-envs-home-", "hci-envs-agent-")


#: The folders private_dir made for each account, one file per uid beside the leases (root's alone to read and
#: write), so that the sweep finds them whatever temporary directory (TMPDIR) their server had.
_RECORD_LOCK = threading.Lock()


def _private_dir_record(uid: int) -> Path:
    return run_dir() / "accounts" / f"{uid}.folders"


def _record_private_dir(uid: int, folder: Path) -> None:
    with _RECORD_LOCK:
        try:
            with open(_private_dir_record(uid), "a", encoding="utf-8") as f:
                f.write(f"{folder}\n")
        except OSError as exc:  # no lease directory: the sweep still looks in the shared places
            log.info("the folder %s is not recorded for uid %d: %s", folder, uid, exc)


def _write_record(record: Path, folders: list[str]) -> None:
    try:
        if folders:
            fresh = record.with_name(record.name + ".new")
            fresh.write_text("".join(f"{f}\n" for f in folders), encoding="utf-8")
            os.replace(fresh, record)
        else:
            record.unlink(missing_ok=True)
    except OSError as exc:
        log.info("the record %s could not be written: %s", record, exc)


def _scan(place: str) -> list[os.DirEntry[str]]:
    try:
        return list(os.scandir(place))
    except OSError:
        return []


def remove_private_dir(path: Path) -> None:
    """Remove a directory :meth:`AgentAccount.private_dir` made, with the folder around it."""
    remove_temporary_dir(path.parent if path.name == PRIVATE_DIR_NAME else path)


_PF_EXITING = 0x4  # include/linux/sched.h
_SIGKILL_BIT = 1 << (9 - 1)


def _doomed(pid: int) -> bool:
    """Whether a process can never run code of its own again: it is exiting, or SIGKILL is pending for it.
    A process killed on a busy machine stays runnable until it is scheduled to die (and a big one, chromium,
    takes tens of milliseconds to free its memory): waiting for it to be gone made a reset wait for that."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(1024)
        flags = int(stat[stat.rindex(b")") + 2:].split()[6])
        if flags & _PF_EXITING:
            return True
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read(4096)
    except (OSError, ValueError, IndexError):
        return True  # gone
    for line in status.split(b"\n"):
        if line.startswith((b"SigPnd:", b"ShdPnd:")) and int(line.split()[1], 16) & _SIGKILL_BIT:
            return True
    return False


def _processes() -> Iterator[tuple[int, int, str]]:
    """(pid, real uid, state letter) of every process."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as f:
                data = f.read(2048)
        except OSError:
            continue
        state = uid = None
        for line in data.split(b"\n"):
            if line.startswith(b"State:"):
                state = line.split()[1].decode()
            elif line.startswith(b"Uid:"):
                uid = int(line.split()[1])
                break
        if uid is not None:
            yield int(entry.name), uid, state or "?"


_MQUEUE_TRIED = False


def _mount_mqueue() -> None:
    """POSIX message queues outlive their processes and can only be listed (and removed) through an mqueue
    file system; containers have one at /dev/mqueue, a host may not. A root server mounts it, once."""
    global _MQUEUE_TRIED
    if _MQUEUE_TRIED:
        return
    _MQUEUE_TRIED = True
    if os.geteuid() != 0 or os.path.ismount("/dev/mqueue"):
        return
    try:
        os.makedirs("/dev/mqueue", mode=0o1777, exist_ok=True)
    except OSError as exc:
        log.info("cannot make /dev/mqueue (%s): agents' message queues are not swept", exc)
        return
    result = subprocess.run(["mount", "-t", "mqueue", "mqueue", "/dev/mqueue"], capture_output=True, text=True)
    if result.returncode != 0:
        log.info("cannot mount /dev/mqueue (%s): agents' message queues are not swept", result.stderr.strip())


def _owns_ipc(uid: int) -> bool:
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}", encoding="ascii") as f:
                header = f.readline().split()
                column = header.index("uid")
                if any(int(line.split()[column]) == uid for line in f if line.strip()):
                    return True
        except (OSError, ValueError, IndexError):
            continue
    return False


def _program(name: str) -> str:
    for directory in ("/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        path = os.path.join(directory, name)
        if os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    if found is None:
        raise ConfigError(f"'{name}' is not installed (Debian package util-linux or procps)")
    return found


def agent_accounts() -> list[AgentAccount]:
    """Every agent account of this machine, by uid."""
    accounts = {entry.pw_uid: AgentAccount(entry.pw_name, entry.pw_uid, entry.pw_gid) for entry in pwd.getpwall()
                if _ACCOUNT.fullmatch(entry.pw_name) and entry.pw_uid != 0 and entry.pw_gid != 0}
    return [accounts[uid] for uid in sorted(accounts)]


def agent_uids() -> frozenset[int]:
    return frozenset(a.uid for a in agent_accounts())


#: What an environment or server asks for: "uid" (required), "none" (off), "auto" ("uid" where possible).
Isolation = Literal["auto", "uid", "none"]


@dataclass(frozen=True)
class IsolationStatus:
    """Whether agents run as accounts of their own ("uid") or as the server's user ("none"), and why."""

    mode: str
    reason: str | None
    accounts: int

    def to_dict(self) -> dict[str, object]:
        processes = process_view()[1] if self.mode == "uid" else "every process (agents run as the server's user)"
        return {"mode": self.mode, "reason": self.reason, "accounts": self.accounts, "other_processes": processes}

    def lease(self) -> Lease | None:
        """An account for one environment (None without isolation)."""
        return account_pool().lease() if self.mode == "uid" else None


_DETECTED: IsolationStatus | None = None

#: Run as root in the agent's new mount namespace, before its program: /proc mounted again with hidepid=2, so
#: that its processes see their own account's processes only (not other sessions' command lines, nor the
#: server's); then, given a folder ($view) with the account's view of the account files, those over
#: /etc/passwd and /etc/group; and given its session's disk limit ($fsize, in the 512-byte blocks of sh's ulimit),
#: files no larger (hci_envs.sandbox.space). The agent cannot unmount them or raise the limit: it has no
#: capability, and the mount namespace is not its own.
_HIDE_PROCESSES = ('mount -t proc -o hidepid=2 proc /proc || exit 125; '
                   'if [ -n "$view" ]; then mount --bind "$view/passwd" /etc/passwd && '
                   'mount --bind "$view/group" /etc/group || exit 125; fi; '
                   'if [ -n "$fsize" ]; then ulimit -f "$fsize" || exit 125; fi; exec "$@"')
#: Before that, the program joins its account's control groups (hci_envs.sandbox.limits): the files named up to
#: "--" get its pid, while it is still root's to write them.
_JOIN_GROUPS = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; '
_PROCESS_VIEW: tuple[list[str], str] | None = None


def agent_start(group_files: Sequence[str] = (), account: AgentAccount | None = None,
                file_size: int | None = None) -> list[str]:
    """The root-run start of an agent's program, before it becomes the agent: it joins its account's control
    groups (``group_files``, their cgroup.procs) and gets a /proc that shows its own account's processes only
    and, for ``account``, account files in which its user is ``hci-agent`` (with ``file_size``, files of at most
    that many bytes), where this process can do each; [] where it can do neither."""
    namespace = process_view()[0]
    if namespace:
        view = account_view(account) if account is not None else None
        return _start_in(namespace, group_files, view, file_size)
    if group_files:
        return ["/bin/sh", "-c", _JOIN_GROUPS + 'exec "$@"', "sh", *group_files, "--"]
    return []


def _start_in(namespace: Sequence[str], group_files: Sequence[str], view: Path | None = None,
              file_size: int | None = None) -> list[str]:
    blocks = str(max(1, file_size // 512)) if file_size else ""
    return [*namespace, "/bin/sh", "-c", 'view=$1; fsize=$2; shift 2; ' + _JOIN_GROUPS + _HIDE_PROCESSES, "sh",
            str(view or ""), blocks, *group_files, "--"]


_VIEWS: dict[int, tuple[tuple[float, float], Path]] = {}
_VIEWS_LOCK = threading.Lock()


def account_view(account: AgentAccount) -> Path | None:
    """A folder with ``passwd`` and ``group`` as ``account``'s programs see them: the machine's, with the
    account's own user and group named ``hci-agent`` (None where its name is that already). Made again when
    the machine's files change."""
    if account.name == ACCOUNT_NAME:
        return None
    try:
        stamp = (os.stat("/etc/passwd").st_mtime, os.stat("/etc/group").st_mtime)
    except OSError:
        return None
    with _VIEWS_LOCK:
        known = _VIEWS.get(account.uid)
        if known is not None and known[0] == stamp and (known[1] / "group").exists():
            return known[1]
        folder = run_dir() / "views" / str(account.uid)
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o755)
        for name, mine in (("passwd", account.uid), ("group", account.gid)):
            lines = Path(f"/etc/{name}").read_text().splitlines(keepends=True)
            # the account's own entry (its name, and its uid or gid in the third field) shows the shared name
            shown = [ACCOUNT_NAME + line[line.index(":"):] if line.startswith(account.name + ":") and
                     line.split(":")[2:3] == [str(mine)] else line for line in lines]
            fresh = folder / f".{name}.{os.getpid()}"
            fresh.write_text("".join(shown))
            os.chmod(fresh, 0o644)
            os.replace(fresh, folder / name)
        _VIEWS[account.uid] = (stamp, folder)
        return folder


def process_view() -> tuple[list[str], str]:
    """The mount namespace an agent's program starts in to have other accounts' processes hidden ([] where this
    process cannot make one), and what agents see of other processes, in words (``/metadata``'s isolation)."""
    global _PROCESS_VIEW
    if _PROCESS_VIEW is None:
        _PROCESS_VIEW = _detect_process_view()
    return _PROCESS_VIEW


def _detect_process_view() -> tuple[list[str], str]:
    if os.geteuid() != 0:
        return [], "every process (hiding them takes a root server, which mounts /proc again for each agent)"
    try:
        namespace = [_program("unshare"), "--mount", "--propagation", "private", "--"]
    except ConfigError as exc:
        return [], f"every process ({exc.message})"
    try:
        trial = subprocess.run([*_start_in(namespace, ()), "true"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"every process (a mount namespace could not be made: {exc})"
    if trial.returncode != 0:
        return [], f"every process (/proc could not be mounted again: {trial.stderr.strip()[:200]})"
    return namespace, "their own account's only (/proc with hidepid=2 in a mount namespace of their own)"


def resolve_isolation(requested: Isolation | IsolationStatus = "auto") -> IsolationStatus:
    """What ``requested`` means on this machine; raises :class:`ConfigError` if "uid" is asked for and cannot
    be had. ``HCI_ENVS_ISOLATION`` sets what "auto" means (uid or none)."""
    global _DETECTED
    if isinstance(requested, IsolationStatus):
        return requested
    if requested == "auto":
        requested = os.environ.get("HCI_ENVS_ISOLATION", "auto")  # type: ignore[assignment]
    if requested not in ("auto", "uid", "none"):
        raise ConfigError(f"isolation must be 'auto', 'uid' or 'none', not {requested!r}")
    if requested == "none":
        return IsolationStatus("none", "turned off (isolation: none)", len(agent_accounts()))
    if _DETECTED is None or _DETECTED.mode != "uid":
        _DETECTED = detect_isolation()
    if requested == "uid" and _DETECTED.mode != "uid":
        raise ConfigError(f"agent isolation is not available here: {_DETECTED.reason}")
    return _DETECTED


def detect_isolation() -> IsolationStatus:
    """What this process can do: ``uid`` isolation needs agent accounts, setpriv and the capabilities."""
    accounts = agent_accounts()
    if not accounts:
        return IsolationStatus("none", "no agent accounts on this machine (create them as root with "
                                       "`python3 -m hci_envs install`)", 0)
    missing = missing_capabilities()
    if missing:
        who = "not root" if os.geteuid() != 0 else "root without them"
        return IsolationStatus("none", f"the server cannot switch users ({who}: missing {', '.join(missing)})",
                               len(accounts))
    if any(u == os.getuid() for u in (a.uid for a in accounts)):
        return IsolationStatus("none", "the server itself runs as an agent account", len(accounts))
    for program in ("setpriv", "kill"):
        try:
            _program(program)
        except ConfigError as exc:
            return IsolationStatus("none", exc.message, len(accounts))
    try:
        _lock_dir()
    except OSError as exc:
        return IsolationStatus("none", f"cannot use the lease directory {run_dir() / 'accounts'}: {exc.strerror}",
                               len(accounts))
    return IsolationStatus("uid", None, len(accounts))


def _lock_dir() -> Path:
    directory = run_dir() / "accounts"
    if not directory.is_dir():
        directory.mkdir(parents=True, mode=0o700, exist_ok=True)
    st = directory.stat()
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o022:
        # anyone else who could write here could hold every account and starve the pool
        raise PermissionError(errno.EPERM, f"{directory} must be owned by the server's user and not writable by others")
    if not os.access(directory, os.W_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    return directory


class Lease:
    """An account held by this process until :meth:`release`; on release every process of the account is
    ended and what it left in shared places is removed."""

    def __init__(self, account: AgentAccount, fd: int, path: Path) -> None:
        self.account = account
        self._fd: int | None = fd
        self.path = path

    @property
    def released(self) -> bool:
        return self._fd is None

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.account.kill_all()
            self.account.sweep_files()
        finally:
            WATCHDOG.release_account(self.account)
            os.close(self._fd)
            self._fd = None


class AccountPool:
    """Hands out agent accounts, one per live session, across every server process of the machine."""

    def __init__(self, accounts: Sequence[AgentAccount] | None = None) -> None:
        self._accounts = list(accounts) if accounts is not None else agent_accounts()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._accounts)

    def lease(self) -> Lease:
        """The first free account, swept clean; raises :class:`CapacityError` when every one is taken."""
        directory = _lock_dir()
        with self._lock:
            claimed = claim_account([account.uid for account in self._accounts], directory)
        if claimed is None:
            raise CapacityError(
                f"every agent account is in use ({len(self._accounts)} on this machine); close sessions, or create "
                "more accounts as root with `python3 -m hci_envs install --agent-accounts N`",
                accounts=len(self._accounts),
            )
        uid, fd, path = claimed
        account = next(a for a in self._accounts if a.uid == uid)
        lease = Lease(account, fd, path)
        try:
            account.kill_all()  # a server killed with its watchdog may have left some behind
            account.sweep_files()
            WATCHDOG.guard_account(account, path)
        except BaseException:
            os.close(fd)
            raise
        return lease


def claim_account(uids: Sequence[int], directory: Path) -> tuple[int, int, Path] | None:
    """The first of ``uids`` no process of the machine holds, held from now on by a shared flock on its lock file
    (the server's, and its watchdog's beside it: see the module): (uid, the held descriptor, the file); None when
    every one is held.

    An exclusive lock proves nobody holds the account; it then becomes shared, so that the watchdog can hold it
    too. That conversion is not atomic (the exclusive lock goes before the shared one comes), and two servers
    converting at once would both end up holding the same account, each in the belief it was free: two sessions
    of one uid, able to read each other's files and kill each other's programs (a loaded test run found it). So
    the whole claim is made under a machine-wide mutex, a lock file of the same folder that every claim takes."""
    mutex = os.open(directory / ".claims", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(mutex, fcntl.LOCK_EX)  # held for a few system calls per account, never across a slow step
        for uid in uids:
            path = directory / f"{uid}.lock"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # no other claim can come in between: the mutex
            except OSError:
                os.close(fd)
                continue
            return uid, fd, path
        return None
    finally:
        os.close(mutex)  # the mutex's lock goes with its descriptor


_POOL: AccountPool | None = None
_POOL_LOCK = threading.Lock()


def account_pool() -> AccountPool:
    """This process's view of the machine's accounts (leases themselves are machine-wide)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = AccountPool()
        return _POOL
