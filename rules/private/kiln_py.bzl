"""kiln's Python code as actions import it: a tree of links, `<root>/kiln/...`.

In the repository kiln is split in two folders (tools/kiln, and rules/ joined to
it as kiln.rules by a symlink that Bazel does not follow), and Bazel stages
inputs file by file. This rule links every file an action needs
(catalogue.bzl's KILN_PY, found from the imports) at its import path, so
`PYTHONPATH=<root>` finds `kiln` and `kiln.rules` in the sandbox and on a remote
worker alike. Each action takes only the files its module imports (CODE).
"""

load(":catalogue.bzl", "KILN_PY")

KilnPyInfo = provider(
    doc = "kiln's Python files at their import paths.",
    fields = {
        "files": "import path (kiln/actions/spec.py) -> File",
        "root": "the folder holding kiln/: the actions' PYTHONPATH",
    },
)

def _kiln_py_impl(ctx):
    wanted = {source: path for path, source in KILN_PY.items()}
    files = {}
    for src in ctx.files.srcs:
        short = src.short_path
        if short.startswith("../"):  # ../kiln/rules/x.py in a workspace that uses @kiln
            short = short.split("/", 2)[2]
        path = wanted.get(short)
        if path == None:
            continue
        link = ctx.actions.declare_file("%s/%s" % (ctx.label.name, path))
        ctx.actions.symlink(output = link, target_file = src)
        files[path] = link
    missing = [path for path in KILN_PY if path not in files]
    if missing:
        fail("kiln's sources lack %s: rules/private/catalogue.bzl is out of date " % missing +
             "(python -m kiln.bazel.generate)")
    some = files[sorted(files)[0]]
    root = some.path[:-len(sorted(files)[0]) - 1]
    return [
        KilnPyInfo(files = files, root = root),
        DefaultInfo(files = depset(files.values())),
    ]

kiln_py = rule(
    implementation = _kiln_py_impl,
    attrs = {"srcs": attr.label_list(allow_files = True, doc = "kiln's sources")},
    doc = "kiln's Python files at their import paths, for PYTHONPATH.",
)
