"""A trace bundle: one episode as a single zip archive that opens without hci-envs, to hand to someone who does
not run it (a reviewer, a bug report, a dataset): the screens, the video, the actions with who made each one, the
accessibility tree at each screen where it was recorded, the checker's answer, and a manifest with every file's
size and SHA-256, in plain formats (JSON, JSON lines, PNG, MP4/WebM) with a README inside that says how to read
them.

    hci-envs bundle EPISODE --out trace.zip
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hci_envs import __version__
from hci_envs.errors import ConfigError, EpisodeFormatError

from .store import VIDEO_TYPES, is_being_written, load_episode

FORMAT = "hci-envs trace bundle"
VERSION = 1
#: What of an episode folder goes into its bundle (the rest, such as a video's temporary files, stays out).
_PARTS = ("meta.json", "actions.jsonl", "raw/input.jsonl", "check.json", "frames/*.png", "a11y/*.json",
          *(f"*{suffix}" for suffix in VIDEO_TYPES))
#: Already compressed: stored as they are.
_STORED = {".png", *VIDEO_TYPES}

README = """# A recorded episode of a computer-use environment (hci-envs {version})

Everything here is plain: JSON, JSON lines (one JSON object per line), PNG and video files.
`manifest.json` lists every file with its size and SHA-256, and sums the episode up.

- `manifest.json`: the summary: environment, task, screen size, steps per actor, the checker's answer, and
  every file with its size and SHA-256.
- `meta.json`: the recording's own description: start state, clock origin (monotonic and wall time), counts.
- `actions.jsonl`: one step per line: `action` (what was done, in the action vocabulary below), `source` (who
  did it: `agent` or `human`), `t_start` and `t_end` (seconds since the clock origin), `frame_before` and
  `frame_after` (file names in `frames/`), `raw` (the range of `raw/input.jsonl` lines it came from) and, for
  an agent's action, `result` (what its tool answered).
- `raw/input.jsonl`: every input as it arrived: a person's VNC messages (`PointerEvent`, `KeyEvent`,
  `ClientCutText`) and the agent's actions.
- `frames/NNNNNN.png`: the screen, captured each time it had settled.
- `a11y/NNNNNN.json` (where recorded): the accessibility tree read right after the frame of the same number:
  `nodes`, each with `role`, `name`, `states`, `box` ([x, y, width, height] in screen pixels), `text`,
  `value` and `parent`.
- `check.json` (where the task was checked while recording): `task`, `score` (0 to 1), `success`, `details`.
- `*.mp4`, `*.webm` (where recorded): the step video (each step's screen, with the pointer and the action drawn
  on it) and the continuous capture.

Actions are JSON objects with a `type`: `click` (`x`, `y`, `button`, `count`, `modifiers`), `drag` (`path`),
`scroll` (`x`, `y`, `dx`, `dy`), `mouse_move`, `mouse_down`, `mouse_up`, `type_text` (`text`), `key`
(`keys`, such as `ctrl+s`), `key_down`, `key_up`, `wait` (`ms`), `clipboard_set` (`text`), and the reads
`screenshot`, `accessibility_tree`, `clipboard_get`, `cursor_position`. Coordinates are screen pixels.

Reading it needs nothing but Python's standard library:

```python
import json, zipfile
with zipfile.ZipFile("trace.zip") as bundle:
    manifest = json.loads(bundle.read("manifest.json"))
    steps = [json.loads(line) for line in bundle.read("actions.jsonl").splitlines()]
    for step in steps:
        print(step["source"], step["action"], step["frame_after"])
```
"""


def bundle_episode(episode: str | Path, out: str | Path) -> Path:
    """Write the episode folder ``episode`` to the zip archive ``out`` (a folder: ``<episode name>.zip`` in it);
    returns the archive's path. A recording still being written is refused, as is a folder that is not an
    episode."""
    path = Path(episode)
    if is_being_written(path / "raw" / "input.jsonl"):
        raise ConfigError(f"{path} is still being recorded: stop the recording first", field="episode")
    ep = load_episode(path)  # checks the format, and says what is wrong with it
    target = Path(out)
    if target.is_dir():
        target = target / f"{path.name}.zip"
    if target.suffix != ".zip":
        raise ConfigError(f"a trace bundle is a .zip file, not {target.name!r}", field="out")
    # no symbolic link: an episode folder holds its own files, and a link would put another file in the bundle
    files = sorted({f for pattern in _PARTS for f in path.glob(pattern) if f.is_file() and not f.is_symlink()})
    listed = {}
    for file in files:
        digest = hashlib.sha256()
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        listed[file.relative_to(path).as_posix()] = {"bytes": file.stat().st_size, "sha256": digest.hexdigest()}
    actors: dict[str, int] = {}
    for step in ep.actions:
        actors[step.get("source", "human")] = actors.get(step.get("source", "human"), 0) + 1
    check = _json_or_none(path / "check.json")
    manifest = {
        "format": FORMAT, "version": VERSION, "created": datetime.now(timezone.utc).isoformat(),
        "made_by": f"hci-envs {__version__}", "episode": path.name, "env": ep.meta.get("env"),
        "task": ep.meta.get("task") or (check or {}).get("task"), "screen": ep.meta.get("screen"),
        "steps": len(ep.actions), "steps_by_actor": actors,
        "frames": sum(1 for name in listed if name.startswith("frames/")),
        "accessibility_trees": sum(1 for name in listed if name.startswith("a11y/")),
        "check": None if check is None else {k: check.get(k) for k in ("task", "score", "success")},
        "videos": [name for name in listed if Path(name).suffix in VIDEO_TYPES],
        "files": listed,
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    with zipfile.ZipFile(partial, "w") as archive:
        archive.writestr("README.md", README.format(version=__version__), zipfile.ZIP_DEFLATED)
        archive.writestr("manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False), zipfile.ZIP_DEFLATED)
        for name in listed:
            kind = zipfile.ZIP_STORED if Path(name).suffix in _STORED else zipfile.ZIP_DEFLATED
            archive.write(path / name, name, kind)
    partial.replace(target)
    return target


def _json_or_none(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise EpisodeFormatError(f"{path}: not valid JSON ({exc})") from None
