"""Pid 1 of a forkable desktop: run by :mod:`.tree` as ``python3 -c <this file's text> <settings as JSON>``
in the desktop's new namespaces (user, pid, mount, network, ipc, uts), as the namespace's root. Standard
library only, and nothing of the package: once it has pivoted into the desktop's root, the checkout is out of
sight.

It builds the desktop's root, starts Xvfb, then re-executes itself as the reaper that stays pid 1. Nothing of
the server may stay in the tree (a descriptor, a mapping of a file outside): CRIU could not dump it.
"""

import json
import os
import socket
import subprocess
import sys
import time

#: Where the desktop keeps its own state, as its processes see it: readable by all, writable by its root only.
STATE = "/tmp/.hci"

REAPER = r'''
import os, sys, time
# pid 1 of the desktop: reaps every orphan; for a process the server watches (an empty file in exits/ named by
# its pid), writes how it ended there
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        time.sleep(0.5)
        continue
    watched = f"/tmp/.hci/exits/{pid}"
    if os.path.exists(watched):
        with open(watched + ".new", "w") as f:
            f.write(str(os.waitstatus_to_exitcode(status)))
        os.replace(watched + ".new", watched)
'''


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True)


def read_only(folder: str, root: str) -> None:
    sh("mount", "--bind", folder, f"{root}{folder}")
    sh("mount", "-o", "remount,bind,ro,nosuid,nodev", f"{root}{folder}")


def build_root(cfg: dict) -> None:
    root = cfg["root"]
    sh("mount", "--bind", root, root)
    for d in ("/usr", "/etc"):
        read_only(d, root)
    sh("mount", "-t", "tmpfs", "-o", "mode=755,nosuid", "tmpfs", f"{root}/dev")
    for node in ("null", "zero", "random", "urandom", "full", "tty"):
        open(f"{root}/dev/{node}", "w").close()
        sh("mount", "--bind", f"/dev/{node}", f"{root}/dev/{node}")
    os.mkdir(f"{root}/dev/shm")
    os.mkdir(f"{root}/dev/pts")
    sh("mount", "-t", "devpts", "-o", "newinstance,ptmxmode=0666,mode=620", "devpts", f"{root}/dev/pts")
    os.symlink("pts/ptmx", f"{root}/dev/ptmx")
    sh("mount", "-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmpfs", f"{root}/dev/shm")
    size = f",size={cfg['tmp_bytes']}" if cfg.get("tmp_bytes") else ""  # the session's disk limit, if any
    sh("mount", "-t", "tmpfs", "-o", f"mode=1777,nosuid,nodev{size}", "tmpfs", f"{root}/tmp")
    sh("mount", "-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmpfs", f"{root}/var/tmp")
    sh("mount", "-t", "tmpfs", "-o", "mode=755,nosuid,nodev", "tmpfs", f"{root}/run")
    sh("mount", "-t", "proc", "proc", f"{root}/proc")
    os.mkdir(f"{root}/tmp/.X11-unix")
    sh("mount", "--bind", cfg["x11"], f"{root}/tmp/.X11-unix")
    sh("mount", "--bind", cfg["home"], f"{root}/home/agent")
    for d in cfg["code"]:  # the server's Python and package (once the tmpfs mounts are there: a checkout in /tmp)
        os.makedirs(f"{root}{d}", exist_ok=True)
        read_only(d, root)
    sh("ip", "link", "set", "lo", "up")
    os.chdir(root)
    sh("pivot_root", ".", "old")
    os.chdir("/")
    sh("umount", "-l", "/old")


def main() -> None:
    cfg = json.loads(sys.argv[1])
    os.closerange(3, 65536)  # nothing of the launcher's: CRIU cannot dump a descriptor from outside
    build_root(cfg)
    fd = os.open("/dev/null", os.O_RDWR)
    for n in (0, 1, 2):
        os.dup2(fd, n)
    os.close(fd)
    for folder, mode in ((STATE, 0o755), (f"{STATE}/exits", 0o755), (f"{STATE}/logs", 0o755)):
        os.mkdir(folder, mode)
        os.chmod(folder, mode)
    for name, text in cfg["files"].items():
        with open(f"{STATE}/{name}", "w") as f:
            f.write(text)
    with open(f"{STATE}/logs/xvfb.log", "wb") as log:
        xvfb = subprocess.Popen(["Xvfb", ":5", "-nolisten", "tcp", "-screen", "0", cfg["screen"],
                                 "-dpi", str(cfg["dpi"]), "-noreset", "+extension", "RANDR"],
                                stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + cfg["timeout"]
    while time.monotonic() < deadline and xvfb.poll() is None:
        # its socket's file shows before it listens: a client that came then would be refused
        try:
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect("/tmp/.X11-unix/X5")
            break
        except OSError:
            time.sleep(0.01)
    open(f"{STATE}/exits/{xvfb.pid}", "w").close()
    with open(f"{STATE}/xvfb.pid", "w") as f:
        f.write(str(xvfb.pid))
    os.execv("/usr/bin/python3", ["python3", "-c", REAPER])


main()
