"""User-facing errors: one message naming file, field path, value and what is allowed.

The CLI turns a `UserError` into that one line on stderr and exit code 2, with no traceback.
"""

from __future__ import annotations

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

    def __str__(self) -> str:
        where = f"{self.file}: " if self.file else ""
        field = f"{self.field}: " if self.field else ""
        value = _short(self.value)
        return f"{where}{field}got {value}; {self.allowed}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def from_validation(file: str | Path, err: ValidationError) -> UserError:
    """First pydantic error as a UserError (pydantic's own message says the allowed range)."""
    first = err.errors(include_url=False)[0]
    parts = first["loc"]
    loc = ".".join(str(p) for i, p in enumerate(parts) if not _is_union_tag(parts, i))
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown key; remove it or check its spelling"
    return UserError(file, loc or "(top level)", first.get("input"), msg)


def _is_union_tag(parts: tuple, i: int) -> bool:
    # pydantic puts the discriminator value into loc for tagged unions: objects.3.box.size
    return i >= 2 and parts[i] in _TAGS and parts[i - 2] in ("sensors", "objects")


_TAGS = {"plane", "box", "cylinder", "sphere", "mesh", "lidar", "imu", "gnss", "odom", "camera"}


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise UserError(path, "", str(path), "expected an existing YAML file")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}" if mark else "(parse)"
        raise UserError(
            path, line, getattr(exc, "problem", str(exc)), "expected valid YAML"
        ) from None


def validate(model: type[BaseModel], data: Any, file: str | Path) -> Any:
    if not isinstance(data, dict):
        raise UserError(file, "(top level)", type(data).__name__, "expected a YAML mapping")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise from_validation(file, err) from None
