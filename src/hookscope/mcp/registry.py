"""The assistant's tools: each a plain Python function with a JSON Schema of its arguments, in one registry.

``Tool`` holds a function that returns ``Section``s, its description and its ``Param``s; the JSON
Schema served over MCP (``Tool.schema``) is made from the params, so what a client sees is what
the function takes. Every tool also takes ``max_tokens`` (``budget.fit``). ``run(tool, arguments)``
checks the arguments against the params (unknown names, missing required ones, wrong types: one
``OptionError`` naming them) and fits the answer to its budget. Nothing here imports ``mcp``: the
same tools answer in Python, on the command line (``hookscope tool``) and over MCP.

Tools read files hookscope wrote (stores, watch runs, evidence bundles, the package's own
docstrings); none runs user code: a store is safetensors and JSON, nothing is unpickled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..base.words import closest
from ..errors import OptionError
from .budget import DEFAULT_TOKENS, Answer, Section, fit

TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}


@dataclass(frozen=True)
class Param:
    """One argument of a tool.

    Attributes:
        name: the keyword.
        type: ``string``, ``integer``, ``number`` or ``boolean`` (JSON Schema types).
        description: one line for the assistant.
        required: the call fails without it.
        default: the value when it is left out (None: the tool's own choice).
    """

    name: str
    type: str
    description: str
    required: bool = False
    default: Any = None

    def schema(self) -> dict[str, Any]:
        """The param's JSON Schema property.

        Returns:
            ``{"type", "description"}`` and ``default`` when one is set.
        """
        found: dict[str, Any] = {"type": self.type, "description": self.description}
        if self.default is not None:
            found["default"] = self.default
        return found


MAX_TOKENS = Param(
    "max_tokens", "integer", "The answer's budget in estimated tokens (bytes / 4).", default=DEFAULT_TOKENS
)


@dataclass(frozen=True)
class Tool:
    """A read-only tool: a name, what it answers, its params and the function that answers.

    Attributes:
        name: the tool's name (MCP and ``hookscope tool NAME``).
        description: what it answers, for the assistant choosing a tool.
        params: its arguments (``max_tokens`` is added to every tool).
        answer: ``answer(**arguments) -> [Section, ...]``.
    """

    name: str
    description: str
    params: tuple[Param, ...]
    answer: Callable[..., Sequence[Section]]

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of the tool's arguments (an object; ``max_tokens`` included).

        Returns:
            ``{"type": "object", "properties", "required", "additionalProperties": False}``.
        """
        params = (*self.params, MAX_TOKENS)
        return {
            "type": "object",
            "properties": {p.name: p.schema() for p in params},
            "required": [p.name for p in params if p.required],
            "additionalProperties": False,
        }

    def run(self, arguments: Mapping[str, Any] | None = None) -> Answer:
        """Check ``arguments`` against the params, answer, and fit the answer to ``max_tokens``.

        Args:
            arguments: keyword -> value, as JSON gives them.

        Returns:
            The fitted ``Answer``.

        Raises:
            OptionError: an unknown argument, a missing required one, or a value of the wrong type.
        """
        given = dict(arguments or {})
        budget = given.pop("max_tokens", DEFAULT_TOKENS)
        check(MAX_TOKENS, budget)
        known = {p.name: p for p in self.params}
        for name in given:
            if name not in known:
                raise OptionError(f"{self.name} takes no argument {name!r}{closest(name, [*known, 'max_tokens'])}")
        for p in self.params:
            if p.name in given:
                check(p, given[p.name])
            elif p.required:
                raise OptionError(f"{self.name} needs {p.name!r} ({p.description})")
        values = {p.name: given.get(p.name, p.default) for p in self.params}
        return fit(self.name, self.answer(**values), budget)


def check(param: Param, value: Any) -> None:
    """Raise ``OptionError`` unless ``value`` has the param's JSON type (a bool is not a number).

    Args:
        param: the param.
        value: the value given.

    Raises:
        OptionError: the value's type is not the param's.
    """
    ok = isinstance(value, TYPES[param.type]) and (param.type == "boolean" or not isinstance(value, bool))
    if not ok:
        raise OptionError(f"{param.name}={value!r} is not a {param.type}")
