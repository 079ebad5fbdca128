"""What an action's code is (kiln.code_digest): the kiln modules its module imports, found
by parsing, but not those named under `if TYPE_CHECKING:`, which never run."""

from __future__ import annotations

from kiln import code_digest


def _names(root: str) -> set[str]:
    return {p.relative_to(code_digest.KILN_ROOT).as_posix() for p in code_digest.files((root,))}


def test_an_import_for_annotations_only_is_not_the_importers_code() -> None:
    # action_graph names WindowsTorch for Action.windows_torch's annotation only: the
    # pip repository's code (and Bazel's @pip) must not move with the Windows records.
    assert "action_graph.py" in _names("kiln.action_graph")
    assert "windows_specs.py" not in _names("kiln.action_graph")
    # the module that builds those records at runtime still has them
    assert "windows_specs.py" in _names("kiln.actions.windows.aoti_compile")


def test_an_import_inside_a_function_is_the_importers_code() -> None:
    # the sandbox's client is imported lazily, in a method (exec/sandboxing.py)
    assert "sandbox/client.py" in _names("kiln.exec.sandboxing")
