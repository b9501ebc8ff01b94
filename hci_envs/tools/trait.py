"""The base of capability mixins (traits) and of environments.

A trait contributes
  * tools: methods marked with :func:`hci_envs.tools.tool`, or a ``__tool_specs__`` sequence of ready specs;
  * session hooks: ``on_session_start(desktop)`` and ``on_session_end()``, cooperative through the MRO
    (always call ``super()``), and ``lasting_state()`` / ``resume_lasting(state, desktop)`` for the processes
    its tools keep between calls, which a fork carries;
  * start state: ``start_state_defaults`` merged into the environment's declared start state;
  * system packages: ``system_packages``, the Debian packages an image of the environment needs.

Tools are collected when the class is defined; two unrelated traits offering the same tool name is an
error right there, naming both.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .registry import ToolSpec, merge_registries, specs_from_methods


class Trait:
    """Base class of traits and environments. Subclasses get a tool registry at class creation."""

    #: Debian packages the trait's tools need inside an image.
    system_packages: ClassVar[tuple[str, ...]] = ()
    #: Python packages (pip requirement strings) the trait's tools need inside an image.
    python_packages: ClassVar[tuple[str, ...]] = ()
    #: Pieces of the start state this trait needs (merged into the environment's StartState).
    start_state_defaults: ClassVar[dict[str, Any]] = {}

    _own_tools: ClassVar[dict[str, ToolSpec]] = {}
    _tools: ClassVar[dict[str, ToolSpec]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = {spec.name: spec for spec in specs_from_methods(cls)}
        for spec in cls.__dict__.get("__tool_specs__", ()):
            own[spec.name] = _owned(spec, cls)
        cls._own_tools = own
        cls._tools = merge_registries(cls, cls.__bases__)

    @classmethod
    def tool_specs(cls) -> dict[str, ToolSpec]:
        """Every tool of this class, by name, in declaration order (base traits first)."""
        return dict(cls._tools)

    @classmethod
    def traits(cls) -> list[type[Trait]]:
        """The traits this class is composed of (classes that declare tools or hooks), base first."""
        return [c for c in reversed(cls.__mro__) if isinstance(c, type) and issubclass(c, Trait) and c is not Trait
                and c._own_tools]

    @classmethod
    def all_system_packages(cls) -> list[str]:
        packages: list[str] = []
        for c in reversed(cls.__mro__):
            for p in c.__dict__.get("system_packages", ()):
                if p not in packages:
                    packages.append(p)
        return packages

    @classmethod
    def all_python_packages(cls) -> list[str]:
        packages: list[str] = []
        for c in reversed(cls.__mro__):
            for p in c.__dict__.get("python_packages", ()):
                if p not in packages:
                    packages.append(p)
        return packages

    @classmethod
    def merged_start_state_defaults(cls) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for c in reversed(cls.__mro__):
            for key, value in c.__dict__.get("start_state_defaults", {}).items():
                if isinstance(value, list):
                    merged[key] = [*merged.get(key, []), *value]
                elif isinstance(value, dict):
                    merged[key] = {**merged.get(key, {}), **value}
                else:
                    merged[key] = value
        return merged

    # Cooperative hooks: every override must call super().
    def on_session_start(self, desktop: Any) -> None:
        """Called after the desktop of a new episode is up (after each reset)."""

    def on_session_end(self) -> None:
        """Called before the desktop of an episode is torn down."""

    def lasting_state(self) -> dict[str, Any]:
        """The agent's processes this environment's tools keep from one call to the next (a persistent shell,
        an interpreter), named so that a fork or a checkpoint can carry them: each trait adds its own keys."""
        return {}

    def resume_lasting(self, state: dict[str, Any], desktop: Any) -> None:
        """Take the processes ``state`` (a :meth:`lasting_state`) names, carried into ``desktop``: a copy's, or
        the desktop a checkpoint was returned to. Called after :meth:`on_session_start`."""


def _owned(spec: ToolSpec, cls: type) -> ToolSpec:
    from dataclasses import replace

    return replace(spec, owner=cls, trait=spec.trait or cls.__name__)
