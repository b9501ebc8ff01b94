"""OpenEnv's validator (``openenv validate``, from OpenEnv's own environment) over hci-envs: the repository, each
image, or a running server.

    hci-envs validate                       # the checkout, every level the validator implements
    hci-envs validate --image hci-envs/apps:latest
    hci-envs validate http://127.0.0.1:8000

The validator grades a package folder: its ``openenv.yaml`` and every file under it, hashed (it refuses a
symlink anywhere, and a checkout holds the side environments and caches the set-up commands make), and at its
runtime level an image built from the package's Dockerfile (``images/openenv``: an image of ours, told to serve
without the secrets the validator cannot hand it). So a checkout is validated as a copy of its tracked files,
and an image as a package made for it: the manifest the image carries (``/opt/hci-envs/openenv.yaml``) and that
Dockerfile, from that image.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ConfigError, MissingDependencyError
from .manifest import DOCKERFILE, IMAGE_MANIFEST, PROBE_PATH

ROOT = Path(__file__).resolve().parents[2]
LEVELS = ("static", "runtime", "semantic")
#: The server's command in an image whose own command the validator cannot run (it needs a secret).
PLAIN_COMMAND = ["hci-envs", "serve", "--host", "0.0.0.0", "--port", "8000"]
#: What the validator's exit codes mean.
VERDICTS = {0: "pass", 1: "fail", 2: "unsupported", 3: "internal error"}


def openenv_cli() -> str:
    """OpenEnv's ``openenv`` command: HCI_ENVS_OPENENV, else the checkout's .venv-openenv (the test set-up makes
    it), else one on the PATH."""
    configured = os.environ.get("HCI_ENVS_OPENENV")
    candidates = [configured] if configured else [str(ROOT / ".venv-openenv" / "bin" / "openenv"),
                                                   shutil.which("openenv") or ""]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    raise MissingDependencyError("OpenEnv's validator (`openenv`) is not installed: `python3 -m hci_envs install "
                                 "--test` makes .venv-openenv, or pip install openenv, or set HCI_ENVS_OPENENV",
                                 program="openenv")


def checkout_package(dest: Path) -> Path:
    """The checkout's tracked files (as ``git ls-files`` lists them, with their changes) copied into ``dest``."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, timeout=60)
    if listed.returncode != 0:
        raise ConfigError(f"{ROOT} is not a git checkout: validate an image (--image) or a server (a URL) instead")
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


def image_package(image: str, dest: Path) -> Path:
    """A package for ``image``: its own manifest, the probe episode, and the validator's Dockerfile from it."""
    out = subprocess.run(["docker", "run", "--rm", "--entrypoint", "cat", image, IMAGE_MANIFEST],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise ConfigError(f"{image} carries no OpenEnv manifest ({IMAGE_MANIFEST}): {out.stderr.strip()[-300:]}. "
                          "Build it again with `hci-envs image build`")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "openenv.yaml").write_text(out.stdout)
    for name in (PROBE_PATH, DOCKERFILE):
        if not (ROOT / name).is_file():
            raise ConfigError(f"{ROOT / name} is missing: validating an image takes a checkout of hci-envs")
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    dockerfile = dest / DOCKERFILE
    lines = [f"FROM {image}" if line.startswith("FROM ") else line for line in dockerfile.read_text().splitlines()]
    command = subprocess.run(["docker", "image", "inspect", "--format", "{{json .Config.Cmd}}", image],
                             capture_output=True, text=True, timeout=60).stdout
    if "--osworld-gate-port" in command:
        # The osworld image serves one desktop behind a gate whose secret its provider hands it, and shows the
        # home at /home/user through a link only root may point: the validator can do neither, so it grades
        # the image's server with the plain command.
        lines.append(f"CMD {json.dumps(PLAIN_COMMAND)}")
    dockerfile.write_text("\n".join(lines) + "\n")
    return dest


def validate(target: str | None = None, *, image: str | None = None, level: str = "semantic",
             timeout: float = 1800.0) -> tuple[int, dict[str, Any], str]:
    """Run OpenEnv's validator on ``target`` (a server's URL; default: this checkout) or on ``image``: (its exit
    code, its JSON report, its text report)."""
    if level not in LEVELS:
        raise ConfigError(f"level must be one of {', '.join(LEVELS)}, not {level!r}", field="level")
    cli = openenv_cli()
    is_url = bool(target) and target.startswith(("http://", "https://"))
    with tempfile.TemporaryDirectory(prefix="hci-envs-openenv-") as work:
        if is_url:
            subject = target
        elif image:
            subject = str(image_package(image, Path(work) / "package"))
        else:
            subject = str(checkout_package(Path(work) / "package"))
        report_file = Path(work) / "report.json"
        argv = [cli, "validate", subject, "--output", str(report_file)]
        if not is_url:  # a server has no levels: the validator's URL checks are one set
            argv += ["--level", level]
        run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=work)
        try:
            report = json.loads(report_file.read_text())
        except (OSError, ValueError):
            report = {}
    return run.returncode, report, (run.stdout + run.stderr).strip()
