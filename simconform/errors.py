"""User-facing errors: one message naming file, field path, value and what is allowed.

The CLI turns a `UserError` into that one line on stderr and exit code 2, with no traceback.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError


class UserError(Exception):
    """An error the user caused (spec, world, trajectory, bag, flags)."""

    def __init__(self, file: str | Path | None, field: str, value: Any, allowed: str) -> None:
        self.file = str(file) if file is not None else None
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(str(self))

    def __reduce__(self):
        """Pickled as its four fields (a worker process's error reaches the parent whole)."""
        return UserError, (self.file, self.field, self.value, self.allowed)

    def __str__(self) -> str:
        where = f"{self.file}: " if self.file else ""
        field = f"{self.field}: " if self.field else ""
        value = _short(self.value)
        return f"{where}{field}got {value}; {self.allowed}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class FieldProblem(ValueError):
    """Raised by a model validator about one of the model's fields (a dotted path below it), so
    the message names that field and its value rather than the whole model."""

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        super().__init__(f"{field}: {allowed}")
        self.field, self.value, self.allowed = field, value, allowed


def from_validation(file: str | Path, err: ValidationError) -> UserError:
    """One pydantic error as a UserError (pydantic's own message says the allowed range). An
    unknown key is reported before anything else: a misspelt required key is also a missing
    one, and "Field required" alone would hide the typo; a close match among the keys that are
    missing next to it is offered."""
    errors = err.errors(include_url=False)
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    parts = first["loc"]
    loc = ".".join(str(p) for i, p in enumerate(parts) if not _is_union_tag(parts, i))
    msg = first["msg"]
    value = first.get("input")
    if first["type"] == "extra_forbidden":
        missing = [
            str(e["loc"][-1])
            for e in errors
            if e["type"] == "missing" and e["loc"][:-1] == parts[:-1]
        ]
        near = difflib.get_close_matches(str(parts[-1]), missing, n=1)
        msg = f"unknown key; did you mean '{near[0]}'?" if near else _UNKNOWN
    elif first["type"] == "missing" and isinstance(parts[-1], int):  # a list too short
        size = 1 + max(
            e["loc"][-1] for e in errors if e["type"] == "missing" and e["loc"][:-1] == parts[:-1]
        )
        loc = loc.rsplit(".", 1)[0]
        msg = f"expected {size} values"
    elif first["type"] == "missing":
        msg, value = "expected this key: it is required", _ABSENT
    msg = msg.removeprefix("Value error, ")  # pydantic's prefix for our validators' messages
    problem = first.get("ctx", {}).get("error")
    if isinstance(problem, FieldProblem):
        return UserError(
            file, ".".join(p for p in (loc, problem.field) if p), problem.value, problem.allowed
        )
    return UserError(file, loc or "(top level)", value, msg)


_UNKNOWN = "unknown key; remove it or check its spelling"


class _Absent:
    """The value of a key that is not there: reads "got nothing" in the message."""

    def __repr__(self) -> str:
        return "nothing"


_ABSENT = _Absent()


def _is_union_tag(parts: tuple, i: int) -> bool:
    # pydantic puts the discriminator value into loc for tagged unions (objects.3.box.size),
    # and the member's schema name for other unions (duration.constrained-float)
    p = parts[i]
    if isinstance(p, str) and p.startswith(_MEMBERS) and i > 0:
        return True
    return i >= 2 and p in _TAGS and parts[i - 2] in ("sensors", "objects")


_MEMBERS = ("constrained-", "literal[", "function-", "lax-or-strict[")


_TAGS = {"plane", "box", "cylinder", "sphere", "mesh", "lidar", "imu", "gnss", "odom", "camera"}


MAX_YAML_BYTES = 16 << 20  # an input file is a few kB; a bigger one is not a spec, world or map
MAX_YAML_DEPTH = 32  # nesting of mappings and lists; ours need 6
MAX_YAML_ALIASES = 64  # *alias uses: a few are handy
MAX_YAML_NODES = 100_000  # values once every alias is expanded: an alias bomb has billions


class _Refused(Exception):
    def __init__(self, mark: Any, value: Any, allowed: str) -> None:
        self.line = f"line {mark.line + 1}" if mark is not None else "(parse)"
        self.value, self.allowed = value, allowed


class _InputLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses duplicate keys, deep nesting and alias bombs.

    Duplicate keys: YAML 1.2 forbids them, PyYAML lets the last one win silently, which would
    make a typo'd second `sigma:` the one that counts. Depth and aliases are bounded while the
    document is composed, before anything is expanded, so a "billion laughs" never grows.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                mark = self.peek_event().start_mark
                raise _Refused(
                    mark,
                    f"{self._aliases} aliases",
                    f"expected at most {MAX_YAML_ALIASES} *alias uses",
                )
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            mark = self.peek_event().start_mark
            raise _Refused(
                mark, f"depth {self._depth}", f"expected nesting at most {MAX_YAML_DEPTH} deep"
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None and self._aliases:
            size = _expanded_size(node, {})
            if size > MAX_YAML_NODES:
                raise _Refused(
                    node.start_mark,
                    f"{size} values once aliases are expanded",
                    f"expected at most {MAX_YAML_NODES}",
                )
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: construct_mapping says so below
                    continue
                if first is not key_node.start_mark:
                    raise _Refused(
                        key_node.start_mark,
                        key,
                        f"expected each key once in a mapping (first at line {first.line + 1})",
                    )
        return super().construct_mapping(node, deep)


# Exponent floats as YAML 1.2 reads them (1e-3, 2.5E6): PyYAML follows YAML 1.1, whose floats
# need a dot and a signed exponent, so these would be strings, and no number is read from a string.
# `dump_yaml` writes such strings quoted, so what simconform writes reads back the same.
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$")
_FLOAT_FIRST = list("-+.0123456789")
_InputLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, _FLOAT_FIRST)


class _OutputDumper(yaml.SafeDumper):
    """yaml.SafeDumper that quotes a string _InputLoader would read as a number."""


_OutputDumper.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, _FLOAT_FIRST)


def dump_yaml(data: Any, **kwargs: Any) -> str:
    """YAML text of `data` that load_yaml reads back as the same values."""
    return yaml.dump(data, Dumper=_OutputDumper, allow_unicode=True, **kwargs)


def _expanded_size(node: Any, memo: dict[int, int]) -> int:
    """Values in the document with every alias expanded; shared nodes are counted per use, but
    computed once, so this is linear in the composed (unexpanded) graph."""
    key = id(node)
    if key not in memo:
        memo[key] = 1  # a (malformed) self-reference counts once
        if isinstance(node, yaml.SequenceNode):
            memo[key] = 1 + sum(_expanded_size(c, memo) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            memo[key] = 1 + sum(
                _expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value
            )
    return memo[key]


def read_utf8(path: Path) -> str:
    """A text input file's content, or one UserError naming the line of the first bad byte."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(
            path, f"line {line}", data[exc.start : exc.start + 4], "expected UTF-8 text"
        ) from None


def load_yaml(path: str | Path) -> Any:
    """A YAML input file as Python data, or one UserError naming the file and the line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(path, "", str(path), "expected an existing YAML file")
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise UserError(
            path, "", f"{size} bytes", f"expected a file of at most {MAX_YAML_BYTES} bytes"
        )
    text = read_utf8(path)
    loader = None
    try:
        loader = _InputLoader(text)  # the reader refuses control characters already here
        return loader.get_single_data()
    except _Refused as exc:
        raise UserError(path, exc.line, exc.value, exc.allowed) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}" if mark else "(parse)"
        raise UserError(
            path, line, getattr(exc, "problem", str(exc)), "expected valid YAML"
        ) from None
    except RecursionError:
        raise UserError(
            path, "(parse)", "nesting", f"expected nesting at most {MAX_YAML_DEPTH} deep"
        ) from None
    finally:
        if loader is not None:
            loader.dispose()


def validate(model: type[BaseModel], data: Any, file: str | Path) -> Any:
    if not isinstance(data, dict):
        raise UserError(file, "(top level)", type(data).__name__, "expected a YAML mapping")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise from_validation(file, err) from None
