"""Tools: what traits contribute and what the model can call, over MCP or as CodeAct functions.

A tool is a typed function of keyword arguments. Traits declare tools with :func:`tool` on methods, or build
:class:`ToolSpec` objects directly (the desktop trait generates one per canonical action). Each environment
class gets a registry of its traits' tools; the MCP server, CodeAct namespace, ``find_tools`` and the tool
directory are all generated from it.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ..actions.models import format_validation_error
from ..errors import DuplicateToolError, InvalidActionError, ToolDefinitionError

#: Names the model must never reach: the control plane.
CONTROL_PLANE_NAMES = frozenset({"reset", "step", "state", "snapshot", "close", "restore", "set_mode"})


@dataclass
class ToolOutput:
    """The result of a tool call: text for the model, optional structured data and images."""

    text: str = ""
    data: dict[str, Any] | None = None
    images: list[Any] = field(default_factory=list)  # hci_envs.desktop.EncodedImage
    is_error: bool = False

    def value(self) -> Any:
        """The plain Python value a CodeAct function returns for this output."""
        if self.data is not None:
            return self.data
        return self.text


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, description, keyword parameters, and the function that runs it.

    ``handler(env, **arguments)`` returns a :class:`ToolOutput` (or anything, which becomes its text).
    """

    name: str
    description: str
    parameters: tuple[inspect.Parameter, ...]
    handler: Callable[..., Any]
    read_only: bool = False
    #: Only in simulation mode: a tool that reveals scoring or debugging (OpenEnv's tool modes); a server in
    #: production mode, and an environment made with ``mode="production"``, neither list nor run it.
    simulation_only: bool = False
    trait: str = ""
    owner: type | None = None
    #: Checks and converts the arguments itself, instead of the model built from ``parameters`` (which then
    #: only describes them): a tool whose arguments are a model already (an action) is validated once.
    parse: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    def signature(self) -> inspect.Signature:
        return inspect.Signature(list(self.parameters))

    def has_parameter(self, name: str) -> bool:
        return any(p.name == name for p in self.parameters)

    def default(self, name: str) -> Any:
        """The default value of parameter ``name`` (None if it has none)."""
        for p in self.parameters:
            if p.name == name:
                return None if p.default is inspect.Parameter.empty else p.default
        return None

    @functools.cached_property
    def arguments_model(self) -> type[BaseModel]:
        """The pydantic model of the arguments (built once per tool; unknown arguments are refused)."""
        fields: dict[str, Any] = {}
        for p in self.parameters:
            default = ... if p.default is inspect.Parameter.empty else p.default
            annotation = Any if p.annotation is inspect.Parameter.empty else p.annotation
            fields[p.name] = (annotation, default)
        return create_model(  # type: ignore[call-overload]
            f"{self.name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
        )

    @functools.cached_property
    def _input_schema(self) -> dict[str, Any]:
        schema = self.arguments_model.model_json_schema()
        schema.pop("title", None)
        return schema

    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments (computed once per tool; callers must not change it)."""
        return self._input_schema

    def validate(self, arguments: dict[str, Any] | None) -> dict[str, Any]:
        """Check arguments against the parameters; raise :class:`InvalidActionError` naming the field."""
        if arguments is not None and not isinstance(arguments, dict):
            raise InvalidActionError(f"{self.name}: arguments must be an object, not {type(arguments).__name__}",
                                     field="arguments")
        arguments = dict(arguments or {})
        if self.parse is not None:
            return self.parse(arguments)
        try:
            model = self.arguments_model.model_validate(arguments)
        except ValidationError as exc:
            raise invalid_arguments(exc, self.name) from None
        return {name: getattr(model, name) for name in type(model).model_fields}

    def call(self, env: Any, arguments: dict[str, Any] | None) -> ToolOutput:
        result = self.handler(env, **self.validate(arguments))
        if isinstance(result, ToolOutput):
            return result
        if isinstance(result, dict):
            return ToolOutput(text="", data=result)
        return ToolOutput(text="" if result is None else str(result))

    def stub(self) -> str:
        """Python source of a stub with this tool's signature and docstring (for the tool directory)."""
        params = ", ".join(_param_source(p) for p in self.parameters)
        star = "*, " if params else ""
        doc = self.description.replace('"""', "'''").replace("\n", "\n    ")
        return f'def {self.name}({star}{params}):\n    """{doc}"""\n'


def invalid_arguments(exc: ValidationError, tool: str) -> InvalidActionError:
    """A tool's arguments failed their model: one error naming the tool and the field."""
    return InvalidActionError(format_validation_error(exc, prefix=tool), field=_first_loc(exc))


def _first_loc(exc: ValidationError) -> str | None:
    for err in exc.errors(include_url=False):
        if err.get("loc"):
            return str(err["loc"][0])
    return None


def type_repr(tp: Any) -> str:
    """A readable spelling of a type annotation, without ``Annotated`` metadata."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return type_repr(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_repr(a) for a in args)
    if origin is typing.Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_repr(a) for a in args)}]" if args else name
    if tp is type(None):
        return "None"
    if tp is inspect.Parameter.empty:
        return "Any"
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def _param_source(p: inspect.Parameter) -> str:
    out = f"{p.name}: {type_repr(p.annotation)}"
    if p.default is not inspect.Parameter.empty:
        out += f" = {p.default!r}"
    return out


def parameters_of(fn: Callable[..., Any], skip_first: bool = True) -> tuple[inspect.Parameter, ...]:
    """Keyword parameters of a function (resolving string annotations), without ``self``."""
    hints = typing.get_type_hints(fn, include_extras=True)
    params = list(inspect.signature(fn).parameters.values())
    if skip_first and params:
        params = params[1:]
    out = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out.append(p.replace(kind=p.KEYWORD_ONLY, annotation=hints.get(p.name, p.annotation)))
    return tuple(out)


def tool(
    name: str | None = None, *, read_only: bool = False, description: str | None = None,
    simulation_only: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a trait method as a tool. Its signature (typed, with pydantic ``Field`` metadata in
    ``Annotated``) becomes the tool's parameters and its docstring the description. ``simulation_only``: a tool
    that reveals scoring or debugging, absent in production mode."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__hci_tool__ = {  # type: ignore[attr-defined]
            "name": name or fn.__name__,
            "read_only": read_only,
            "simulation_only": simulation_only,
            "description": description or inspect.cleandoc(fn.__doc__ or fn.__name__),
        }
        return fn

    return decorate


def specs_from_methods(cls: type) -> list[ToolSpec]:
    """The tools a class declares in its own body with :func:`tool`."""
    specs = []
    for attr, value in vars(cls).items():
        meta = getattr(value, "__hci_tool__", None)
        if meta is None:
            continue
        specs.append(
            ToolSpec(
                name=meta["name"],
                description=meta["description"],
                parameters=parameters_of(value),
                handler=lambda env, _attr=attr, **kw: getattr(env, _attr)(**kw),
                read_only=meta["read_only"],
                simulation_only=meta.get("simulation_only", False),
                trait=getattr(cls, "__dict__", {}).get("trait_name") or cls.__name__,
                owner=cls,
            )
        )
    return specs


def in_mode(specs: dict[str, ToolSpec], mode: str) -> dict[str, ToolSpec]:
    """The tools of ``specs`` that exist in ``mode`` ("simulation": all of them; "production": all but the
    simulation-only ones)."""
    if mode == "simulation":
        return dict(specs)
    return {name: spec for name, spec in specs.items() if not spec.simulation_only}


def merge_registries(cls: type, bases: Sequence[type]) -> dict[str, ToolSpec]:
    """Combine the tools of ``cls``'s bases (in MRO order) and its own; refuse unrelated duplicates."""
    registry: dict[str, ToolSpec] = {}
    for base in reversed(cls.__mro__[1:]):
        for spec in getattr(base, "_own_tools", {}).values():
            _add(registry, spec, cls)
    for spec in getattr(cls, "_own_tools", {}).values():
        _add(registry, spec, cls)
    return registry


def _add(registry: dict[str, ToolSpec], spec: ToolSpec, cls: type) -> None:
    if spec.name in CONTROL_PLANE_NAMES:
        raise ToolDefinitionError(
            f"{spec.trait} declares a tool named {spec.name!r}, which is reserved for the control plane"
        )
    existing = registry.get(spec.name)
    if existing is not None and existing.owner is not spec.owner:
        related = (
            existing.owner is not None and spec.owner is not None
            and (issubclass(spec.owner, existing.owner) or issubclass(existing.owner, spec.owner))
        )
        if not related:
            mro = list(cls.__mro__)
            first, second = sorted((existing, spec), key=lambda s: mro.index(s.owner) if s.owner in mro else 0)
            raise DuplicateToolError(
                f"{cls.__name__}: traits {first.trait} and {second.trait} both offer a tool named "
                f"{spec.name!r}; rename one of them or override it in {cls.__name__}"
            )
    registry[spec.name] = spec
