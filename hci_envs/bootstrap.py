"""From a fresh machine to a running desktop, or to a test run, in one command. Standard library only.

    python3 -m hci_envs up [serve options]   system packages + .venv + `hci-envs serve` (URLs printed)
    python3 -m hci_envs test [pytest args]   everything the tests need, then the whole suite, strictly
    python3 -m hci_envs install [--test]     only the installation step

System packages come from apt (as root, or through sudo). Python packages go into ``.venv`` next to
pyproject.toml. Each step is skipped when it is already done, so a second run starts in seconds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
OPENENV_VENV = ROOT / ".venv-openenv"
OPENENV_REQUIREMENT = "openenv==0.10.0"

#: What a desktop needs at run time.
RUNTIME_APT = [
    "xvfb", "xauth", "openbox", "x11vnc", "novnc", "xterm", "python3-tk", "python3-venv",
    "fonts-dejavu-core", "fonts-noto-cjk", "fonts-noto-color-emoji", "x11-utils",
]
#: What the tests and benchmarks need on top: a browser for the noVNC page, the baseline tools of the
#: computer-use demo (xdotool, scrot, ImageMagick), debootstrap for the offline base image, and the text
#: editor of the built-in task suite.
TEST_APT = ["chromium", "mousepad", "xdotool", "scrot", "imagemagick", "debootstrap", "ca-certificates"]


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


def ensure_venv(extra: str) -> Path:
    """Create .venv and install hci-envs (editable) with ``extra``; skipped when pyproject is unchanged."""
    python = VENV / "bin" / "python"
    key = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extra.encode()).hexdigest()
    if python.exists() and _stamp(VENV, key):
        log(f"Python environment {VENV.name}: up to date")
        return python
    if not python.exists():
        log(f"creating {VENV}")
        run([sys.executable, "-m", "venv", str(VENV)])
    run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    run([str(python), "-m", "pip", "install", "-q", "-e", f"{ROOT}[{extra}]"])
    (VENV / ".hci-envs-stamp").write_text(key)
    return python


def ensure_openenv() -> Path:
    """OpenEnv's own client in a separate environment: it pins an older mcp than ours, as a trainer would."""
    python = OPENENV_VENV / "bin" / "python"
    if python.exists() and _stamp(OPENENV_VENV, OPENENV_REQUIREMENT):
        log(f"OpenEnv environment {OPENENV_VENV.name}: up to date")
        return python
    if not python.exists():
        run([sys.executable, "-m", "venv", str(OPENENV_VENV)])
    run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    run([str(python), "-m", "pip", "install", "-q", OPENENV_REQUIREMENT])
    (OPENENV_VENV / ".hci-envs-stamp").write_text(OPENENV_REQUIREMENT)
    return python


def build_images(python: Path) -> None:
    """The Docker images the tests run against (cached by the daemon between runs)."""
    images_cli = ROOT / "images" / "build.py"
    if not images_cli.exists():
        return
    run([str(python), str(images_cli), "--for-tests"])


def install(test: bool) -> Path:
    start = time.monotonic()
    apt_install(RUNTIME_APT + (TEST_APT if test else []))
    python = ensure_venv("test" if test else "server")
    if test:
        ensure_openenv()
        build_images(python)
    log(f"installation done in {time.monotonic() - start:.0f}s")
    return python


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    command, rest = args[0], args[1:]
    if command == "install":
        install(test="--test" in rest)
        return 0
    if command == "up":
        python = install(test=False)
        os.execv(str(python), [str(python), "-m", "hci_envs.cli", "serve", *rest])
    if command == "test":
        python = install(test=True)
        env = {**os.environ, "HCI_ENVS_STRICT": "1", "HCI_ENVS_OPENENV_PYTHON": str(OPENENV_VENV / "bin" / "python")}
        log("running the test suite (strict: a missing part or a skipped test fails the run)")
        os.chdir(ROOT)
        os.execve(str(python), [str(python), "-m", "pytest", *rest], env)
    print(f"unknown command {command!r}\n{__doc__}", file=sys.stderr)
    return 2
