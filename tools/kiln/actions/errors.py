"""One-paragraph errors of model actions: what failed, where, which target to change, the hint.

A model action that fails ends with

    kiln-action-error: models/net.py:12: //models:net: <what failed>
      hint: <what to change, naming the attribute>

where the location is the innermost frame of the user's own code (a file of the
execroot, i.e. of the workspace) in the exception's traceback, and the label is
the target holding the setting to change: the torch_model for its inputs,
dynamic dims or code, the aoti_package for tolerances and compile settings.
Python's traceback is left out; it follows the paragraph when the action runs
with KILN_VERBOSE_FAILURES=1 (what `--verbose_failures` asks for).

Torch's messages are long; `summary` keeps the first line and, whole, the
"Suggested fixes" torch gives (e.g. `seq = Dim('seq', min=4, max=64)`).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator, Sequence
from types import TracebackType

from kiln.action_specs import TensorSpec
from kiln.actions.spec import ActionFailure

Shapes = dict[str, tuple[int, ...]]
# Generated files in an execroot (kiln.action_graph.GENERATED_ROOT): never user code.
GENERATED_ROOT = "kiln-out"


class ActionError(ActionFailure):
    """A failure of the user's model or settings, formatted as one paragraph."""

    def __init__(
        self,
        message: str,
        *,
        label: str | None = None,
        location: str | None = None,
        hint: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.label = label
        self.location = location
        self.hint = hint
        self.cause = cause

    def __str__(self) -> str:
        return self.format(verbose=False)

    def format(self, *, verbose: bool) -> str:
        text = ": ".join(part for part in (self.location, self.label, self.message) if part)
        if self.hint:
            text += f"\n  hint: {self.hint}"
        if verbose and self.cause is not None:
            text += "\n" + "".join(traceback.format_exception(self.cause)).rstrip()
        return text


def chain(error: BaseException) -> Iterator[BaseException]:
    """The exception and what caused it, outermost first (each once)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def frames(tb: TracebackType | None) -> Iterator[TracebackType]:
    """The traceback's entries, outermost first."""
    while tb is not None:
        yield tb
        tb = tb.tb_next


def workspace_path(filename: str) -> str | None:
    """A source file's workspace path, if it is one: the execroot (the working
    directory) holds the workspace's sources at their workspace paths."""
    if not filename or filename.startswith("<"):
        return None
    relative = os.path.relpath(os.path.abspath(filename), os.getcwd())
    if relative.startswith("..") or relative.split(os.sep, 1)[0] == GENERATED_ROOT:
        return None
    return relative


def user_location(error: BaseException) -> str | None:
    """`file:line` of the innermost frame in workspace code, looking first at the
    exception that started it all (torch often re-raises a model's error)."""
    for link in reversed(list(chain(error))):
        found = None
        for entry in frames(link.__traceback__):
            path = workspace_path(entry.tb_frame.f_code.co_filename)
            if path is not None:
                found = f"{path}:{entry.tb_lineno}"
        if found:
            return found
    return None


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def suggested_fixes(text: str) -> list[str]:
    """The lines torch indents under "Suggested fixes:", whole."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().lower().startswith("suggested fixes"):
            fixes = []
            for fix in lines[i + 1 :]:
                if not fix.strip():
                    break
                fixes.append(fix.strip())
            return fixes
    return []


def first_sentence(text: str, longer_than: int = 160) -> str:
    """The first line, cut after its first sentence if it runs on."""
    line = first_line(text)
    if len(line) > longer_than:
        end = line.find(". ", 40)
        if end > 0:
            return line[: end + 1]
    return line


def summary(error: BaseException) -> str:
    """`Type: first sentence of the message`, then torch's suggested fixes, whole."""
    text = str(error).strip()
    head = f"{type(error).__name__}: {first_sentence(text)}" if text else type(error).__name__
    fixes = suggested_fixes(text)
    if fixes:
        head += " (torch suggests: " + "; ".join(fixes) + ")"
    return head


# -- describing inputs and shape points -------------------------------------------------


def shown(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def declared(spec: TensorSpec, *, named: bool = True) -> str:
    """An input as its torch_model declares it: `ids: [2, 8] int64 in [0, 1000)`."""
    text = f"{shown(spec.shape)} {spec.dtype}"
    if spec.value_range is not None:
        text += f" in [{spec.value_range[0]}, {spec.value_range[1]})"
    return f"{spec.name}: {text}" if named else text


def at_point(point: str, shapes: Shapes | None) -> str:
    """'on its example inputs' or 'at the max shapes (x: [64, 10])'."""
    if not shapes:
        return "on its example inputs"
    listed = ", ".join(f"{name}: {shown(shape)}" for name, shape in shapes.items())
    return f"at the {point} shapes ({listed})"
