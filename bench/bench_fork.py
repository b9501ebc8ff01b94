"""Forking a running desktop with CRIU: the measurements behind docs/fork.md, taken again with one command.

A desktop of the machine's own programs (Xvfb, xterm with bash on a pty, mousepad, an endless animation, and
chromium with ``--apps ...,chromium``) is started in namespaces of its own: user, pid, mount, network, ipc and
uts. Inside, uid 0 is an unprivileged host uid of the desktop's, and uid 1000 its agent. Its root is a skeleton
of mountpoints with the host's /usr and /etc bound read-only, and tmpfs /dev, /tmp and home. The desktop is
dumped with CRIU, left running, and restored as 1, 4 and 8 copies at once. Each copy has host uids of its own:
only the uid map in the copy's images is rewritten. Reported, each beside its baseline from the same run:

  * dump time and how long the source was frozen, against a screenshot of it (the floor of "looking at it");
  * restore of N copies at once, against a fresh start of N such desktops up to their windows (the floor a
    fork must beat);
  * memory per copy (PSS of the copy's processes) against the source's;
  * that each copy's screen equals the source's at the dump (pixels differing, the animation's window masked),
    that each copy runs as its own uids, and that typing into one copy's xterm writes a file in its home only;
  * with ``--ksm SECONDS``: the copies restored mergeable by KSM, their memory after that long, and ksmd's CPU.

    .venv/bin/python bench/bench_fork.py [--apps xterm,mousepad,animation] [--copies 1,4,8] [--ksm 10]

Needs root and CRIU 4.1 or later (Debian 12's 3.17 fails on kernels from 6.16). With no such ``criu`` on PATH,
CRIU is taken from Debian 13: a minimal trixie tree made once with debootstrap under ``--criu-tree``. CRIU runs
from it through trixie's own loader, so nothing is installed over the host's libraries. Nothing of this is in
the package: it measures the route before the fork is built (issue "Fork a running desktop").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import ROOT, Report, measure, pss_kib
from helpers import wait_until

ANIMATE = ROOT / "tests" / "apps" / "animate.py"
#: Each app: the argv its agent runs (in the desktop, as uid 1000) and the window class that shows it is up.
APPS = {
    "xterm": (["xterm", "-geometry", "70x12+0+600"], "XTerm"),
    "mousepad": (["mousepad"], "Mousepad"),
    "animation": (["python3", "/bench/animate.py", "240", "120", "16", "1040", "0"], "Tk"),
    "chromium": (["chromium", "--no-sandbox", "--no-first-run", "--user-data-dir=/home/agent/.chromium",
                  "--window-position=640,200", "--window-size=640,600", "about:blank"], "chromium"),
}
#: The animation's window, left out of the screen comparison: it has moved on by the time anything is compared.
ANIMATION_BOX = (1040, 0, 1280, 120)
#: Mousepad opens at the top left, chromium on the right, the xterm at the bottom left where nothing covers it.
SCREEN = (1280, 800)
#: Host uids for the desktops of this benchmark (none of hci-envs' accounts): ROOT_BASE+n and AGENT_BASE+n.
ROOT_BASE, AGENT_BASE = 3_900_000, 3_910_000
#: Mounts of the desktop that come from outside, named for CRIU (dump: mountpoint, restore: the source).
EXTERNAL = {"/usr": "_usr", "/etc": "_etc", "/tmp/.X11-unix": "_x11",
            **{f"/dev/{n}": f"_dev_{n}" for n in ("null", "zero", "random", "urandom", "full", "tty")}}

#: pid 1 of a desktop: builds its root, starts Xvfb and the apps, then re-executes itself as a reaper (so that
#: its own memory maps nothing of the mounts it left). Its settings come as JSON in argv[1].
INIT = r'''
import json, os, socket, subprocess, sys, time
cfg = json.loads(sys.argv[1])
os.closerange(3, 65536)  # nothing of the launcher's: criu cannot dump a descriptor from outside
def sh(*argv):
    subprocess.run(argv, check=True)
R = cfg["root"]
sh("mount", "--bind", R, R)
for d in ("usr", "etc"):
    sh("mount", "--bind", "-o", "ro", f"/{d}", f"{R}/{d}")
sh("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", f"{R}/dev")
for node in ("null", "zero", "random", "urandom", "full", "tty"):
    open(f"{R}/dev/{node}", "w").close()
    sh("mount", "--bind", f"/dev/{node}", f"{R}/dev/{node}")
os.mkdir(f"{R}/dev/shm"); os.mkdir(f"{R}/dev/pts")
sh("mount", "-t", "devpts", "-o", "newinstance,ptmxmode=0666", "devpts", f"{R}/dev/pts")
os.symlink("pts/ptmx", f"{R}/dev/ptmx")
sh("mount", "-t", "tmpfs", "tmpfs", f"{R}/dev/shm")
sh("mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", f"{R}/tmp")
sh("mount", "-t", "proc", "proc", f"{R}/proc")
os.mkdir(f"{R}/tmp/.X11-unix")
sh("mount", "--bind", cfg["x11"], f"{R}/tmp/.X11-unix")
sh("mount", "-t", "tmpfs", "-o", "mode=0700,uid=1000,gid=1000,size=256m", "tmpfs", f"{R}/home/agent")
os.chdir(R)
sh("pivot_root", ".", "old")
os.chdir("/")
sh("umount", "-l", "/old")
fd = os.open("/dev/null", os.O_RDWR)
for n in (0, 1, 2):
    os.dup2(fd, n)
os.close(fd)
subprocess.Popen(["Xvfb", ":5", "-nolisten", "tcp", "-screen", "0", cfg["screen"]])
while True:  # its socket's file shows before it listens: a client that comes then is refused and exits
    try:
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect("/tmp/.X11-unix/X5")
        break
    except OSError:
        time.sleep(0.01)
env = {"HOME": "/home/agent", "DISPLAY": ":5", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "SHELL": "/bin/bash",
       "NO_AT_BRIDGE": "1", "XDG_RUNTIME_DIR": "/tmp", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent"}
for argv in cfg["apps"]:
    subprocess.Popen(["setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", *argv], env=env,
                     cwd="/home/agent")
REAPER = "import os, time\nwhile True:\n    try: os.wait()\n    except ChildProcessError: time.sleep(1)\n"
os.execv("/usr/bin/python3", ["python3", "-c", REAPER])
'''

#: Runs INIT as pid 1 of new namespaces; root writes the maps (no newuidmap or /etc/subuid). Prints its pid.
LAUNCH = r'''
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
CLONE = 0x10000000 | 0x00020000 | 0x20000000 | 0x40000000 | 0x08000000 | 0x04000000  # user ns pid net ipc uts
root_uid, agent_uid, cfg = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
r, w = os.pipe()
pids = os.pipe()
child = os.fork()
if child == 0:
    if libc.unshare(CLONE) != 0:
        os._exit(1)
    os.read(r, 1)
    os.setgroups([]); os.setgid(0); os.setuid(0)
    libc.mount(b"none", b"/", None, 0x40000 | 0x4000, None)  # MS_REC | MS_PRIVATE
    pid1 = os.fork()
    if pid1 == 0:
        os.setsid()
        os.execv("/usr/bin/python3", ["python3", "-c", sys.argv[4], cfg])
    os.write(pids[1], str(pid1).encode())
    os._exit(0)
mine = os.readlink("/proc/self/ns/user")
while os.readlink(f"/proc/{child}/ns/user") == mine:
    time.sleep(0.001)
for kind in ("uid_map", "gid_map"):
    with open(f"/proc/{child}/{kind}", "w") as f:
        f.write(f"0 {root_uid} 1\n1000 {agent_uid} 1\n")
os.write(w, b"x")
os.waitpid(child, 0)
print(os.read(pids[0], 32).decode())
'''


# -- CRIU ------------------------------------------------------------------------------------------------------
def criu_command(tree: Path) -> list[str]:
    """A CRIU of 4.1 or later: the host's, or Debian 13's from ``tree`` (made with debootstrap the first time)."""
    host = shutil.which("criu")
    if host:
        version = subprocess.run([host, "--version"], capture_output=True, text=True).stdout.split()
        if len(version) > 1 and tuple(int(p) for p in version[1].split(".")[:2]) >= (4, 1):
            return [host]
    if not (tree / "usr/sbin/criu").exists():
        if not shutil.which("debootstrap"):
            sys.exit("bench_fork: needs criu 4.1+ on PATH, or debootstrap to fetch Debian 13's "
                     "(apt install debootstrap)")
        print(f"fetching Debian 13's CRIU into {tree} (debootstrap, once)", flush=True)
        subprocess.run(["debootstrap", "--variant=minbase", "--include=criu", "trixie", str(tree),
                        "http://deb.debian.org/debian"], check=True, stdout=subprocess.DEVNULL)
    libs = f"{tree}/usr/lib/x86_64-linux-gnu:{tree}/lib/x86_64-linux-gnu"
    return [f"{tree}/usr/lib64/ld-linux-x86-64.so.2", "--library-path", libs, f"{tree}/usr/sbin/criu"]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(data: bytes) -> list[tuple[int, int, object]]:
    """The top-level fields of a protobuf message: (number, wire type, value: int or bytes)."""
    fields, i = [], 0
    while i < len(data):
        key, i = _read_varint(data, i)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, i = _read_varint(data, i)
        elif kind == 2:
            size, i = _read_varint(data, i)
            value, i = data[i:i + size], i + size
        else:
            size = 4 if kind == 5 else 8
            value, i = data[i:i + size], i + size
        fields.append((number, kind, value))
    return fields


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _encode(fields: list[tuple[int, int, object]]) -> bytes:
    out = bytearray()
    for number, kind, value in fields:
        out += _varint(number << 3 | kind)
        if kind == 0:
            out += _varint(value)  # type: ignore[arg-type]
        elif kind == 2:
            out += _varint(len(value)) + value  # type: ignore[arg-type,operator]
        else:
            out += value  # type: ignore[operator]
    return bytes(out)


def _message(data: bytes) -> bytes:
    """The message of a CRIU image of one entry: 8 bytes of magic, a 4-byte size, the message."""
    (size,) = struct.unpack_from("<I", data, 8)
    return data[12:12 + size]


def _by_number(message: bytes) -> dict[int, object]:
    return {number: value for number, _kind, value in _fields(message)}


def _rewrite_image(path: Path, edit) -> None:
    """A CRIU image of one entry, its message's fields rewritten by ``edit``."""
    data = path.read_bytes()
    body = _encode(edit(_fields(_message(data))))
    path.unlink()  # a hard link to the source's image: write a file of its own
    path.write_bytes(data[:8] + struct.pack("<I", len(body)) + body)


def give_copy_its_uids(images: Path, root_uid: int, agent_uid: int) -> None:
    """The copy's user namespace maps its uid 0 and 1000 to host uids of its own (UsernsEntry: uid_map=1,
    gid_map=2, each extent first=1, lower_first=2, count=3). Its network namespace loses ping_group_range
    (NetnsEntry.ipv4_sysctl=10): "1 0" names gid 1, which the copy does not map, so the restore could not write
    it back; the kernel's default is the same, off."""
    lower = {0: root_uid, 1000: agent_uid}

    def remap(fields):
        out = []
        for number, kind, value in fields:
            extent = _by_number(value)  # type: ignore[arg-type]
            out.append((number, kind, _encode([(1, 0, extent[1]), (2, 0, lower[extent[1]]), (3, 0, extent[3])])))
        return out

    for image in images.glob("userns-*.img"):
        _rewrite_image(image, remap)
    for image in images.glob("netns-*.img"):
        _rewrite_image(image, lambda fields: [f for f in fields if f[0] != 10])


def frozen_ms(images: Path) -> float:
    """How long the dump kept the source frozen (stats-dump: StatsEntry.dump=1, DumpStatsEntry.frozen_time=2, µs)."""
    dump = _by_number(_message((images / "stats-dump").read_bytes()))[1]
    return _by_number(dump)[2] / 1000  # type: ignore[arg-type,operator]


# -- desktops -----------------------------------------------------------------------------------------------------
class Desktop:
    """One desktop (the source, a copy or a fresh one): its pid 1 on the host, and a host display alias."""

    def __init__(self, work: Path, n: int, pid1: int) -> None:
        self.n, self.pid1 = n, pid1
        self.display = f":{600 + n}"
        alias = Path(f"/tmp/.X11-unix/X{600 + n}")
        alias.unlink(missing_ok=True)
        alias.symlink_to(work / "x11" / str(n) / "X5")

    def pids(self) -> list[int]:
        ns = os.readlink(f"/proc/{self.pid1}/ns/pid")
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.readlink(entry / "ns/pid") == ns:
                        found.append(int(entry.name))
                except OSError:
                    pass
        return found

    def uids(self) -> set[int]:
        return {Path(f"/proc/{p}").stat().st_uid for p in self.pids() if Path(f"/proc/{p}").exists()}

    def pss_mib(self) -> float:
        return sum(pss_kib(p) for p in self.pids()) / 1024

    def env(self) -> dict[str, str]:
        return {**os.environ, "DISPLAY": self.display}

    def missing_windows(self, classes: list[str]) -> list[str]:
        return [c for c in classes if subprocess.run(["xdotool", "search", "--onlyvisible", "--class", c],
                                                     env=self.env(), capture_output=True).returncode != 0]

    def screen(self) -> bytes:
        import mss

        with mss.MSS(display=self.display) as grab:
            return grab.grab(grab.monitors[0]).rgb

    def home(self) -> Path:
        return Path(f"/proc/{self.pid1}/root/home/agent")

    def kill(self) -> None:
        try:
            os.kill(self.pid1, signal.SIGKILL)  # pid 1 of its namespace: the kernel ends every process in it
        except ProcessLookupError:
            pass


def socket_folder(work: Path, n: int) -> Path:
    """Desktop ``n``'s display socket folder on the host, bound onto its /tmp/.X11-unix."""
    x11 = work / "x11" / str(n)
    x11.mkdir(parents=True)
    x11.chmod(0o1777)
    return x11


def start(work: Path, n: int, apps: list[str]) -> Desktop:
    x11 = socket_folder(work, n)
    cfg = json.dumps({"root": str(work / "root"), "x11": str(x11), "screen": f"{SCREEN[0]}x{SCREEN[1]}x24",
                      "apps": [APPS[a][0] for a in apps]})
    out = subprocess.run([sys.executable, "-c", LAUNCH, str(ROOT_BASE + n), str(AGENT_BASE + n), cfg, INIT],
                         capture_output=True, text=True, check=True).stdout
    return Desktop(work, n, int(out))


def wait_up(desktop: Desktop, apps: list[str], timeout: float = 120) -> None:
    classes = [APPS[a][1] for a in apps]
    if not wait_until(lambda: not desktop.missing_windows(classes), timeout):
        sys.exit(f"bench_fork: desktop {desktop.n} showed no window of {', '.join(desktop.missing_windows(classes))}"
                 f" within {timeout:.0f}s (processes: {sorted(desktop.pids())})")


def make_root(work: Path) -> None:
    """The skeleton every desktop and copy pivots into (CRIU's --root): mountpoints, and the animation."""
    root = work / "root"
    for d in ("usr", "etc", "proc", "dev", "tmp", "home/agent", "old", "bench"):
        (root / d).mkdir(parents=True)
    for link in ("bin", "sbin", "lib", "lib64"):
        (root / link).symlink_to(f"usr/{link}")
    shutil.copy(ANIMATE, root / "bench" / "animate.py")
    (root / "bench" / "animate.py").chmod(0o644)
    os.chmod(work, 0o755)


def dump(criu: list[str], source: Desktop, images: Path) -> float:
    images.mkdir(parents=True)
    # chromium keeps deleted files open (its metrics, 4 MiB), which CRIU saves whole up to the ghost limit, and
    # holds file locks (its profile), which CRIU saves only when asked
    external = [f"--external=mnt[{m}]:{k}" for m, k in EXTERNAL.items()]
    started = time.perf_counter()
    done = subprocess.run([*criu, "dump", "-t", str(source.pid1), "-D", str(images), "--leave-running",
                           "--network-lock", "skip", "--ghost-limit", "64M", "--file-locks", *external,
                           "-o", "dump.log"], capture_output=True, text=True)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode:
        sys.exit(f"bench_fork: criu dump failed; its log: {images / 'dump.log'}\n{_errors(images / 'dump.log')}")
    return elapsed


def _mergeable() -> None:
    """In the restoring CRIU (before its exec): every process it restores may have its pages merged by KSM
    (PR_SET_MEMORY_MERGE, inherited across fork and exec)."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(67, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_MEMORY_MERGE)")


def restore(criu: list[str], work: Path, images: Path, n: int, ksm: bool = False) -> Desktop:
    mine = work / f"copy-{n}"
    mine.mkdir()
    for image in images.iterdir():
        os.link(image, mine / image.name)
    give_copy_its_uids(mine, ROOT_BASE + n, AGENT_BASE + n)
    x11 = socket_folder(work, n)
    sources = {k: (str(x11) if m == "/tmp/.X11-unix" else m) for m, k in EXTERNAL.items()}
    external = [f"--external=mnt[{k}]:{path}" for k, path in sources.items()]
    done = subprocess.run([*criu, "restore", "-D", str(mine), "-W", str(mine), "--restore-detached", "--file-locks",
                           "--pidfile", str(mine / "pid"), "--root", str(work / "root"), *external,
                           "-o", "restore.log"], capture_output=True, text=True,
                          preexec_fn=_mergeable if ksm else None)
    if done.returncode:
        sys.exit(f"bench_fork: criu restore failed; its log: {mine / 'restore.log'}\n{_errors(mine / 'restore.log')}")
    return Desktop(work, n, int((mine / "pid").read_text()))


def _add(report: Report, key: str, samples: list[float], **extra: object) -> None:
    report.add(key, samples, **extra)
    for name, value in extra.items():
        print(f"      {name}: {value}", flush=True)


def _errors(log: Path) -> str:
    return "\n".join(line for line in log.read_text().splitlines() if "Error" in line and "RLIMIT_NOFILE" not in line)


def differing_pixels(a: bytes, b: bytes) -> int:
    """Pixels that differ between two screens, the animation's box left out."""
    import numpy as np

    shape = (SCREEN[1], SCREEN[0], 3)
    differs = (np.frombuffer(a, np.uint8).reshape(shape) != np.frombuffer(b, np.uint8).reshape(shape)).any(axis=2)
    left, top, right, bottom = ANIMATION_BOX
    differs[top:bottom, left:right] = False
    return int(differs.sum())


def type_into(desktop: Desktop, text: str) -> None:
    """Type into the xterm through XTEST (xterm ignores synthetic events sent to a window): raised, given the
    focus (chromium takes it when it starts; there is no window manager to give it back) and the pointer on it."""
    env = desktop.env()
    window = subprocess.run(["xdotool", "search", "--onlyvisible", "--class", "XTerm"], env=env,
                            capture_output=True, text=True, check=True).stdout.split()[0]
    subprocess.run(["xdotool", "windowraise", window], env=env, check=True)
    subprocess.run(["xdotool", "windowfocus", window], env=env, check=True)
    subprocess.run(["xdotool", "mousemove", "--window", window, "30", "30"], env=env, check=True)
    subprocess.run(["xdotool", "type", text], env=env, check=True)
    subprocess.run(["xdotool", "key", "Return"], env=env, check=True)


def read_when_there(path: Path, timeout: float = 30) -> tuple[str, int]:
    if not wait_until(path.exists, timeout):
        return ("(nothing written)", -1)
    time.sleep(0.2)  # the shell's write done
    return (path.read_text().strip(), path.stat().st_uid)


def fork_round(criu: list[str], work: Path, images: Path, source: Desktop, before: bytes, apps: list[str],
               count: int, first: int, report: Report, desktops: list[Desktop], ksm: float) -> list[Desktop]:
    """Restore ``count`` copies at once (numbered from ``first``), then start as many fresh desktops at once as
    the baseline, and report both with what the copies show; returns the copies (the fresh ones are ended)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        copies = list(pool.map(lambda n: restore(criu, work, images, n, ksm > 0), range(first, first + count)))
    restored = (time.perf_counter() - started) * 1000
    desktops += copies
    started = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        fresh = list(pool.map(lambda n: start(work, n, apps), range(first + count, first + 2 * count)))
        desktops += fresh
        list(pool.map(lambda d: wait_up(d, apps), fresh))
    started_fresh = (time.perf_counter() - started) * 1000
    classes = [APPS[a][1] for a in apps]
    _add(report, f"restore {count} copies at once", [restored], fresh_start_ms=round(started_fresh),
         ratio_to_fresh=round(restored / started_fresh, 2),
         pixels_differing_max=max(differing_pixels(before, c.screen()) for c in copies),
         copies_with_wrong_uids=[c.n for c in copies if c.uids() != {ROOT_BASE + c.n, AGENT_BASE + c.n}],
         copies_missing_a_process_or_window=[c.n for c in copies if c.missing_windows(classes)
                                             or len(c.pids()) != len(source.pids())],
         pss_mib_per_copy=round(sum(c.pss_mib() for c in copies) / count, 1),
         pss_mib_source=round(source.pss_mib(), 1))
    for d in fresh:
        d.kill()
    if ksm:
        merged = ksm_settled(ksm)
        report.value(f"{count} copies after {ksm:.0f} s of KSM",
                     {"pss_mib_per_copy": round(sum(c.pss_mib() for c in copies) / count, 1), **merged})
    return copies


KSM = Path("/sys/kernel/mm/ksm")


def ksm_settled(seconds: float) -> dict[str, float]:
    """Let ksmd merge for ``seconds``; what it shares and the CPU it took (its thread's utime+stime)."""
    def ksmd_cpu() -> float:
        pid = subprocess.run(["pgrep", "-x", "ksmd"], capture_output=True, text=True).stdout.split()[0]
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    cpu = ksmd_cpu()
    time.sleep(seconds)
    return {"ksm_shared_mib": round(int((KSM / "pages_sharing").read_text()) * 4 / 1024, 1),
            "ksmd_cpu_s": round(ksmd_cpu() - cpu, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--apps", default="xterm,mousepad,animation")
    parser.add_argument("--copies", default="1,4,8")
    parser.add_argument("--criu-tree", type=Path, default=Path("/var/cache/hci-envs/criu-trixie"))
    parser.add_argument("--ksm", type=float, default=0, metavar="SECONDS",
                        help="restore the copies mergeable by KSM (turned on and sped up for the run) and report "
                             "their memory after SECONDS of merging")
    args = parser.parse_args()
    apps = args.apps.split(",")
    if os.geteuid() != 0:
        sys.exit("bench_fork: needs root (namespaces with host uid maps, and CRIU)")
    if "xterm" not in apps:
        sys.exit("bench_fork: --apps must include xterm (the divergence check types into it)")
    criu = criu_command(args.criu_tree)
    report = Report("fork")
    work = Path(tempfile.mkdtemp(prefix="hci-envs-bench-fork-"))
    desktops: list[Desktop] = []
    #: ksmd on, and scanning fast enough to be seen in seconds (its defaults, 100 pages every 20 ms, take minutes)
    ksm_settings = {"run": "1", "pages_to_scan": "5000", "sleep_millisecs": "10"}
    ksm_was = {name: (KSM / name).read_text().strip() for name in ksm_settings}
    if args.ksm:
        for name, value in ksm_settings.items():
            (KSM / name).write_text(value)
    try:
        make_root(work)
        source = start(work, 0, apps)
        desktops.append(source)
        wait_up(source, apps)
        time.sleep(2)  # the apps' first paint and font caches done before anything is timed
        report.add("screenshot of the source (floor)", measure(source.screen, 5, warmup=1))
        before = source.screen()
        images = work / "images"
        dumped = [dump(criu, source, images)]
        _add(report, "dump, source left running", dumped, frozen_ms=round(frozen_ms(images), 1),
             image_mib=round(sum(f.stat().st_size for f in images.iterdir()) / 2**20, 1))
        copies: list[Desktop] = []
        first = 1
        for count in (int(c) for c in args.copies.split(",")):
            copies += fork_round(criu, work, images, source, before, apps, count, first, report, desktops,
                                 args.ksm)
            first += 2 * count
        type_into(copies[0], "echo copy > ~/typed")
        type_into(source, "echo source > ~/typed")
        report.value("typed", {
            "copy": read_when_there(copies[0].home() / "typed"),
            "source": read_when_there(source.home() / "typed"),
            "other copies untouched": all(not (d.home() / "typed").exists() for d in copies[1:]),
        })
        report.notes.update(apps=apps, criu=criu[-1], command=" ".join(sys.argv))
    finally:
        for d in desktops:
            d.kill()
            Path(f"/tmp/.X11-unix/X{600 + d.n}").unlink(missing_ok=True)
        time.sleep(0.5)
        shutil.rmtree(work, ignore_errors=True)
        for name, value in ksm_was.items():
            (KSM / name).write_text(value)
    report.save()


if __name__ == "__main__":
    main()
