"""Torch work, run as actions: `python -m kiln.actions.<name> spec.json`.

These modules are the only place kiln imports torch. Each reads a JSON spec
(itself a content-addressed input of its action), does one job, and writes
only its declared outputs. A user error ends with one line on stderr,
`kiln-action-error: <message>`, and exit code 1; the build shows it.
"""
