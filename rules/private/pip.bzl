"""The targets of a kiln_pip_repository (`@pip//timm`): kiln's python_requirement, under Bazel.

kiln.bazel.pip_repository writes one package per locked distribution:

    kiln_python_site(name = "site", srcs = glob(["site/**"]), distribution = "timm", version = "1.0.31")
    python_requirement(name = "timm", hub = "@//:pip", kiln_attrs = "<json>", sites = [<the closure's sites>])

`python_requirement` hands kiln's planner the target kiln's loading makes for
`@pip//timm` (kind python_requirement, the same attributes: the lock's line and
locked closure), which kiln's own rule (rules/pip/python_requirement.py) then checks
in the plan of every target that depends on it. Bazel gets the closure's
installed files: kiln_rule.bzl gives them to each Python action of the targets
that declare the package (and of the kiln targets right above those, as kiln's
rules pass a model's environment to its packaging), with their sites on the
PYTHONPATH after kiln's own code. The planner checks that each action's packages
are the ones kiln's rule runs it with.
"""

load(":kiln_rule.bzl", "KilnInfo", "KilnPipInfo")

KilnSiteInfo = provider(
    doc = "One installed distribution of a kiln_pip_repository.",
    fields = {
        "name": "the distribution, normalized (timm, huggingface_hub)",
        "version": "as locked",
        "site": "the folder its files are installed in: a PYTHONPATH entry",
        "files": "depset of its files",
    },
)

def _kiln_python_site_impl(ctx):
    site = "/".join([p for p in [ctx.label.workspace_root, ctx.label.package, "site"] if p])
    files = depset(ctx.files.srcs)
    return [
        DefaultInfo(files = files),
        KilnSiteInfo(name = ctx.attr.distribution, version = ctx.attr.version, site = site, files = files),
    ]

kiln_python_site = rule(
    implementation = _kiln_python_site_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = True, doc = "its installed files, under site/"),
        "distribution": attr.string(mandatory = True),
        "version": attr.string(mandatory = True),
    },
    doc = "The installed files of one locked distribution (made by kiln_pip_repository).",
)

def _python_requirement_impl(ctx):
    hub = ctx.attr.hub[KilnInfo]
    attrs = json.decode(ctx.attr.kiln_attrs)
    lock = [f.path for f in hub.files.get("lock", [])]
    if lock != [attrs["lock"]]:
        fail(("%s reads the lock %s, but %s declares %s: name one lock in both " +
              "(kiln_pip_repository(lock = ...) in the WORKSPACE, python_requirements(lock = ...) " +
              "in the root BUILD file)") % (
            ctx.label.workspace_name and "@" + ctx.label.workspace_name,
            attrs["lock"],
            ctx.attr.hub.label,
            ", ".join(lock) or "none",
        ))
    attrs["name"] = ctx.label.name
    attrs["hub"] = str(ctx.attr.hub.label)
    graph = dict(hub.graph)
    root = ctx.bin_dir.path + ("/" + ctx.label.workspace_root if ctx.label.workspace_root else "")
    graph[str(ctx.label)] = {
        "kind": "python_requirement",
        "package": ctx.label.package,
        "name": ctx.label.name,
        "output_root": root,
        "attrs": attrs,
        "files": {},
    }
    packages = {}
    for site in ctx.attr.sites:
        info = site[KilnSiteInfo]
        packages[info.name] = info
    return [
        DefaultInfo(files = depset()),
        KilnInfo(graph = graph, files = {}, outputs = {}, pip = {}),
        KilnPipInfo(packages = packages),
    ]

python_requirement = rule(
    implementation = _python_requirement_impl,
    attrs = {
        "hub": attr.label(mandatory = True, providers = [KilnInfo], doc = "the python_requirements target"),
        "kiln_attrs": attr.string(mandatory = True, doc = "kiln's attributes from the lock, as JSON"),
        "sites": attr.label_list(providers = [KilnSiteInfo], doc = "its locked closure's installed files"),
    },
    doc = "@<repo>//<distribution>: one locked distribution and its closure (made by kiln_pip_repository).",
)
