"""Episodes to a Hugging Face ``datasets`` dataset (parquet, one row per step, images inline) and back.

Columns: ``episode`` (folder name), ``step``, ``source``, ``action_type``, ``action`` (JSON), ``t_start``,
``t_end``, ``pre_move`` (JSON), ``raw`` (JSON: the raw messages of the step), ``frame_before`` and
``frame_after`` (images), ``meta`` (JSON, the episode's meta.json) and ``episode_raw`` (the whole
raw/input.jsonl on each episode's first row, so that messages that belong to no action survive the round
trip).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hci_envs.errors import require

from .store import EpisodeFormatError, load_episode, new_episode_dir, write_json_atomic


def _datasets() -> Any:
    return require("datasets", "export", "exporting episodes")


def _features(datasets: Any) -> Any:
    v = datasets.Value
    return datasets.Features({
        "episode": v("string"), "step": v("int32"), "source": v("string"), "action_type": v("string"),
        "action": v("string"), "t_start": v("float64"), "t_end": v("float64"), "pre_move": v("string"),
        "raw": v("string"), "frame_before": datasets.Image(), "frame_after": datasets.Image(),
        "meta": v("string"), "episode_raw": v("string"),
    })


def _rows(paths: list[Path]) -> Iterator[dict[str, Any]]:
    for path in paths:
        episode = load_episode(path)
        by_index = {r["i"]: r for r in episode.raw}
        raw_text = (episode.path / "raw" / "input.jsonl").read_text(encoding="utf-8")
        meta = json.dumps(episode.meta, ensure_ascii=False)

        def frame(name: str | None, ep: Any = episode) -> dict[str, Any] | None:
            if name is None:
                return None
            return {"bytes": ep.frame(name).read_bytes(), "path": name}

        for n, record in enumerate(episode.actions):
            first, last = record.get("raw") or [None, None]
            raw = [by_index[i] for i in range(first, last + 1) if i in by_index] if first is not None else []
            yield {
                "episode": episode.path.name, "step": record["index"], "source": record.get("source", "human"),
                "action_type": record["action"]["type"], "action": json.dumps(record["action"], ensure_ascii=False),
                "t_start": record["t_start"], "t_end": record["t_end"],
                "pre_move": json.dumps(record.get("pre_move") or []), "raw": json.dumps(raw, ensure_ascii=False),
                "frame_before": frame(record.get("frame_before")), "frame_after": frame(record.get("frame_after")),
                "meta": meta, "episode_raw": raw_text if n == 0 else "",
            }


def find_episodes(paths: list[str | Path]) -> list[Path]:
    """Episode folders among ``paths``: each path is an episode, or a folder of episodes."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / "meta.json").exists():
            out.append(p)
        elif p.is_dir():
            out.extend(sorted(c for c in p.iterdir() if (c / "meta.json").exists()))
        else:
            raise EpisodeFormatError(f"{p}: neither an episode nor a folder of episodes", file=str(p))
    if not out:
        raise EpisodeFormatError(f"no episodes found in {', '.join(map(str, paths))}")
    return out


def export_episodes(paths: list[str | Path], out: str | Path) -> Any:
    """Write the episodes to ``out`` (a .parquet file) and return the ``datasets.Dataset``."""
    datasets = _datasets()
    episodes = find_episodes(paths)
    dataset = datasets.Dataset.from_generator(_rows, gen_kwargs={"paths": episodes}, features=_features(datasets))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    dataset.to_parquet(str(out))
    return dataset


def import_episodes(source: str | Path | Any, root: str | Path) -> list[Path]:
    """Rebuild episode folders under ``root`` from an exported parquet file (or a ``datasets.Dataset``)."""
    datasets = _datasets()
    if isinstance(source, str | Path):
        dataset = datasets.Dataset.from_parquet(str(source))
    else:
        dataset = source
    dataset = dataset.cast_column("frame_before", datasets.Image(decode=False))
    dataset = dataset.cast_column("frame_after", datasets.Image(decode=False))
    folders: dict[str, Path] = {}
    writers: dict[str, Any] = {}
    for row in dataset:
        name = row["episode"]
        if name not in folders:
            folder = new_episode_dir(Path(root), name)
            folders[name] = folder
            write_json_atomic(folder / "meta.json", json.loads(row["meta"]))
            (folder / "raw" / "input.jsonl").write_text(row["episode_raw"], encoding="utf-8")
            writers[name] = open(folder / "actions.jsonl", "w", encoding="utf-8")
        folder = folders[name]
        record: dict[str, Any] = {"index": row["step"], "action": json.loads(row["action"]),
                                  "t_start": row["t_start"], "t_end": row["t_end"]}
        raw = json.loads(row["raw"])
        if raw:
            record["raw"] = [raw[0]["i"], raw[-1]["i"]]
        pre_move = json.loads(row["pre_move"])
        if pre_move:
            record["pre_move"] = pre_move
        for key in ("frame_before", "frame_after"):
            image = row[key]
            if image is None:
                record[key] = None
                continue
            frame_name = image.get("path") or f"{row['step']:06d}-{key}.png"
            target = folder / "frames" / frame_name
            if not target.exists():
                target.write_bytes(image["bytes"])
            record[key] = frame_name
        record["source"] = row["source"]
        writers[name].write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
    for writer in writers.values():
        writer.close()
    return list(folders.values())
