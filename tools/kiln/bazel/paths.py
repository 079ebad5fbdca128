"""Where outputs go under each tool, and the one mapping between them.

Paths in specs are execroot-relative under both tools: sources at their
workspace path, outputs under the output root, `kiln-out/<package>/...` for
kiln and `bazel-out/<cfg>/bin/<package>/...` for Bazel (with
`external/<repo>/` before the package for a target of another repository).
Nothing else differs, so a spec written by one tool maps onto the other's by
replacing the root, and no artifact may contain the root at all (see
kiln.actions.inductor_cache.inductor_cache_dir).
"""

from __future__ import annotations

import re

from kiln.action_graph import GENERATED_ROOT

# bazel-out/k8-fastbuild/bin: the configuration's part varies with the host and flags.
BAZEL_BIN = re.compile(r"bazel-out/[^/\s\"]+/bin")


def bazel_output_root(bin_dir: str, workspace_root: str = "") -> str:
    """The output root of a Bazel target: ctx.bin_dir.path, and for a target of
    another repository its ctx.label.workspace_root (external/<repo>)."""
    return f"{bin_dir}/{workspace_root}" if workspace_root else bin_dir


def as_kiln(text: str) -> str:
    """`text` (a spec, a path) with Bazel's output root replaced by kiln's."""
    return BAZEL_BIN.sub(GENERATED_ROOT, text)
