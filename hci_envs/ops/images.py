"""Building the Docker images, offline if need be.

No registry is needed. The Debian base comes from a package mirror through debootstrap and ``docker import``
(every system package the desktop needs is in it), and the Python packages come from a wheelhouse built on
the host; the Dockerfiles then build without touching the network. Where a registry is reachable the same
Dockerfiles build from the public ``debian:bookworm-slim`` unchanged (pass ``base="debian:bookworm-slim"``).

    hci-envs image build                  # base-os (debootstrap) + wheelhouse + hci-envs/base + the env images
    hci-envs image build ENV_OR_PATH      # an image for one environment, its packages derived from its traits
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import inspect
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ConfigError, MissingDependencyError, ProviderError, require

from .. import image_contexts

#: The images' build contexts (the repository's images/ folder, installed as hci_envs.image_contexts).
IMAGES = Path(image_contexts.__file__).resolve().parent
#: The repository, when hci-envs runs from a checkout (editable install); None when it runs from a wheel.
CHECKOUT: Path | None = IMAGES.parent if (IMAGES.parent / "pyproject.toml").is_file() else None
#: Build contexts and the wheelhouse: the checkout's images/.build (private to its owner, see bootstrap), or,
#: from a wheel, a folder under the user's cache made private to them (the wheels hold the tasks' answers).
BUILD = (CHECKOUT / "images" / ".build" if CHECKOUT
         else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hci-envs" / "image-build")

BASE_OS = "hci-envs/base-os:bookworm"
PUBLIC_BASE = "debian:bookworm-slim"
BASE = "hci-envs/base:latest"
APPS = "hci-envs/apps:latest"
OSWORLD = "hci-envs/osworld:latest"
DEFAULT_MIRROR = "http://deb.debian.org/debian"

#: What the base image has: the desktop (the HumanComputerInterfaceable trait's packages, x11vnc and the
#: accessibility bus),
#: Python, fonts for Latin, CJK and emoji, tini as PID 1, and the tools the shell and Python traits use.
SYSTEM_PACKAGES = (
    "python3", "python3-venv", "python3-tk", "xvfb", "xauth", "openbox", "x11vnc", "xterm", "tini",
    "fonts-dejavu-core", "fonts-noto-cjk", "fonts-noto-color-emoji", "ca-certificates", "procps", "bash",
    "coreutils", "util-linux", "dbus-daemon", "at-spi2-core",
    # the agents' network policy: the server's rules in the container's own network namespace
    "nftables",
    # at-spi2-core pulls in dconf-service, which needs "default-dbus-session-bus | dbus-session-bus": apt picks
    # one, debootstrap does not resolve the choice and fails to configure; dbus-x11 is the one without systemd
    "dbus-x11",
)
#: Packages of which the images take only the files: Debian's novnc would pull in nodejs and numpy for a
#: proxy we do not use, when all we serve is its web page.
FILES_ONLY_PACKAGES = ("novnc",)
#: A file each of those packages installs: the Dockerfile fetches a package's files only where it is missing.
FILES_ONLY_MARKERS = {"novnc": "/usr/share/novnc/vnc.html"}

Progress = Callable[[str], None]


def _say(message: str) -> None:
    print(f"[hci-envs image] {message}", flush=True)


def docker_client() -> Any:
    docker = require("docker", "docker", "building and running images")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        raise ProviderError(f"cannot reach the Docker daemon: {exc}") from exc
    return client


def image_exists(client: Any, tag: str) -> bool:
    import docker

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


# -- the Debian base, from a mirror ----------------------------------------------------------------------------
def build_base_os(*, mirror: str = DEFAULT_MIRROR, suite: str = "bookworm", tag: str = BASE_OS,
                  packages: tuple[str, ...] = SYSTEM_PACKAGES, progress: Progress = _say) -> str:
    """debootstrap a minimal Debian with ``packages`` from ``mirror``, add the files of the files-only
    packages, trim it, and ``docker import`` it as ``tag``. Needs root and debootstrap."""
    if shutil.which("debootstrap") is None:
        raise MissingDependencyError("building the base from a mirror needs debootstrap: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise ConfigError("debootstrap needs root; run the image build as root (or with sudo)")
    client = docker_client()
    with tempfile.TemporaryDirectory(prefix="hci-envs-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        progress(f"debootstrap {suite} from {mirror} with {len(packages)} packages (a few minutes)...")
        started = time.monotonic()
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", suite, str(rootfs), mirror],
             progress, every=200)
        for package in FILES_ONLY_PACKAGES:
            _extract_package_files(package, rootfs, mirror, suite, progress)
        _slim(rootfs, progress)
        # The image keeps the mirror for apt, without any credentials its URL carried.
        (rootfs / "etc/apt/sources.list").write_text(f"deb {_without_credentials(mirror)} {suite} main\n")
        progress(f"debootstrap took {time.monotonic() - started:.0f}s; importing into Docker as {tag}")
        archive = Path(tmp) / "rootfs.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(rootfs, arcname=".")
        repository, _, version = tag.partition(":")
        image = client.api.import_image(src=str(archive), repository=repository, tag=version or "latest")
    progress(f"{tag} ready")
    return str(image)


#: Files the base leaves out, and keeps out of later package installs (dpkg path-exclude). The Mesa OpenGL
#: drivers and the LLVM they need are most of it: the desktop is for 2D apps and Xvfb runs without GLX; an
#: image that needs OpenGL removes /etc/dpkg/dpkg.cfg.d/hci-envs-slim and reinstalls libgl1-mesa-dri.
SLIM_EXCLUDES = (
    "/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*",
    "/usr/lib/x86_64-linux-gnu/dri/*", "/usr/lib/x86_64-linux-gnu/libLLVM*", "/usr/lib/x86_64-linux-gnu/libz3*",
    # image decoders only imlib2's optional loaders use (PostScript, HEIF, JPEG XL), and their data
    "/usr/lib/x86_64-linux-gnu/imlib2/loaders/ps.so", "/usr/lib/x86_64-linux-gnu/imlib2/loaders/heif.so",
    "/usr/lib/x86_64-linux-gnu/imlib2/loaders/jxl.so", "/usr/lib/x86_64-linux-gnu/libgs.so*",
    "/usr/lib/x86_64-linux-gnu/libx265*", "/usr/lib/x86_64-linux-gnu/libaom*", "/usr/lib/x86_64-linux-gnu/libjxl*",
    "/usr/lib/x86_64-linux-gnu/libheif*", "/usr/lib/x86_64-linux-gnu/libdav1d*", "/usr/share/ghostscript/*",
    "/usr/share/poppler/*",
)


def _slim(rootfs: Path, progress: Progress) -> None:
    import glob

    removed = 0
    for pattern in SLIM_EXCLUDES:
        for path in glob.glob(str(rootfs) + pattern):
            target = Path(path)
            if target.is_dir() and not target.is_symlink():
                for folder, _, files in os.walk(target):
                    removed += sum(os.lstat(os.path.join(folder, f)).st_size for f in files)
                shutil.rmtree(target)
            else:
                removed += target.lstat().st_size
                target.unlink()
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        shutil.rmtree(rootfs / cache, ignore_errors=True)
        (rootfs / cache / "partial").mkdir(parents=True)
    for index in (rootfs / "var/cache/apt").glob("*.bin"):  # apt rebuilds these on update
        index.unlink()
    config = rootfs / "etc/dpkg/dpkg.cfg.d/hci-envs-slim"
    config.write_text("".join(f"path-exclude={p}\n" for p in SLIM_EXCLUDES) +
                      "path-include=/usr/share/locale/locale.alias\n")
    progress(f"left out {removed / 2**20:.0f} MiB (docs, locales, OpenGL drivers) and the apt caches")


def _without_credentials(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    return urllib.parse.urlunsplit(parts._replace(netloc=host + (f":{parts.port}" if parts.port else "")))


def _extract_package_files(package: str, rootfs: Path, mirror: str, suite: str, progress: Progress) -> None:
    """Unpack a package's files into the root filesystem without its dependencies (``dpkg-deb -x``), fetched
    from the same mirror by apt inside the new root."""
    download = rootfs / "tmp" / "pkg"
    download.mkdir(parents=True, exist_ok=True)
    resolv = rootfs / "etc" / "resolv.conf"
    shutil.copy2("/etc/resolv.conf", resolv)  # name resolution inside the chroot, for the mirror
    (rootfs / "etc/apt/sources.list").write_text(f"deb {mirror} {suite} main\n")
    try:
        _run(["chroot", str(rootfs), "sh", "-c",
              f"apt-get update -q >/dev/null && cd /tmp/pkg && apt-get download -q {shlex.quote(package)}"], progress)
        deb = next(download.glob(f"{package}_*.deb"))
        _run(["dpkg-deb", "-x", str(deb), str(rootfs)], progress)
    finally:
        shutil.rmtree(download, ignore_errors=True)
        resolv.unlink(missing_ok=True)
    progress(f"added the files of {package}")


def _run(argv: list[str], progress: Progress, every: int = 0) -> None:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    try:
        for n, line in enumerate(proc.stdout or []):
            tail = (tail + [line.rstrip()])[-20:]
            if every and n % every == 0:
                progress(f"  {line.rstrip()}")
    finally:
        if proc.poll() is None:  # interrupted (Ctrl-C): the child must not outlive the build, nor its files
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if proc.wait() != 0:
        raise ProviderError(f"{' '.join(argv[:3])} ... failed:\n" + "\n".join(tail))


# -- one build at a time on the machine ---------------------------------------------------------------------------
_Builder = TypeVar("_Builder", bound=Callable[..., Any])
_building = threading.local()


def _lock_file() -> Path:
    """The machine's image builds' lock: in root's run directory, where agent accounts cannot open it (a lock an
    agent could hold would stop every build); a user that cannot write there locks their BUILD alone."""
    from ..sandbox.accounts import run_dir

    directory = run_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if os.access(directory, os.W_OK):
            return directory / "image-builds.lock"
    except OSError:
        pass
    return build_dir() / ".lock"


@contextlib.contextmanager
def one_build_at_a_time(progress: Progress = _say) -> Iterator[None]:
    """Hold the machine's image builds' lock for a build. Two builds at once, from one checkout or two (two CI
    jobs, two users), would each remove what the other reads: the same BUILD's wheelhouse and contexts, or the
    image a build replaced (:func:`_remove_replaced`) while the other builds on it, found by its tag a moment
    before. A second build waits for the first. A build inside one that holds it (build_all's, build_apps's
    wheelhouse) goes on. Also for a build made outside hci-envs on its images (tests)."""
    if getattr(_building, "held", False):
        yield
        return
    fd = os.open(_lock_file(), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("waiting for another image build on this machine to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        _building.held = True
        try:
            yield
        finally:
            _building.held = False
    finally:
        os.close(fd)


def _exclusive(builder: _Builder) -> _Builder:
    @functools.wraps(builder)
    def build(*args: Any, **kwargs: Any) -> Any:
        with one_build_at_a_time(kwargs.get("progress") or _say):
            return builder(*args, **kwargs)

    return build  # type: ignore[return-value]


# -- Python packages, as a wheelhouse -------------------------------------------------------------------------
#: The images' Python (Debian bookworm's): the wheelhouse must be built by the same minor version.
IMAGE_PYTHON = (3, 11)


#: What the images' wheelhouse holds: the server, episode video (recordings made in a container get their
#: video), and the checkers' readers of office documents (installed by the apps image).
IMAGE_EXTRAS = "server,video,tasks"


@_exclusive
def build_wheelhouse(dest: Path | None = None, *, extras: str = IMAGE_EXTRAS, progress: Progress = _say) -> Path:
    """Wheels of hci-envs and every dependency. The dependencies are fetched once per set of requirements
    (the only step that needs a package index); a change of hci-envs' own files rebuilds only its own wheel.
    From a checkout hci-envs' wheel is built from the source; from an installed wheel it is packed again
    from the installed files."""
    if sys.version_info[:2] != IMAGE_PYTHON:
        raise ConfigError(
            f"the images run Python {IMAGE_PYTHON[0]}.{IMAGE_PYTHON[1]} (Debian bookworm) and their wheels must match; "
            f"run the build with a Python {IMAGE_PYTHON[0]}.{IMAGE_PYTHON[1]} (this is {sys.version.split()[0]})"
        )
    dest = dest or BUILD / "wheels"
    deps_key = hashlib.sha256(_requirements_text().encode() + extras.encode()
                              + f"{sys.version_info[:2]}-{os.uname().machine}".encode()).hexdigest()
    own_key = _own_digest().hex()
    deps_stamp, own_stamp = dest / ".stamp", dest / ".own-stamp"
    if not (deps_stamp.exists() and deps_stamp.read_text() == deps_key):
        # Built aside and swapped in: a failed fetch leaves the previous wheelhouse intact.
        fresh = dest.with_name(dest.name + ".partial")
        shutil.rmtree(fresh, ignore_errors=True)
        build_dir()
        fresh.mkdir(parents=True)
        progress(f"building the wheelhouse in {dest} (pip wheel; needs an index once, never at image build)")
        own = _build_own_wheel(fresh, progress)
        # The build requirements too, so hci-envs' own wheel can be rebuilt later without an index.
        _run([sys.executable, "-m", "pip", "wheel", "--progress-bar", "off", "--wheel-dir", str(fresh),
              "--find-links", str(fresh), f"{own}[{extras}]", *_build_requirements()], progress, every=20)
        (fresh / ".stamp").write_text(deps_key)
        (fresh / ".own-stamp").write_text(own_key)
        shutil.rmtree(dest, ignore_errors=True)
        fresh.rename(dest)
    elif not (own_stamp.exists() and own_stamp.read_text() == own_key):
        progress("hci-envs changed: rebuilding its own wheel (no index needed)")
        for old in dest.glob("hci_envs-*.whl"):
            old.unlink()
        _build_own_wheel(dest, progress, offline=True)
        own_stamp.write_text(own_key)
    else:
        progress(f"wheelhouse {dest} is up to date")
    return dest


def build_dir() -> Path:
    """BUILD, made private to its owner: the wheelhouse and the contexts hold hci-envs' wheel, and with it
    the built-in tasks' answers, which agent accounts must not read."""
    BUILD.mkdir(parents=True, exist_ok=True)
    if BUILD.stat().st_uid == os.geteuid():
        BUILD.chmod(0o700)
    return BUILD


def _build_own_wheel(dest: Path, progress: Progress, *, offline: bool = False) -> Path:
    """hci-envs' own wheel into ``dest``: built from the checkout (``offline``: with the build requirements
    the wheelhouse already holds), or packed again from the installation."""
    if CHECKOUT is None:
        return _repack_installed(dest)
    index = ["--no-index", "--find-links", str(dest)] if offline else []
    _run([sys.executable, "-m", "pip", "wheel", "--progress-bar", "off", "--no-deps", *index,
          "--wheel-dir", str(dest), str(CHECKOUT)], progress, every=20)
    return next(dest.glob("hci_envs-*.whl"))


def _requirements_text() -> str:
    if CHECKOUT is not None:
        return (CHECKOUT / "pyproject.toml").read_text()
    from importlib.metadata import distribution

    return "\n".join(distribution("hci-envs").requires or [])


def _build_requirements() -> list[str]:
    if CHECKOUT is None:
        return []  # the repacked wheel needs no build
    import tomllib

    return list(tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["build-system"]["requires"])


def _own_digest() -> bytes:
    """Every file that goes into hci-envs' wheel (code and data), and the metadata that builds it."""
    if CHECKOUT is None:
        from importlib.metadata import distribution

        return hashlib.sha256((distribution("hci-envs").read_text("RECORD") or "").encode()).digest()
    digest = hashlib.sha256((CHECKOUT / "pyproject.toml").read_bytes())
    for package in ("hci_envs", "traits", "recorders", "images"):
        for path in sorted((CHECKOUT / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and ".build" not in path.parts:
                digest.update(path.relative_to(CHECKOUT).as_posix().encode())
                digest.update(path.read_bytes())
    return digest.digest()


#: Files an installer adds to a distribution's metadata, which a wheel does not carry.
_INSTALLER_FILES = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}


def _repack_installed(dest: Path) -> Path:
    """A wheel of the installed hci-envs, from its files as RECORD lists them (scripts are left out: the
    installer makes them again from the entry points)."""
    import base64
    import zipfile
    from importlib.metadata import distribution

    dist = distribution("hci-envs")
    files = [f for f in dist.files or [] if ".." not in f.parts and f.suffix != ".pyc"
             and not (f.parts[0].endswith(".dist-info") and f.name in _INSTALLER_FILES)]
    info = next((f.parts[0] for f in files if f.parts[0].endswith(".dist-info")), None)
    if info is None or not any(f.parts[0] == "hci_envs" for f in files):
        raise ConfigError("hci-envs' installed files are not listed (RECORD); reinstall it with pip")
    wheel = dest / f"hci_envs-{dist.version}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in files:
            data = Path(dist.locate_file(f)).read_bytes()
            zf.writestr(f.as_posix(), data)
            sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{f.as_posix()},sha256={sha},{len(data)}")
        record.append(f"{info}/RECORD,,")
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


# -- images ----------------------------------------------------------------------------------------------------
def docker_build(context: Path, tag: str, *, buildargs: dict[str, str] | None = None,
                 progress: Progress = _say) -> str:
    """``docker build`` through the SDK, streaming the build's output; returns the image id. The image the tag
    named before, replaced by this one, is removed once nothing uses it (see :func:`_remove_replaced`), so that
    building again and again does not fill the disk."""
    client = docker_client()
    progress(f"building {tag}")
    started = time.monotonic()
    try:
        previous = client.images.get(tag).id
    except Exception:  # noqa: BLE001 - not there yet
        previous = None
    api = client.api
    image_id = None
    errors = []
    for chunk in api.build(path=str(context), tag=tag, buildargs=buildargs or {}, rm=True, forcerm=True,
                           decode=True, pull=False):
        if "stream" in chunk:
            line = chunk["stream"].rstrip()
            if line.startswith("Step ") or "installing" in line or "Successfully" in line:
                progress(f"  {line}")
        if "error" in chunk:
            errors.append(chunk["error"])
        if "aux" in chunk and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
    if errors or image_id is None:
        raise ProviderError(f"building {tag} failed: {' '.join(errors) or 'no image id'}")
    progress(f"{tag} built in {time.monotonic() - started:.0f}s")
    _remove_replaced(client, previous if previous != image_id else None, progress)
    return image_id


def _remove_replaced(client: Any, replaced: str | None, progress: Progress) -> None:
    """Remove the images builds replaced (``replaced``, and those of earlier builds kept in BUILD's list), by id:
    nobody else's, and only while no tag names them. One that a container or another image still uses stays on
    the list until a later build finds it free (an old hci-envs/base, until the old apps image built on it is
    gone). Called under the build lock (:func:`one_build_at_a_time`)."""
    listed = build_dir() / "replaced-images"
    waiting = set(listed.read_text().split()) if listed.exists() else set()
    if replaced:
        waiting.add(replaced)
    kept, removed = set(), 0
    for image_id in sorted(waiting):
        try:
            if client.images.get(image_id).tags:
                continue  # tagged again: somebody's image now
            client.images.remove(image_id)
            removed += 1
        except Exception as exc:  # noqa: BLE001 - gone already (not found), or still in use: try again next time
            if "No such image" not in str(exc) and "not found" not in str(exc).lower():
                kept.add(image_id)
    listed.write_text("".join(f"{i}\n" for i in sorted(kept)))
    if removed:
        progress(f"removed {removed} image(s) that builds replaced")


@_exclusive
def build_base(*, base: str = BASE_OS, tag: str = BASE, offline: bool = True, mirror: str = DEFAULT_MIRROR,
               progress: Progress = _say) -> str:
    """hci-envs/base: the base desktop image. ``offline`` makes the Debian base with debootstrap first
    (unless it exists); otherwise ``base`` is pulled or used as it is."""
    client = docker_client()
    if offline and base == BASE_OS and not image_exists(client, BASE_OS):
        build_base_os(mirror=mirror, progress=progress)
    wheels = build_wheelhouse(progress=progress)
    context = build_dir() / "base"
    if context.exists():
        shutil.rmtree(context)
    shutil.copytree(IMAGES / "base", context)
    shutil.copytree(wheels, context / "wheels", ignore=shutil.ignore_patterns(".stamp"))
    packages = " ".join(SYSTEM_PACKAGES)
    files_only = " ".join(f"{p}:{FILES_ONLY_MARKERS[p]}" for p in FILES_ONLY_PACKAGES)
    return docker_build(context, tag, buildargs={"BASE": base, "SYSTEM_PACKAGES": packages,
                                                 "FILES_ONLY_PACKAGES": files_only}, progress=progress)


@_exclusive
def build_dockerfile_dir(directory: Path, tag: str, *, files: dict[str, Path] | None = None,
                         base: str = BASE, buildargs: dict[str, str] | None = None, progress: Progress = _say) -> str:
    """Build an image from a folder of images/ (with extra ``files``, or folders, copied into its context)."""
    context = build_dir() / directory.name
    if context.exists():
        shutil.rmtree(context)
    shutil.copytree(directory, context)
    for name, source in (files or {}).items():
        if source.is_dir():
            shutil.copytree(source, context / name, ignore=shutil.ignore_patterns(".stamp", ".own-stamp"))
        else:
            shutil.copy2(source, context / name)
    return docker_build(context, tag, buildargs={"BASE": base, **(buildargs or {})}, progress=progress)


def build_apps(*, progress: Progress = _say) -> str:
    """hci-envs/apps: the base with the task suite's real apps and the checkers' readers."""
    return build_dockerfile_dir(IMAGES / "apps", APPS, files={"wheels": build_wheelhouse(progress=progress)},
                                progress=progress)


@_exclusive
def build_osworld(*, progress: Progress = _say) -> str:
    """hci-envs/osworld: the apps image with the rest of OSWorld's apps and its world (images/osworld), and
    pyautogui for the agent's side (the code OSWorld's agents send), as a checkout's .cache/osworld-guest has."""
    from .bootstrap import OSWORLD_GUEST_REQUIREMENT

    wheels = BUILD / "osworld-guest-wheels"
    stamp = wheels / ".stamp"
    if not stamp.is_file() or stamp.read_text() != OSWORLD_GUEST_REQUIREMENT:
        # Built aside and swapped in, as the wheelhouse is: needs an index once, never at image build.
        fresh = wheels.with_name(wheels.name + ".new")
        shutil.rmtree(fresh, ignore_errors=True)
        fresh.mkdir(parents=True)
        progress(f"building the wheels of {OSWORLD_GUEST_REQUIREMENT} for the osworld image (pip wheel)")
        _run([sys.executable, "-m", "pip", "wheel", "--progress-bar", "off", "--wheel-dir", str(fresh),
              OSWORLD_GUEST_REQUIREMENT], progress)
        (fresh / ".stamp").write_text(OSWORLD_GUEST_REQUIREMENT)
        shutil.rmtree(wheels, ignore_errors=True)
        fresh.rename(wheels)
    return build_dockerfile_dir(IMAGES / "osworld", OSWORLD, files={"guest-wheels": wheels}, base=APPS,
                                buildargs={"GUEST_REQUIREMENT": OSWORLD_GUEST_REQUIREMENT}, progress=progress)


def derived_dockerfile(env_spec: str, env_class: type, *, base: str = BASE, module_file: str | None = None) -> str:
    """The Dockerfile of an environment's image: the base, the packages its traits declare, its code."""
    packages = [p for p in env_class.all_system_packages() if p not in SYSTEM_PACKAGES]
    python_packages = env_class.all_python_packages()
    lines = [f"FROM {base}"]
    if packages:
        lines.append(f"RUN sh /usr/local/sbin/install-system-packages {' '.join(sorted(packages))}")
    if python_packages:  # these need an index (or PIP_INDEX_URL pointing at a mirror) at build time
        quoted = " ".join(json.dumps(p) for p in python_packages)
        lines.append(f"RUN /opt/hci-envs/bin/pip install --no-cache-dir {quoted}")
    serve_env = env_spec
    if module_file is not None:
        lines.append(f"COPY {Path(module_file).name} /opt/env/{Path(module_file).name}")
        serve_env = f"/opt/env/{Path(module_file).name}:{env_spec.rpartition(':')[2]}"
    # the base's entrypoint starts as root and runs the server as hci (see images/base/entrypoint.sh)
    lines += [f"ENV HCI_ENVS_ENV={serve_env}",
              'CMD ["hci-envs", "serve", "--host", "0.0.0.0", "--port", "8000"]']
    return "\n".join(lines) + "\n"


@_exclusive
def build_env_image(env_spec: str, tag: str | None = None, *, base: str = BASE, progress: Progress = _say) -> str:
    """``hci-envs image build ENV``: an image for an installed environment name, ``module:Class`` or
    ``path/to/file.py:Class``, with the system packages its traits need."""
    from ..plugins import load_env_class

    env_class = load_env_class(env_spec)
    module_file = None
    if ":" in env_spec and env_spec.rpartition(":")[0].endswith(".py"):
        module_file = env_spec.rpartition(":")[0]
    elif ":" in env_spec:
        source = inspect.getsourcefile(env_class)
        if source and not _inside_project(source):
            module_file = source
            env_spec = f"{Path(source).name}:{env_class.__name__}"
    name = tag or f"hci-envs/{env_class.__name__.lower()}:latest"
    context = build_dir() / f"env-{env_class.__name__.lower()}"
    if context.exists():
        shutil.rmtree(context)
    context.mkdir(parents=True)
    if module_file:
        shutil.copy2(module_file, context / Path(module_file).name)
    (context / "Dockerfile").write_text(derived_dockerfile(env_spec, env_class, base=base, module_file=module_file))
    progress(f"derived Dockerfile for {env_class.__name__}:\n" + textwrap.indent((context / "Dockerfile").read_text(), "    "))
    return docker_build(context, name, progress=progress)


def _inside_project(path: str) -> bool:
    """Code of hci-envs itself (installed in every image) need not be copied into one."""
    from importlib.util import find_spec

    specs = [find_spec(name) for name in (__package__, f"{__package__}.traits", f"{__package__}.recorders")]
    roots = [Path(location).resolve() for spec in specs if spec for location in spec.submodule_search_locations or []]
    return any(Path(path).resolve().is_relative_to(root) for root in roots)


@_exclusive
def build_all(*, for_tests: bool = False, offline: bool = True, mirror: str = DEFAULT_MIRROR,
              base: str | None = None, progress: Progress = _say) -> dict[str, str]:
    """Everything: the Debian base (offline), the wheelhouse, hci-envs/base, hci-envs/editor, hci-envs/apps,
    hci-envs/osworld, and with ``for_tests`` the test suite's image instead of the osworld one (the suite's docker
    tier builds that itself, beside the tiers that run desktops: see tests/test_osworld_docker.py). ``base``
    overrides the image hci-envs/base starts from (default: the debootstrap one offline, debian:bookworm-slim
    online)."""
    started = time.monotonic()
    base = base or (BASE_OS if offline else PUBLIC_BASE)
    built = {BASE: build_base(base=base, offline=offline, mirror=mirror, progress=progress)}
    built["hci-envs/editor:latest"] = build_dockerfile_dir(IMAGES / "editor", "hci-envs/editor:latest",
                                                           progress=progress)
    built[APPS] = build_apps(progress=progress)
    if not for_tests:
        built[OSWORLD] = build_osworld(progress=progress)
    else:
        progress(f"{OSWORLD}: built by the test suite's docker tier when it starts")
        if CHECKOUT is None:
            raise ConfigError("the test suite's image is built from a checkout of hci-envs (it needs tests/)")
        built["hci-envs-test/probe:latest"] = build_dockerfile_dir(
            IMAGES / "testing", "hci-envs-test/probe:latest",
            files={"tk_probe.py": CHECKOUT / "tests" / "apps" / "tk_probe.py"}, progress=progress,
        )
    progress(f"images ready in {time.monotonic() - started:.0f}s: {', '.join(built)}")
    return built
