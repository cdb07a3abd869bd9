"""Building steps from TOML tables with cattrs: a tagged union on ``action``, every problem at once.

A raw ``[[step]]`` table is first put in the steps' shape (``process`` may be one name or an
array and becomes ``processes``; ``expect_http`` may be one status; ``expect_status`` names its
comparator as a key, ``equals = ...``). cattrs then structures it into the class of its action
with detailed validation: unknown keys (``forbid_extra_keys``), missing required fields and
every field's check (:data:`~orchestrator.scenario.format.fields.FIELDS`, run as the field's
structure hook, so values are never coerced) are all collected, each naming its field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs
import cattrs
from cattrs.errors import AttributeValidationNote, ForbiddenExtraKeysError
from cattrs.gen import make_dict_structure_fn, override

from catalog.errors import BadInputError
from orchestrator.scenario.format.fields import FIELDS, Checker
from orchestrator.scenario.format.paths import parse_path
from orchestrator.scenario.format.steps import (
    STEP_KINDS,
    AppendStep,
    ExpectStatusStep,
    StartStep,
    Step,
)
from orchestrator.scenario.format.values import COMPARATORS

__all__ = ["FieldProblem", "build_step", "step_fields"]

# Raw keys of a table that are not fields of a step class (renamed or folded on the way in).
_RAW_NAMES: Final = {"processes": "process"}


@attrs.frozen
class FieldProblem:
    """One problem of a step table: its message and the raw field it is about (None: the
    table as a whole)."""

    message: str
    field: str | None = None


def step_fields(kind: type[Step]) -> frozenset[str]:
    """The raw keys a table of ``kind`` accepts (``action`` and ``note`` included)."""
    names = {_RAW_NAMES.get(f.name, f.name) for f in attrs.fields(kind)} - {"number", "line"}
    if kind.action == "expect_status":
        names = (names - {"comparator", "expected"}) | set(COMPARATORS)
    return frozenset(names | {"action"})


# Fields holding seconds: TOML integers are read as floats.
_SECONDS: Final = frozenset({"session_timeout", "timeout", "seconds", "wait", "down"})


def _hook(check: str) -> Any:
    """The structure hook of a field: its check, then arrays as tuples and seconds as floats
    (nothing else is converted: ``"3"`` is not an integer)."""
    checker: Checker = FIELDS[check]

    def structure(value: Any, _type: Any) -> Any:
        problem = checker(value)
        if problem is not None:
            raise ValueError(problem)
        if isinstance(value, list):
            return tuple(value)
        return float(value) if check in _SECONDS else value

    return structure


def _converter() -> cattrs.Converter:
    converter = cattrs.Converter(detailed_validation=True, forbid_extra_keys=True)
    for kind in STEP_KINDS.values():
        hooks: dict[str, Any] = {
            f.name: override(struct_hook=_hook(f.metadata["check"]))
            for f in attrs.fields(kind)
            if "check" in f.metadata
        }
        converter.register_structure_hook(kind, make_dict_structure_fn(kind, converter, **hooks))
    return converter


_CONVERTER: Final = _converter()


def _shaped(kind: type[Step], raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[FieldProblem]]:
    """``raw`` in the shape of ``kind``'s fields, with the problems of that reshaping."""
    data = {k: v for k, v in raw.items() if k != "action"}
    problems: list[FieldProblem] = []
    if "process" in data and "processes" in {f.name for f in attrs.fields(kind)}:
        names = data.pop("process")
        data["processes"] = names if isinstance(names, list) else [names]
        if kind.action != "start" and len(data["processes"]) > 1:
            problems.append(FieldProblem("only start takes several processes", "process"))
    if "expect_http" in data and not isinstance(data["expect_http"], list):
        data["expect_http"] = [data["expect_http"]]
    if kind.action == "expect_status":
        given = [c for c in COMPARATORS if c in data]
        if len(given) != 1:
            problems.append(
                FieldProblem(
                    f"expect_status needs exactly one of {', '.join(COMPARATORS)}"
                    + (f" (got {', '.join(given)})" if given else "")
                )
            )
        elif (problem := FIELDS[given[0]](data[given[0]])) is not None:
            problems.append(FieldProblem(f"{given[0]} {problem}", given[0]))
        else:
            data["comparator"], data["expected"] = given[0], data.pop(given[0])
        for name in given:
            data.pop(name, None)
    return data, problems


def build_step(number: int, line: int, raw: Mapping[str, Any]) -> Step | list[FieldProblem]:
    """The step of table ``raw`` (the ``number``-th, its header on ``line``), or every problem
    found in it."""
    action = raw.get("action")
    if action is None:
        return [FieldProblem(f"missing 'action' (one of: {', '.join(STEP_KINDS)})")]
    kind = STEP_KINDS.get(action) if isinstance(action, str) else None
    if kind is None:
        known = ", ".join(STEP_KINDS)
        return [FieldProblem(f"unknown action {action!r} (one of: {known})", "action")]
    data, problems = _shaped(kind, raw)
    if problems:
        return problems
    try:
        step = _CONVERTER.structure({**data, "number": number, "line": line}, kind)
    except cattrs.ClassValidationError as group:
        return [_problem(kind, exc) for exc in group.exceptions]
    return _cross_field(step) or step


def _problem(kind: type[Step], exc: BaseException) -> FieldProblem:
    """One cattrs error as a located problem."""
    if isinstance(exc, ForbiddenExtraKeysError):
        allowed = sorted(step_fields(kind) - {"action"})
        key = sorted(exc.extra_fields)[0]
        owners = [a for a, k in STEP_KINDS.items() if key in step_fields(k)]
        hint = f" ({key!r} belongs to {', '.join(owners)})" if owners else ""
        return FieldProblem(
            f"unknown field {key!r} for action {kind.action!r}{hint}; allowed: "
            f"{', '.join(allowed)}",
            key,
        )
    notes = [n for n in getattr(exc, "__notes__", []) if isinstance(n, AttributeValidationNote)]
    name = _RAW_NAMES.get(notes[0].name, notes[0].name) if notes else None
    if isinstance(exc, KeyError):
        return FieldProblem(f"action {kind.action!r} needs field {name!r}")
    return FieldProblem(f"{name} {exc}" if name else str(exc), name)


def _cross_field(step: Step) -> list[FieldProblem]:
    """Rules between fields of one step, after each field passed its own check."""
    if isinstance(step, StartStep) and step.generation < 1:
        return [FieldProblem("generation must be at least 1 for start", "generation")]
    if isinstance(step, AppendStep) and step.refused and step.expect_http is not None:
        return [FieldProblem("give refused or expect_http, not both", "refused")]
    if isinstance(step, ExpectStatusStep):
        try:
            parse_path(step.path)
        except BadInputError as exc:
            return [FieldProblem(exc.message, "path")]
    return []
