"""The Python toolchain kiln's actions run with: an interpreter and its versions.

kiln_python_repository (repositories.bzl) declares one of these over an existing
interpreter. Bazel must run that interpreter by its absolute path: a label to a
virtualenv's bin/python loses the virtualenv inside the sandbox (no pyvenv.cfg
beside the staged link). Its `versions` file (Python, torch, torch_tensorrt, ...)
is an input of every action, so a new torch rebuilds what it made.
"""

KilnPythonInfo = provider(
    doc = "The interpreter of kiln's actions.",
    fields = {
        "interpreter": "its absolute path",
        "versions": "File: versions.json (Python and the packages actions import)",
    },
)

def _kiln_python_toolchain_impl(ctx):
    info = KilnPythonInfo(interpreter = ctx.attr.interpreter, versions = ctx.file.versions)
    return [platform_common.ToolchainInfo(kiln = info)]

kiln_python_toolchain = rule(
    implementation = _kiln_python_toolchain_impl,
    attrs = {
        "interpreter": attr.string(mandatory = True, doc = "the interpreter's absolute path"),
        "versions": attr.label(allow_single_file = True, mandatory = True),
    },
    doc = "kiln's Python toolchain (toolchain type @kiln//bazel:python_toolchain_type).",
)
