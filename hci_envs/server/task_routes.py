"""OpenEnv's task API on the control plane: the server's tasks as named splits (:mod:`hci_envs.tasks.splits`).

``GET /list_environments``, ``GET /{env_name}/splits``, and ``POST /{env_name}/tasks``, ``/num_tasks``,
``/task``, ``/task_range`` with a JSON body (``split``, and ``index`` or ``start``/``stop``), as OpenEnv's
server serves them; a session is put into a task by position with ``reset(split=..., index=...)`` (HTTP or
WebSocket). ``env_name`` is the environment's class name or ``hci-envs``, in any case, ``-`` or ``_``.
"""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from ..errors import TaskNotFoundError
from .core import HciServer
from .deps import CONTROL, get_server

router = APIRouter(dependencies=CONTROL, tags=["Task API"])


class SplitRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # OpenEnv's request messages carry a metadata field
    split: str = Field(max_length=256)


# Strict: JSON's true is not position 1, nor "1" a number (OpenEnv's clients send integers).
class TaskIndexRequest(SplitRequest):
    index: StrictInt


class TaskRangeRequest(SplitRequest):
    start: StrictInt | None = None
    stop: StrictInt | None = None


def env_names(server: HciServer) -> list[str]:
    """The names this server answers the task API to: its environment's and the project's."""
    names = [server.env_class.__name__, getattr(server.env_class, "name", None), "hci-envs"]
    return list(dict.fromkeys(n for n in names if isinstance(n, str) and n))


def _check(server: HciServer, env_name: str) -> None:
    def norm(name: str) -> str:
        return name.lower().replace("_", "-")

    if norm(env_name) not in {norm(n) for n in env_names(server)}:
        raise TaskNotFoundError(f"no environment named {env_name!r} here; it is {' or '.join(env_names(server))}",
                                env_name=env_name)


async def _in_thread(fn: Any, *args: Any) -> Any:
    return await anyio.to_thread.run_sync(fn, *args)  # the catalog reads files and may build tasks


@router.get("/list_environments")
async def list_environments(server: HciServer = Depends(get_server)) -> list[str]:
    return env_names(server)[:1]


@router.get("/{env_name}/splits")
async def splits(env_name: str, server: HciServer = Depends(get_server)) -> list[dict[str, Any]]:
    _check(server, env_name)
    found = await _in_thread(lambda: server.task_suite.splits().splits())
    return [split.to_dict() for split in found]


@router.post("/{env_name}/tasks")
async def tasks(env_name: str, request: SplitRequest = Body(...),
                server: HciServer = Depends(get_server)) -> dict[str, Any]:
    _check(server, env_name)
    listed = await _in_thread(lambda: server.task_suite.splits().tasks(request.split))
    return {"tasks": listed, "env_name": env_names(server)[0]}


@router.post("/{env_name}/num_tasks")
async def num_tasks(env_name: str, request: SplitRequest = Body(...),
                    server: HciServer = Depends(get_server)) -> dict[str, Any]:
    _check(server, env_name)
    return {"num_tasks": await _in_thread(lambda: server.task_suite.splits().count(request.split))}


@router.post("/{env_name}/task")
async def task(env_name: str, request: TaskIndexRequest = Body(...),
               server: HciServer = Depends(get_server)) -> dict[str, Any]:
    _check(server, env_name)
    return {"task": await _in_thread(lambda: server.task_suite.splits().task(request.split, request.index))}


@router.post("/{env_name}/task_range")
async def task_range(env_name: str, request: TaskRangeRequest = Body(...),
                     server: HciServer = Depends(get_server)) -> dict[str, Any]:
    _check(server, env_name)
    listed = await _in_thread(lambda: server.task_suite.splits().tasks(request.split, request.start, request.stop))
    return {"tasks": listed}
