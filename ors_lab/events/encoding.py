"""How events are written as JSON: the compact and strict encoders, and each agent event type's ``to_wire``
and ``to_json``, made once from its ``WIRE`` declaration (``_wired``)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, NamedTuple

__all__ = ["compact_json", "strict_json"]


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)
_str = json.encoder.encode_basestring  # C: a string as JSON, not ASCII-escaped


def compact_json(value: Any) -> str:
    """``value`` as compact JSON text (``{"a":1}``, UTF-8, not ASCII-escaped), as traces and feeds hold it."""
    return _ENCODER.encode(value)


_STRICT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=str)


def strict_json(value: Any) -> str:
    """``value`` as compact JSON text any JSON parser reads (a browser's, a live feed's reader): as
    ``compact_json``, but a float that is not finite (NaN, infinity) is ``null``."""
    try:
        return _STRICT.encode(value)
    except ValueError:
        return _STRICT.encode(_finite(value))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _json_value(value: Any) -> str:
    """``value`` (not None) as ``compact_json`` writes it: text, numbers and booleans straight, the rest encoded."""
    kind = value.__class__
    if kind is str:
        return _str(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int or (kind is float and math.isfinite(value)):
        return repr(value)
    return _ENCODER.encode(value)


_WIRE_NAMES = {"cachedInputTokens": "cached_tokens"}
"""The seed's names that are not the field's name in camel case."""


def _snake(key: str) -> str:
    """The field a wire key names: ``toolCallId`` -> ``tool_call_id`` (``cachedInputTokens``: ``cached_tokens``)."""
    return _WIRE_NAMES.get(key) or "".join(f"_{c.lower()}" if c.isupper() else c for c in key)


def _camel(name: str) -> str:
    """A field's name as a wire key: ``tool_call_id`` -> ``toolCallId``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


_WIRE_KEYS = {name: key for key, name in _WIRE_NAMES.items()}


class _Wired(NamedTuple):
    """An agent event type's ``to_wire`` and ``to_json``, made from its ``WIRE`` (``_wired``)."""

    to_wire: Callable[[Any], dict[str, Any]]
    to_json: Callable[[Any], str]


_WIRED: dict[type[Any], _Wired] = {}


def _wired(cls: type[Any]) -> _Wired:
    """``cls``'s ``to_wire`` and ``to_json``, made once, as the source of two functions written for its
    ``WIRE`` fields (so each costs what a hand-written one would): the dict's keys and the JSON's text
    are constants, each value is read once, and written by the quickest way its declared type allows
    (a ``TEXT`` field by the JSON encoder's string function, any other value by ``_json_value`` or the
    encoder, so the text is always ``compact_json(to_wire())``)."""
    made = _WIRED.get(cls)
    if made is not None:
        return made
    declared = {f.name: f for f in fields(cls)}
    wire, text, names = [f"wire = {{'type': {cls.kind!r}}}"], [repr('{"type":' + _str(cls.kind))], []
    for number, entry in enumerate(cls.WIRE):
        name, sparse = entry.removesuffix("?"), entry.endswith("?")
        if name not in declared:
            raise TypeError(f"{cls.__name__}.WIRE names {name!r}, which is not one of its fields")
        key, value = _WIRE_KEYS.get(name) or _camel(name), f"v{number}"
        names.append(f"{value} = self.{name}")
        head, shown = repr("," + _str(key) + ":"), _writer(value, str(declared[name].type), name in cls.TEXT)
        if sparse:
            wire.append(f"if self.{name} is not None: wire[{key!r}] = self.{name}")
            text.append(f"('' if {value} is None else {head} + {shown})")
        else:
            wire.append(f"wire[{key!r}] = self.{name}")
            text.append(f"{head} + {shown}")
    source = "\n".join(["def to_wire(self):", *(f"    {line}" for line in wire), "    return wire",
                        "def to_json(self):", *(f"    {line}" for line in names),
                        f"    return {' + '.join([*text, repr('}')])}"])  # fmt: skip
    space: dict[str, Any] = {"_str": _str, "_json_value": _json_value, "_encode": _ENCODER.encode}
    exec(compile(source, f"<ors_lab.events: {cls.__name__}'s wire form>", "exec"), space)  # our own text, made above
    made = _WIRED[cls] = _Wired(space["to_wire"], space["to_json"])
    return made


def _writer(value: str, declared: str, text: bool) -> str:
    """The expression that writes ``value`` as JSON text, for a field of type ``declared``."""
    if text:  # checked to be a str when the event was made
        return f"_str({value})"
    if declared == "str":
        return f"(_str({value}) if {value}.__class__ is str else _json_value({value}))"
    if declared == "bool":
        return f"('true' if {value} is True else 'false' if {value} is False else _json_value({value}))"
    if declared.startswith(("Mapping", "Any")):
        return f"_encode({value})"
    if "None" in declared:
        return f"('null' if {value} is None else _json_value({value}))"
    return f"_json_value({value})"
