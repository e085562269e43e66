"""The exceptions of kir.

Every exception kir raises on purpose is a :class:`KirError`. Its text (``str(e)``) is the
message ``kirc`` prints for the same failure: for an error located in a module's source,
``file:line:col: error: ...`` followed by the source line and a caret under the place; for one
with no place, the message alone. The parts are attributes as well.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

__all__ = ["KirError", "CompileError", "RunError", "InputError"]


class KirError(Exception):
    """Base class of kir's exceptions.

    Attributes:
        message: the first error's own message, without location or source line.
        file: the name of the source the error is located in (a path, ``<op>.kir`` for a
            built-in op, ``<source>`` for a module given as text), or ``None`` when the error
            has no place in a source.
        line: the 1-based line of that place, or ``None``.
        column: the 1-based column (in characters) of that place, or ``None``.
    """

    message: str
    file: Optional[str]
    line: Optional[int]
    column: Optional[int]

    def __init__(
        self,
        text: str,
        *,
        message: Optional[str] = None,
        file: Optional[str] = None,
        line: Optional[int] = None,
        column: Optional[int] = None,
    ) -> None:
        super().__init__(text)
        self.message = text if message is None else message
        self.file = file
        self.line = line
        self.column = column

    def _parts(self) -> Dict[str, Any]:
        return {"message": self.message, "file": self.file, "line": self.line, "column": self.column}

    def __reduce__(self) -> Tuple[Any, ...]:
        # Keeps the attributes through pickling (multiprocessing, concurrent.futures).
        return (_rebuild, (type(self), str(self), self._parts()))


class CompileError(KirError):
    """A module could not be compiled: it does not parse or verify, a constant is unknown or
    outside its ``where`` condition, a combination is not supported for the target, or a
    backend cannot lower it. Raised by :func:`kir.compile`, and by :func:`kir.run` and
    :func:`kir.constants` for the front end's errors."""


class RunError(KirError):
    """The CPU interpreter stopped while running a module's kernels (for example an access
    out of bounds or a read of an element no kernel wrote), with the kernel and the op at
    fault."""


class InputError(KirError, ValueError):
    """An argument kir cannot take: an unknown op or unreadable path, an unknown target or
    emit, a constant of the wrong type, or an input that is missing, unknown, of the wrong
    kind, rank, shape or dtype, non-numeric, or not representable in its param's dtype.

    It is a ``ValueError`` too. ``argument`` names the argument at fault when one is known
    (an input's or a constant's name, or ``"source"``, ``"target"``, ``"emit"``,
    ``"kernel"``, ``"inputs"``); errors the interpreter finds while binding the inputs are
    located at the param's declaration (``file``, ``line``, ``column``).
    """

    argument: Optional[str]

    def __init__(self, text: str, *, argument: Optional[str] = None, **parts: Any) -> None:
        super().__init__(text, **parts)
        self.argument = argument

    def _parts(self) -> Dict[str, Any]:
        return {**super()._parts(), "argument": self.argument}


def _rebuild(cls: type, text: str, parts: Dict[str, Any]) -> KirError:
    return cls(text, **parts)
