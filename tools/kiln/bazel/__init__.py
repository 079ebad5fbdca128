"""kiln's rules under Bazel: one rule logic (rules/*/*.py), two front ends.

A BUILD file starting with `load("@kiln//rules:defs.bzl", ...)` builds with
`kiln build` and with `bazel build`. Bazel needs the *shape* of each target
at its analysis time (attributes, outputs, actions and their inputs); kiln's
Python rules decide everything else. So:

    explore.py    runs each rule's implementation symbolically (fake deps, a host
                  able to build everything) over every value of its finite
                  attributes, and records the action graph's shape per value
    generate.py   writes that into rules/private/catalogue.bzl, the data the
                  hand-written generic rule (rules/private/kiln_rule.bzl) reads;
                  `python -m kiln.bazel.generate` after changing a rule, and a
                  test fails while the checked-in file is stale
    plan.py       `python -m kiln.bazel.plan`: the one cheap, torch-free planning
                  action of every Bazel target. It validates the attributes with
                  the rule's own pydantic model (the same message as kiln), runs
                  the rule's implementation, checks the action graph against the
                  one Bazel declared, and writes the specs and generated sources
    request.py    the typed record the Starlark hands the planning action
    paths.py      kiln-out/ and bazel-out/<cfg>/bin/: the one mapping between them

Both tools then run the same kiln.actions.* modules on the same specs, so
they produce the same bytes (tests/e2e/test_bazel_conformance.py).
"""
