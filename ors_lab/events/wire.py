"""Events as a live feed sends them, and back: ``full_wire``, ``event_from_wire``, ``agent_event``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any

from ors_lab.events.encoding import _camel, _snake
from ors_lab.events.records import AGENT_KINDS, EVENT_TYPES, AgentEvent, Event

__all__ = ["agent_event", "event_from_wire", "full_wire"]


_ORDERED_FIELDS: dict[str, tuple[str, ...]] = {
    kind: tuple(f.name for f in fields(cls) if f.name != "t_ns") for kind, cls in EVENT_TYPES.items()
}
_FIELDS: dict[str, frozenset[str]] = {kind: frozenset(names) for kind, names in _ORDERED_FIELDS.items()}
_REQUIRED: dict[str, frozenset[str]] = {
    kind: frozenset(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)
    for kind, cls in EVENT_TYPES.items()
}


_EXTRA: dict[tuple[str, tuple[str, ...]], tuple[tuple[str, str, bool], ...]] = {}
"""Per kind and wire keys: the fields ``full_wire`` adds (name, wire key, whether the event always has it)."""


def full_wire(event: Event) -> dict[str, Any]:
    """The event as a live feed sends it: ``to_wire()`` (an agent event's; ``{"type": kind}`` for
    the others), then every field the wire form leaves out (``sessionId``, ``rollout``, a start's
    ``environment``, ``split`` and ``taskIndex``, a tool output's ``tool`` and ``call``, an
    episode's whole record, ...), named in camel case; ``t_ns`` is left out, and so are fields
    that are None and have a default. ``event_from_wire(kind, full_wire(e))`` equals ``e``.
    """
    wire = event.to_wire() if isinstance(event, AgentEvent) else {"type": event.kind}
    shape = (event.kind, tuple(wire))
    extra = _EXTRA.get(shape)
    if extra is None:  # once per kind and set of wire keys: a handful in all
        covered = {_snake(key) for key in wire}
        needed = _REQUIRED[event.kind]
        extra = _EXTRA[shape] = tuple(
            (name, _camel(name), name in needed) for name in _ORDERED_FIELDS[event.kind] if name not in covered
        )
    for name, key, always in extra:
        value = getattr(event, name)
        if value is not None or always:
            wire[key] = value
    return wire


def event_from_wire(kind: str, wire: Mapping[str, Any], **context: Any) -> Event:
    """The event of ``kind`` (any kind of ``EVENT_TYPES``) back from a wire form: ``full_wire()``, or
    an agent event's ``to_wire()`` with ``context``, as ``agent_event`` takes them. An unknown kind
    is a ``ValueError``; a wire form lacking a field its type needs, a ``TypeError``.
    """
    cls = EVENT_TYPES.get(kind)
    if cls is None:
        raise ValueError(f"not an event kind: {kind!r}; the kinds: {', '.join(EVENT_TYPES)}")
    names = _FIELDS[kind]
    values = {name: value for name, value in context.items() if value is not None and (name in names or name == "t_ns")}
    for key, value in wire.items():
        name = _snake(key)
        if name in names:
            values[name] = value
    return cls(**values)


def agent_event(kind: str, wire: Mapping[str, Any], **context: Any) -> AgentEvent:
    """The agent event of ``kind`` back from its ``wire`` form: ``to_wire()`` (camel case), or for an
    ``episode`` its ``record()`` (snake case), as a trace's ``data`` or a live feed holds it.

    ``context`` gives what the wire form leaves out (``session_id``, ``rollout``, ``t_ns``; a tool
    call's ``tool`` and ``call``; a start's ``environment``, ``split`` and ``task_index``: the
    trace's columns); a None in it is left out, and a key the event does not have is ignored.
    ``agent_event(e.kind, e.to_wire(), session_id=e.session_id, ...)`` equals ``e``. A kind that is
    not of the agent vocabulary is a ``ValueError``; a wire form lacking a field its type needs, a
    ``TypeError``.
    """
    cls = EVENT_TYPES.get(kind)
    if cls is None or not issubclass(cls, AgentEvent):
        raise ValueError(f"not an agent event kind: {kind!r}; the agent kinds: {', '.join(AGENT_KINDS)}")
    event = event_from_wire(kind, wire, **context)
    assert isinstance(event, AgentEvent)
    return event
