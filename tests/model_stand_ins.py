"""Local stand-ins of Anthropic's Messages API and OpenAI's Responses API: the declared test seam of the agent
loops (examples/claude_computer_use.py, examples/openai_computer_use.py).

These are FAKES, and the only ones in the agent-loop tests: no model service is reachable from here, so the real
``anthropic`` and ``openai`` SDKs are pointed at them (``base_url``; ``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL``
for an example run as a process). Each is an ``http.server`` on 127.0.0.1 that replays scripted model turns, one per
request, and records every request as the SDK sent it (path, headers, JSON body), with the whole conversation
the service would hold at that point. The desktop, the server, the SDKs and the examples are all real.

They refuse what the real services refuse of a conversation, with their error shapes, so a loop that breaks the
protocol fails here as it would there: a tool call left unanswered, an answer to no call, a ``toolset_name`` that
does not echo its call's, a continuation of a thread or response that does not exist, and (Responses) pending
safety checks that come back unacknowledged. What a model would decide is the script's; nothing here reads
the screenshots.
"""

from __future__ import annotations

import copy
import importlib
import itertools
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Exchange:
    """One request and its answer. ``conversation`` is the whole history the service holds once the request is
    in: for a thread's ``continue`` or a ``previous_response_id``, what was held before plus what was sent."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    conversation: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    reply: dict[str, Any] = field(default_factory=dict)


def checked(reply: dict[str, Any], module: str, name: str) -> dict[str, Any]:
    """A reply the SDK's own model of it takes whole (a script's typo fails here, not in the SDK's parsing)."""
    model = getattr(importlib.import_module(module), name).model_validate(reply)
    unknown = set(reply) - set(type(model).model_fields)
    if unknown:
        raise ValueError(f"{name} has no fields {sorted(unknown)}")
    return reply


class Refused(Exception):
    """What the service answers with an HTTP error: its status, and the body in the service's error shape."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(json.dumps(body))
        self.status, self.body = status, body


class ScriptedService:
    """The shared machinery: the HTTP server, the script, the record. A subclass says which path it serves and
    answers one request (:meth:`answer`) from the next scripted turn."""

    path = ""

    def __init__(self, turns: list[list[dict[str, Any]]]) -> None:
        self.turns = [copy.deepcopy(turn) for turn in turns]
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._ids: dict[str, itertools.count[int]] = {}
        self._server: ThreadingHTTPServer | None = None

    # -- the server ------------------------------------------------------------------------------------------
    def __enter__(self) -> ScriptedService:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                status, reply = service._handle(self.path, dict(self.headers.items()), raw)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # the record is self.exchanges, not stderr
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name=type(self).__name__, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def base_url(self) -> str:
        assert self._server is not None, "enter the stand-in first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _handle(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, Any]]:
        with self._lock:  # one conversation, answered in order, as the SDKs send it
            exchange = Exchange(path, {k.lower(): v for k, v in headers.items()}, {})
            self.exchanges.append(exchange)
            try:
                if path.split("?")[0] != self.path:
                    raise self.refusal(404, f"the stand-in serves POST {self.path}, not {path}")
                exchange.body = json.loads(raw or b"{}")
                if not self.turns:
                    raise self.refusal(400, "the stand-in's script has no turn left for this request")
                exchange.reply = self.answer(exchange, self.turns.pop(0))
            except Refused as refused:
                exchange.status, exchange.reply = refused.status, refused.body
            except Exception as exc:  # a fault of the stand-in: a 400 names it (a 5xx would be retried, slowly)
                exchange.status, exchange.reply = 400, self.refusal(400, f"stand-in fault: {exc!r}").body
            return exchange.status, exchange.reply

    def next_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids.setdefault(prefix, itertools.count(1))):04d}"

    # -- what a subclass says ------------------------------------------------------------------------------
    def answer(self, exchange: Exchange, turn: list[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def refusal(self, status: int, message: str, **details: Any) -> Refused:
        raise NotImplementedError

    @property
    def requests(self) -> list[Exchange]:
        """The exchanges answered with a model turn."""
        return [e for e in self.exchanges if e.status == 200]


class MessagesStandIn(ScriptedService):
    """Anthropic's Messages API (``POST /v1/messages``), beta threads included: the SDK's tool runner threads its
    conversation by default (``thread: {"type": "create"}``, then ``{"type": "continue", "previous_message_id"}``
    with only the new messages), so the stand-in holds each thread as the service does. A turn is a list of
    content blocks; a ``tool_use`` without an ``id`` gets one, and a turn with a ``tool_use`` stops for it."""

    path = "/v1/messages"

    def __init__(self, turns: list[list[dict[str, Any]]]) -> None:
        super().__init__(turns)
        self.threads: dict[str, list[dict[str, Any]]] = {}  # a reply's id: the conversation up to and with it

    def refusal(self, status: int, message: str, **details: Any) -> Refused:
        kind = "not_found_error" if status == 404 else "invalid_request_error"
        error = {"type": kind, "message": message, **({"details": details} if details else {})}
        return Refused(status, {"type": "error", "error": error})

    def answer(self, exchange: Exchange, turn: list[dict[str, Any]]) -> dict[str, Any]:
        body = exchange.body
        thread = body.get("thread")
        held: list[dict[str, Any]] = []
        if thread and thread.get("type") == "continue":
            previous = thread.get("previous_message_id")
            if previous not in self.threads:
                raise self.refusal(404, f"thread {previous!r} not found", error_code="thread_not_found")
            held = self.threads[previous]
        exchange.conversation = [*held, *copy.deepcopy(body.get("messages") or [])]
        self.check_tool_results(exchange.conversation)
        content = [{**block, "id": block.get("id") or self.next_id("toolu")} if block["type"] == "tool_use" else block
                   for block in turn]
        reply = {"id": self.next_id("msg"), "type": "message", "role": "assistant", "model": body.get("model"),
                 "content": content, "stop_reason": "tool_use" if any(b["type"] == "tool_use" for b in content)
                 else "end_turn", "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 10}}
        if thread:
            self.threads[reply["id"]] = [*exchange.conversation, {"role": "assistant", "content": content}]
        return checked(reply, "anthropic.types.beta", "BetaMessage")

    def check_tool_results(self, conversation: list[dict[str, Any]]) -> None:
        """As the service checks: the message after an assistant turn with tool calls answers every call, by its
        id, in ``tool_result`` blocks that come first, echoing the call's ``toolset_name``; nothing else is
        answered."""
        for index, message in enumerate(conversation):
            content = message.get("content")
            blocks = content if isinstance(content, list) else []
            calls = {b["id"]: b for b in blocks if b.get("type") == "tool_use"} if message["role"] == "assistant" \
                else {}
            following = conversation[index + 1] if index + 1 < len(conversation) else None
            answers = [b for b in (following or {}).get("content") or [] if isinstance(b, dict)
                       and b.get("type") == "tool_result"] if following and following["role"] == "user" else []
            if calls and following is not None:
                missing = [i for i in calls if i not in {a["tool_use_id"] for a in answers}]
                if missing or following["content"][:len(answers)] != answers:
                    raise self.refusal(400, f"messages.{index + 1}: `tool_use` ids were found without `tool_result` "
                                            f"blocks immediately after: {', '.join(missing)}")
            for answer in answers:
                call = calls.get(answer["tool_use_id"])
                if call is None:
                    raise self.refusal(400, f"messages.{index + 1}: unexpected `tool_use_id` found in `tool_result` "
                                            f"blocks: {answer['tool_use_id']}")
                if answer.get("toolset_name") != call.get("toolset_name"):
                    raise self.refusal(400, f"messages.{index + 1}: `tool_result` for {call['id']} must echo "
                                            f"toolset_name {call.get('toolset_name')!r}")


class ResponsesStandIn(ScriptedService):
    """OpenAI's Responses API (``POST /v1/responses``) with the released ``computer`` tool. A turn is a list of
    output items; a ``computer_call`` gets its ``id``, ``call_id``, ``status`` and an empty
    ``pending_safety_checks`` where the script leaves them out, a ``message`` its id and status. Responses are
    stored, so ``previous_response_id`` continues one."""

    path = "/v1/responses"

    def __init__(self, turns: list[list[dict[str, Any]]]) -> None:
        super().__init__(turns)
        self.responses: dict[str, list[dict[str, Any]]] = {}  # a response's id: the items up to and with its output

    def refusal(self, status: int, message: str, **details: Any) -> Refused:
        return Refused(status, {"error": {"message": message, "type": "invalid_request_error",
                                          "param": details.get("param"), "code": details.get("code")}})

    def answer(self, exchange: Exchange, turn: list[dict[str, Any]]) -> dict[str, Any]:
        body = exchange.body
        previous = body.get("previous_response_id")
        if previous is not None and previous not in self.responses:
            raise self.refusal(400, f"Previous response with id '{previous}' not found.",
                               param="previous_response_id", code="previous_response_not_found")
        sent = body.get("input") or []
        sent = [{"role": "user", "content": sent}] if isinstance(sent, str) else copy.deepcopy(sent)
        exchange.conversation = [*self.responses.get(previous, []), *sent]
        self.check_outputs(exchange.conversation)
        output = [self.complete(item) for item in turn]
        response_id = self.next_id("resp")
        self.responses[response_id] = [*exchange.conversation, *output]
        reply = {"id": response_id, "object": "response", "created_at": 1_760_000_000, "model": body.get("model"),
                 "status": "completed", "output": output, "tools": body.get("tools") or [],
                 "parallel_tool_calls": True, "tool_choice": body.get("tool_choice", "auto"),
                 "previous_response_id": previous, "error": None, "incomplete_details": None,
                 "instructions": body.get("instructions"), "metadata": {}, "temperature": 1.0, "top_p": 1.0,
                 "usage": {"input_tokens": 10, "output_tokens": 10, "total_tokens": 20,
                           "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                           "output_tokens_details": {"reasoning_tokens": 0}}}
        return checked(reply, "openai.types.responses", "Response")

    def complete(self, item: dict[str, Any]) -> dict[str, Any]:
        if item["type"] == "computer_call":
            return {"id": self.next_id("cu"), "call_id": self.next_id("call"), "status": "completed",
                    "pending_safety_checks": [], **item}
        if item["type"] == "message":
            return {"id": self.next_id("msg"), "role": "assistant", "status": "completed", **item,
                    "content": [{"type": "output_text", "text": part, "annotations": []} if isinstance(part, str)
                                else part for part in item["content"]]}
        return item

    def check_outputs(self, conversation: list[dict[str, Any]]) -> None:
        """As the service checks: every computer_call is answered by a computer_call_output naming its call_id,
        which acknowledges the call's pending safety checks; no output answers a call that was not made."""
        calls = {item["call_id"]: item for item in conversation if item.get("type") == "computer_call"}
        outputs = {item["call_id"]: item for item in conversation if item.get("type") == "computer_call_output"}
        for call_id in outputs.keys() - calls.keys():
            raise self.refusal(400, f"No tool call found for computer call output with call_id {call_id}.",
                               param="input")
        for call_id, call in calls.items():
            if call_id not in outputs:
                raise self.refusal(400, f"No tool output found for computer call {call_id}.", param="input")
            pending = {check["id"] for check in call.get("pending_safety_checks") or []}
            acknowledged = {check["id"] for check in outputs[call_id].get("acknowledged_safety_checks") or []}
            if pending - acknowledged:
                raise self.refusal(400, f"Computer call {call_id} has pending safety checks that were not "
                                        f"acknowledged: {', '.join(sorted(pending - acknowledged))}.",
                                   param="input")
