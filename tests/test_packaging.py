"""The package as a user installs it: a wheel in a fresh virtual environment, beside other packages.

The wheel installs the repository's traits/, recorders/ and images/ inside hci_envs, so that it claims no
top-level name of another PyPI package (Enthought's `traits`); the light client (`hci-envs[docker]`, no server
dependencies) starts containers; `hci-envs image build` works from the wheel, with no checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import need

ROOT = Path(__file__).resolve().parent.parent
PROBE_IMAGE = "hci-envs-test/probe:latest"
BASE_IMAGE = "hci-envs/base:latest"


def run(cmd: list[str], *, cwd: Path, timeout: float = 600, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    # PYTHONPATH and the like from the test run must not leak the checkout into the fresh environment.
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**clean, **env})
    if check:
        assert done.returncode == 0, f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(out), str(ROOT)], cwd=out)
    return next(out.glob("hci_envs-*.whl"))


@pytest.fixture(scope="module")
def light_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment with hci-envs' light client (the docker extra) and Enthought Traits."""
    home = tmp_path_factory.mktemp("light")
    run([sys.executable, "-m", "venv", str(home / "venv")], cwd=home)
    python = home / "venv" / "bin" / "python"
    done = run([str(python), "-m", "pip", "install", "-q", f"{wheel}[docker]", "traits>=6.4"], cwd=home, check=False)
    need(done.returncode == 0, f"installing hci-envs[docker] and traits from the package index: {done.stderr[-500:]}")
    return python


@pytest.mark.fake
def test_every_folder_of_images_is_in_the_wheel(wheel: Path) -> None:
    import zipfile

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {p.name for p in (ROOT / "images").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    packaged = {name.rpartition(".")[2] for name in config["packages"] if name.startswith("hci_envs.image_contexts.")}
    assert folders == packaged, "add each folder of images/ to [tool.setuptools] packages and package-data"
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in folders:
        for path in (ROOT / "images" / folder).iterdir():
            assert f"hci_envs/image_contexts/{folder}/{path.name}" in names
    assert not any(n.split("/")[0] in ("traits", "recorders", "images") for n in names), "a top-level name is claimed"


@pytest.mark.fake
def test_every_file_of_the_package_is_in_the_wheel(wheel: Path) -> None:
    """Each subpackage is named in [tool.setuptools] packages, and its data files in package-data: one left out
    is missing from every pip install (the editable install of a checkout does not show it)."""
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    source = ROOT / "hci_envs"
    missing = [str(path.relative_to(ROOT)) for path in source.rglob("*")
               if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
               and f"hci_envs/{path.relative_to(source)}" not in names]
    assert not missing, f"not in the wheel (add them to pyproject.toml): {missing}"


@pytest.mark.fake
def test_the_collection_page_is_in_the_wheel(wheel: Path) -> None:
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    page = ROOT / "hci_envs" / "server" / "collect_page"
    files = [path.name for path in page.iterdir()]
    assert {"index.html", "collect.js", "collect.css"} <= set(files)
    for name in files:
        assert f"hci_envs/server/collect_page/{name}" in names, "add it to package-data in pyproject.toml"


@pytest.mark.fake
@pytest.mark.slow  # a fresh environment installed from the package index
def test_enthought_traits_and_hci_envs_work_side_by_side(light_venv: Path, tmp_path: Path) -> None:
    both = (
        "from traits.api import HasTraits, Int\n"
        "class Counter(HasTraits):\n"
        "    count = Int(3)\n"
        "assert Counter().count == 3\n"
        "from hci_envs.traits import BashAccess, HumanComputerInterfaceable, PythonAccess\n"
        "from hci_envs.recorders import reduce_events\n"
        "from hci_envs.plugins import load_env_class\n"
        "print(load_env_class('workstation').__module__)\n"
    )
    done = run([str(light_venv), "-c", both], cwd=tmp_path)
    assert done.stdout.strip() == "hci_envs.traits.envs"
    check = run([str(light_venv), "-m", "pip", "check"], cwd=tmp_path)
    assert "No broken requirements" in check.stdout
    # The light client stays light: no server, no desktop.
    done = run([str(light_venv), "-c", "import importlib.util as u; print([m for m in ('fastapi', 'mcp', 'mss') if u.find_spec(m)])"],
               cwd=tmp_path)
    assert done.stdout.strip() == "[]"


@pytest.mark.docker
def test_the_light_client_starts_a_container(light_venv: Path, tmp_path: Path) -> None:
    need_image(PROBE_IMAGE)
    script = (
        "import sys\n"
        "from hci_envs import HciEnvClient\n"
        f"with HciEnvClient.from_docker_image({PROBE_IMAGE!r}) as env:\n"
        "    first = env.reset()\n"
        "    after = env.step({'type': 'click', 'x': 5, 'y': 5})\n"
        "    print(first.observation.screenshot.width, after.observation.screenshot.width, 'fastapi' in sys.modules)\n"
    )
    done = run([str(light_venv), "-c", script], cwd=tmp_path, timeout=300)
    assert done.stdout.split()[-3:] == ["1280", "1280", "False"], done.stdout


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(1500)  # two image builds; the build's own limit below is what bounds it
def test_image_build_from_the_installed_wheel(light_venv: Path, tmp_path: Path) -> None:
    """`hci-envs image build` with no checkout: the contexts come from the package, hci-envs' own wheel is
    packed again from the installed files, and the image holds the same package layout."""
    need_image("hci-envs/base-os:bookworm")
    cli = light_venv.parent / "hci-envs"
    done = run([str(cli), "image", "build"], cwd=tmp_path, timeout=1500, XDG_CACHE_HOME=str(Path.home() / ".cache"))
    assert "hci-envs/base:latest" in done.stdout and "hci-envs/editor:latest" in done.stdout, done.stdout[-2000:]
    wheelhouse = Path.home() / ".cache" / "hci-envs" / "image-build"
    assert wheelhouse.stat().st_mode & 0o077 == 0, "the wheelhouse holds the tasks' answers: it must be private"
    inside = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "/opt/hci-envs/bin/python", BASE_IMAGE, "-c",
         "import hci_envs.traits, hci_envs.recorders, importlib.util as u; print(u.find_spec('traits'))"],
        capture_output=True, text=True, timeout=300,
    )
    assert inside.returncode == 0 and inside.stdout.strip() == "None", inside.stderr


@pytest.mark.fake
@pytest.mark.slow
def test_uninstalling_hci_envs_leaves_enthought_traits_working(light_venv: Path, wheel: Path, tmp_path: Path) -> None:
    run([str(light_venv), "-m", "pip", "uninstall", "-y", "-q", "hci-envs"], cwd=tmp_path)
    try:
        run([str(light_venv), "-c", "from traits.api import HasTraits, Str; HasTraits()"], cwd=tmp_path)
    finally:  # put it back for any test that runs after this one
        run([str(light_venv), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], cwd=tmp_path)


def need_image(tag: str) -> None:
    done = subprocess.run(["docker", "image", "inspect", tag], capture_output=True)
    need(done.returncode == 0, f"the image {tag}; `hci-envs image build --for-tests` builds it")


@pytest.mark.x11
def test_installed_with_pip_the_answers_are_the_servers_alone(wheel: Path) -> None:
    """pip installs a package readable by everyone: the first server started from it makes its task answers
    (the built-in task file, the real-application suite) private, after asking as an agent account; the agent,
    with its own tools, then reads none of them."""
    need(os.geteuid() == 0, "root: the server runs agents as accounts of their own")
    import sysconfig

    import httpx
    from helpers import McpClient, ServerProcess, agent_writable_dir

    home = agent_writable_dir("hci-envs-pip-")
    os.chmod(home, 0o755)  # like a user's home: others may enter it
    run([sys.executable, "-m", "venv", str(home / "venv")], cwd=home)
    python = home / "venv" / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], cwd=home)
    # the server's dependencies from this test run's environment (not hci_envs: the wheel's own is first)
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=home).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    package = site / "hci_envs" / "tasks"
    assert run([str(python), "-c", "import hci_envs; print(hci_envs.__file__)"], cwd=home).stdout.startswith(str(site))
    answers = [package / "builtin.jsonl", package / "suite" / "editor.py"]
    assert all(path.stat().st_mode & 0o004 for path in answers)  # as pip left them: everyone's
    control = "pip-control-token-0123456789abcdef"
    with ServerProcess("--env", "workstation", "--agent-tokens", command=[str(home / "venv" / "bin" / "hci-envs")],
                       env={"HCI_ENVS_CONTROL_TOKEN": control}) as server:
        assert any("made private" in line and "suite" in line for line in server.output), server.output
        info = httpx.post(f"{server.base_url}/sessions", headers={"authorization": f"Bearer {control}"},
                          timeout=120).json()
        with McpClient(info["mcp_tools_url"], info["agent_token"]) as mcp:
            def bash(command: str) -> dict:
                return mcp.call("bash", {"command": command}).structured_content

            tried = bash(f"cat {answers[0]}; cat {answers[1]}; ls {package / 'suite'}; "
                         f"{python} -c 'import hci_envs.tasks.suite'")
            assert "form-contact" not in tried["stdout"] and "def " not in tried["stdout"], tried
            assert tried["stderr"].count("Permission denied") >= 3, tried
        # the server itself still reads them: a built-in task resets and scores
        with httpx.Client(base_url=server.base_url, headers={"authorization": f"Bearer {control}"},
                          timeout=120) as http:
            assert http.post("/reset", json={"task": "form-contact"}).status_code == 200
            assert "score" in http.post("/score", json={}).json()


HOLD_BUILD = """
import sys, time
from pathlib import Path
from hci_envs.ops import images

images.BUILD = Path(sys.argv[1])

@images._exclusive
def build(seconds, progress=None):
    print("building", time.monotonic(), flush=True)
    time.sleep(seconds)
    print("built", time.monotonic(), flush=True)

build(float(sys.argv[2]))
"""


@pytest.mark.fake
def test_two_image_builds_on_one_machine_take_turns(tmp_path: Path) -> None:
    """A second build (another process: a second CI job, a second terminal, another checkout with its own build
    folder) waits for the first, and says so, instead of rebuilding the wheelhouse and contexts under it or removing
    the image the first builds on. The machine's lock is in the run directory (here the test's own, so that a real
    build beside the test does not hold it)."""
    env = {**os.environ, "HCI_ENVS_RUN_DIR": str(tmp_path / "run")}
    first = subprocess.Popen([sys.executable, "-c", HOLD_BUILD, str(tmp_path / "checkout-1"), "1.5"],
                             stdout=subprocess.PIPE, text=True, env=env)
    assert first.stdout.readline().startswith("building")
    second = subprocess.run([sys.executable, "-c", HOLD_BUILD, str(tmp_path / "checkout-2"), "0"],
                            capture_output=True, text=True, timeout=60, env=env)
    first_out, _ = first.communicate(timeout=60)
    first_built = float(first_out.split()[-1])
    second_building = float(next(line for line in second.stdout.splitlines() if line.startswith("building")).split()[1])
    assert second_building >= first_built, (first_out, second.stdout)
    assert "waiting for another image build on this machine to finish" in second.stdout + second.stderr
    assert (tmp_path / "run" / "image-builds.lock").stat().st_mode & 0o777 == 0o600  # agents cannot open it
