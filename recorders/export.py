"""Episodes to a Hugging Face ``datasets`` dataset (parquet, one row per step, images inline) and back.

Columns: ``episode`` (folder name), ``step``, ``source``, ``action_type``, ``action`` (JSON), ``t_start``,
``t_end``, ``pre_move`` (JSON), ``raw`` (JSON: the raw messages of the step), ``frame_before`` and
``frame_after`` (images), ``frame_shared_with`` and ``result`` (see store.py), ``segment`` (agent, attempt,
correction or human: see segments.py), ``meta`` (JSON, the episode's meta.json) and ``episode_raw`` (the whole raw/input.jsonl on each
episode's first row, so that messages that belong to no action survive the round trip).

Episodes waiting for their demonstrator's review (review.py) are left out, and said so. ``segments`` keeps
only the steps of those segments (the people's corrections, the agent's attempts before
them): a dataset to train on, whose import gives episodes of those steps only. :func:`export_pairs` writes the
preference pairs of the hand-overs instead.

A bad episode never stops the others: with ``on_error`` given, export and import report it there and go on.
Import never merges episodes: two episodes with the same folder name (from different source folders) are
told apart by their meta.json and by their step numbers starting again, and the second gets a new name.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hci_envs.errors import HciEnvsError, require

from .segments import check_segments, preference_pairs, select_steps
from .store import EpisodeFormatError, load_episode, new_episode_dir, write_json_atomic

log = logging.getLogger(__name__)

#: Told about an episode that could not be exported, imported or replayed: (the episode, the error).
OnError = Callable[[str, Exception], None]


def _datasets() -> Any:
    return require("datasets", "export", "exporting episodes")


def _features(datasets: Any) -> Any:
    v = datasets.Value
    return datasets.Features({
        "episode": v("string"), "step": v("int32"), "source": v("string"), "action_type": v("string"),
        "action": v("string"), "t_start": v("float64"), "t_end": v("float64"), "pre_move": v("string"),
        "raw": v("string"), "frame_before": datasets.Image(), "frame_after": datasets.Image(),
        "frame_shared_with": v("int32"), "result": v("string"), "segment": v("string"), "meta": v("string"),
        "episode_raw": v("string"),
    })


def _rows(paths: list[Path], segments: tuple[str, ...] | None = None) -> Iterator[dict[str, Any]]:
    for path in paths:
        episode = load_episode(path)
        by_index = {r["i"]: r for r in episode.raw}
        raw_text = (episode.path / "raw" / "input.jsonl").read_text(encoding="utf-8")
        meta = json.dumps(episode.meta, ensure_ascii=False)

        def frame(name: str | None, ep: Any = episode) -> dict[str, Any] | None:
            if name is None:
                return None
            return {"bytes": ep.frame(name).read_bytes(), "path": name}

        for n, (record, segment) in enumerate(select_steps(episode, segments)):
            first, last = record.get("raw") or [None, None]
            raw = [by_index[i] for i in range(first, last + 1) if i in by_index] if first is not None else []
            yield {
                "episode": episode.path.name, "step": record["index"], "source": record.get("source", "human"),
                "action_type": record["action"]["type"], "action": json.dumps(record["action"], ensure_ascii=False),
                "t_start": record["t_start"], "t_end": record["t_end"],
                "pre_move": json.dumps(record.get("pre_move") or []), "raw": json.dumps(raw, ensure_ascii=False),
                "frame_before": frame(record.get("frame_before")), "frame_after": frame(record.get("frame_after")),
                "frame_shared_with": record.get("frame_shared_with"), "result": record.get("result"),
                "segment": segment, "meta": meta, "episode_raw": raw_text if n == 0 else "",
            }


def find_episodes(paths: list[str | Path]) -> list[Path]:
    """Episode folders among ``paths``: each path is an episode, or a folder of episodes. Episodes a killed
    recorder left open are finished first (see recovery.py)."""
    from .recovery import finish_open

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
    finish_open(out)
    return out


def _fail(on_error: OnError | None, episode: str, exc: Exception) -> None:
    if on_error is None:
        raise exc
    on_error(episode, exc)


def export_episodes(paths: list[str | Path], out: str | Path, *, on_error: OnError | None = None,
                    segments: tuple[str, ...] | None = None, on_note: Callable[[str], None] | None = None) -> Any:
    """Write the episodes to ``out`` (a .parquet file) and return the ``datasets.Dataset``; with ``segments``,
    only their steps.

    Every episode is read and checked before anything is written; without ``on_error`` the first bad one
    raises :class:`EpisodeFormatError`, with it the bad ones are reported there and left out."""
    datasets = _datasets()
    segments = check_segments(segments)
    episodes = _checked(paths, on_error, on_note)
    dataset = datasets.Dataset.from_generator(_rows, gen_kwargs={"paths": episodes, "segments": segments},
                                              features=_features(datasets))
    if not len(dataset):
        raise EpisodeFormatError(f"no step of the episodes is in the segments {', '.join(segments or ())}")
    return _write(dataset, out)


def reviewed_episodes(paths: list[str | Path], on_note: Callable[[str], None] | None = None) -> list[Path]:
    """The episodes among ``paths`` that a dataset may hold: those waiting for their demonstrator's review
    (review.py) are left out, and ``on_note`` (default: the log) is told which."""
    from .review import split_reviewed

    chosen, pending = split_reviewed(find_episodes(paths))
    if pending:
        (on_note or log.warning)(f"left out {len(pending)} episode(s) not yet submitted by their demonstrator: "
                                 f"{', '.join(p.name for p in pending)}")
    return chosen


def _checked(paths: list[str | Path], on_error: OnError | None, on_note: Callable[[str], None] | None) -> list[Path]:
    episodes = []
    for path in reviewed_episodes(paths, on_note):
        try:
            load_episode(path)
        except EpisodeFormatError as exc:
            _fail(on_error, str(path), exc)
            continue
        episodes.append(path)
    if not episodes:
        raise EpisodeFormatError("no episode could be exported")
    return episodes


def _write(dataset: Any, out: str | Path) -> Any:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    dataset.to_parquet(str(out))
    return dataset


def export_pairs(paths: list[str | Path], out: str | Path, *, on_error: OnError | None = None,
                 on_note: Callable[[str], None] | None = None) -> Any:
    """The preference pairs of hand-overs and of proposals people edited or overrode (segments.preference_pairs)
    to ``out``, one row each: ``source`` ("handover", "edit" or "override"), ``prompt`` (for a hand-over the
    reason the agent asked, with the person's note), ``chosen`` and ``rejected`` (actions as JSON), and the
    screens each was taken on, as TRL's preference trainers read them."""
    datasets = _datasets()
    rows = []
    for path in _checked(paths, on_error, on_note):
        episode = load_episode(path)
        for pair in preference_pairs(episode):
            if "handover" in pair:
                source = "handover"
                prompt = f"{pair['reason']}" + (f" (the person's note: {pair['note']})" if pair["note"] else "")
            else:  # propose and accept: the proposal a person edited or did otherwise
                source, prompt = pair["decision"], "the agent's next action on this screen"
            rows.append({
                "episode": pair["episode"], "source": source, "prompt": prompt,
                "chosen": json.dumps(pair["chosen"], ensure_ascii=False),
                "rejected": json.dumps(pair["rejected"], ensure_ascii=False),
                "chosen_frame": _frame_file(episode, pair["chosen_frame"]),
                "rejected_frame": _frame_file(episode, pair["rejected_frame"]),
            })
    if not rows:
        raise EpisodeFormatError("nothing to pair in these episodes: no hand-over with both an attempt of the "
                                 "agent and a person's action, and no proposal a person edited or overrode")
    v = datasets.Value
    features = datasets.Features({
        "episode": v("string"), "source": v("string"), "prompt": v("string"), "chosen": v("string"),
        "rejected": v("string"), "chosen_frame": datasets.Image(), "rejected_frame": datasets.Image()})
    return _write(datasets.Dataset.from_list(rows, features=features), out)


def _frame_file(episode: Any, name: str | None) -> dict[str, Any] | None:
    return None if name is None else {"bytes": episode.frame(name).read_bytes(), "path": name}


class _Import:
    """One episode being rebuilt from its rows."""

    def __init__(self, root: Path, name: str, meta_text: str, on_note: Callable[[str], None]) -> None:
        self.name = name
        self.folder: Path | None = None
        self.writer: Any = None
        self.steps: set[int] = set()
        self.error: Exception | None = None
        try:  # before any folder exists: an episode whose meta cannot be read leaves nothing behind
            meta = json.loads(meta_text)
            if not isinstance(meta, dict):
                raise EpisodeFormatError("meta is not a JSON object")
        except ValueError as exc:
            self.error = exc
            return
        self.folder = new_episode_dir(root, name)
        if self.folder.name != name:
            on_note(f"episode {name!r} is imported as {self.folder.name!r}: that name was taken (by a folder "
                    f"already in {root} or another episode of the same name in this file)")
        write_json_atomic(self.folder / "meta.json", meta)
        (self.folder / "raw" / "input.jsonl").touch()  # filled from the row that carries it
        self.writer = open(self.folder / "actions.jsonl", "w", encoding="utf-8")

    def add(self, row: dict[str, Any]) -> None:
        assert self.folder is not None
        if row["episode_raw"]:
            (self.folder / "raw" / "input.jsonl").write_text(row["episode_raw"], encoding="utf-8")
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
            target = self.folder / "frames" / frame_name
            if not target.exists():
                target.write_bytes(image["bytes"])
            record[key] = frame_name
        if row.get("frame_shared_with") is not None:
            record["frame_shared_with"] = row["frame_shared_with"]
        if row.get("result") is not None:
            record["result"] = row["result"]
        record["source"] = row["source"]
        self.writer.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        self.steps.add(row["step"])


def import_episodes(source: str | Path | Any, root: str | Path, *, on_error: OnError | None = None,
                    on_note: Callable[[str], None] | None = None) -> list[Path]:
    """Rebuild episode folders under ``root`` from an exported parquet file (or a ``datasets.Dataset``).

    Returns the folders written. An episode never merges into another: one whose name is taken gets a new
    name, and ``on_note`` (default: the log) is told. Each folder is checked with :func:`load_episode`;
    without ``on_error`` a bad episode raises, with it the bad one is reported there, its folder removed,
    and the rest imported."""
    datasets = _datasets()
    note = on_note or log.warning
    root = Path(root)
    if isinstance(source, str | Path):
        dataset = datasets.Dataset.from_parquet(str(source))
    else:
        dataset = source
    dataset = dataset.cast_column("frame_before", datasets.Image(decode=False))
    dataset = dataset.cast_column("frame_after", datasets.Image(decode=False))
    imports: list[_Import] = []
    current: dict[tuple[str, str], _Import] = {}  # the episode each (name, meta) is writing into
    for row in dataset:
        key = (row["episode"], row["meta"])
        episode = current.get(key)
        if episode is None or row["step"] in episode.steps:  # a step seen again: a copy of the episode
            episode = _Import(root, row["episode"], row["meta"], note)
            current[key] = episode
            imports.append(episode)
        if episode.error is not None:
            continue
        try:
            episode.add(row)
        except (ValueError, KeyError, TypeError, OSError) as exc:  # a row that is not what export writes
            episode.error = exc
    folders = []
    for episode in imports:
        if episode.writer is not None:
            episode.writer.close()
        try:
            if episode.error is not None:
                raise EpisodeFormatError(f"episode {episode.name!r}: a row cannot be read: {episode.error}")
            assert episode.folder is not None
            load_episode(episode.folder)
        except HciEnvsError as exc:
            if episode.folder is not None:
                shutil.rmtree(episode.folder, ignore_errors=True)  # nothing half-imported is left to trip on
            _fail(on_error, episode.name, exc)
            continue
        folders.append(episode.folder)
    return folders
