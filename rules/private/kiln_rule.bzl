"""The one Bazel rule behind every kiln rule: it reads catalogue.bzl, and repeats no rule logic.

kiln's rules are Python (rules/*/*.py): attributes, defaults, validation, specs and
output names live there only. What Bazel must know before anything runs, the shape
of each target, was found by running those rules (kiln.bazel.explore) and written
into catalogue.bzl. For a target, this file

  - in the macro: keeps label and output attributes typed (Bazel resolves them) and
    packs every other attribute as JSON (4.2.3 has no attribute type for floats or
    lists of dicts), untouched and undefaulted, into `kiln_attrs`; sends targets with
    GPU actions to a CUDA execution platform; adds `<name>_cc` for a C++ loader;
  - in the rule: picks the shape by the key attributes, declares its outputs and
    actions: first KilnPlan (python -m kiln.bazel.plan), which runs kiln's own
    validation and implementation on the attributes, checks that its action graph is
    this one and writes the specs and generated sources; then each of kiln's actions
    (python -m kiln.actions.<module> <spec>) with its code and the toolchain's
    versions as inputs.

A target whose key attributes have no shape (an invalid value, or a catalogue older
than the rule) gets the planning action alone, which fails with kiln's message.
"""

load("@rules_cc//cc:defs.bzl", "cc_library")
load(":catalogue.bzl", "CODE", "ENV", "FORMAT", "PLANNER", "RULES")
load(":kiln_py.bzl", "KilnPyInfo")

KilnInfo = provider(
    doc = "A target of one of kiln's rules, for the kiln targets that depend on it.",
    fields = {
        "graph": "label -> what the planning action needs of this target and of every " +
                 "kiln target it depends on (kiln.bazel.request.PlanTarget)",
        "files": "attribute path -> Files: this target's label attributes, and as " +
                 "'attr.sub' those of the kiln targets they name",
        "outputs": "output name ({name} for the target's) -> File",
        "pip": "distribution -> KilnSiteInfo: the locked packages this target's @pip// deps " +
               "declare (their closures), which the actions of the kiln targets that depend " +
               "on it run with too",
    },
)

KilnPipInfo = provider(
    doc = "A `@pip//<name>` target (pip.bzl): the installed files of its locked closure.",
    fields = {"packages": "distribution -> KilnSiteInfo"},
)

_PYTHON = "//bazel:python_toolchain_type"

# Attributes every rule has; Bazel handles them, and kiln validates them too.
_COMMON = ["visibility", "tags", "testonly", "deprecation"]

# And every test rule (kiln's TestAttrs): Bazel's test set-up reads them.
_TEST_COMMON = ["size", "timeout", "flaky"]

def _is_test(entry):
    """Whether the rule's targets are tests: a shape holds a test action (TestRunner)."""
    return any([shape["test"] for shape in entry["shapes"].values()])

def kiln_rule(kind):
    """The keyword arguments of rule() for the kiln rule `kind`."""
    entry = RULES[kind]
    attrs = {
        "kiln_attrs": attr.string(doc = "every attribute but the label and output ones, " +
                                         "as JSON: packed by the macro, checked by kiln's schema"),
        "_kind": attr.string(default = kind),
        "_kiln_py": attr.label(default = Label("//bazel:kiln_py"), providers = [KilnPyInfo]),
    }
    # Typed, so Bazel resolves them (`kiln help <rule>` documents every attribute).
    for name, how in entry["labels"].items():
        if how == "label":
            attrs[name] = attr.label(allow_files = True)
        else:
            attrs[name] = attr.label_list(allow_files = True)
    for name, how in entry["outputs"].items():
        attrs[name] = attr.output() if how == "output" else attr.output_list()
    return dict(
        implementation = _impl,
        attrs = attrs,
        doc = entry["doc"],
        toolchains = [str(Label(_PYTHON))],
        test = _is_test(entry),
    )

def _shape(entry, values):
    """The shape for attribute values as written (labels: whether set), or None."""
    key = []
    for name in entry["key"]:
        if name in entry["labels"]:
            key.append(bool(values.get(name)) if name in values else entry["defaults"][name])
        else:
            key.append(values.get(name, entry["defaults"][name]))
    return entry["shapes"].get(json.encode(key))

def kiln_macro(rule, kind, name, kwargs):
    """Declares the target `name` of the kiln rule `kind` (`rule`) from BUILD attributes."""
    entry = RULES[kind]
    typed = {}
    for attr_name in _COMMON + (_TEST_COMMON if _is_test(entry) else []):
        if attr_name in kwargs:
            typed[attr_name] = kwargs[attr_name]  # also packed: kiln checks them as well
    for attr_name in list(entry["labels"]) + list(entry["outputs"]):
        if attr_name in kwargs:
            typed[attr_name] = kwargs.pop(attr_name)
    shape = _shape(entry, dict(kwargs, **typed))
    if entry["public"] and "visibility" not in typed:
        typed["visibility"] = ["//visibility:public"]  # as kiln finds it: by its name
    if shape and shape["gpu"]:
        # GPU actions run on an execution platform with a CUDA GPU: a REAPI pool's, or
        # the local one kiln_python_repository registers where nvidia-smi finds one.
        typed["exec_compatible_with"] = [str(Label("//bazel:cuda"))]
    rule(name = name, kiln_attrs = json.encode(kwargs), **typed)
    if shape and shape["cc"]:
        _cc_library(name, shape["cc"], typed)

def _cc_library(name, cc, typed):
    """<name>_cc: the target's C++ loader as a cc_library, its packages as data, and
    <name>_runfiles.h naming where the package is in the runfiles."""
    common = {a: typed[a] for a in ["visibility", "tags", "testonly"] if a in typed}
    for group in ["srcs", "hdrs", "data"]:
        native.filegroup(
            name = "%s_cc_%s" % (name, group),
            srcs = [":" + name],
            output_group = "cc_" + group,
            **common
        )
    cc_library(
        name = name + "_cc",
        srcs = [":%s_cc_srcs" % name],
        hdrs = [":%s_cc_hdrs" % name],
        data = [":%s_cc_data" % name],
        includes = [folder.replace("{name}", name) for folder in cc["includes"]],
        copts = ["-std=c++20"],  # what kiln's loader templates are written in
        linkopts = ["-ldl"],  # a TensorRT package's loader dlopens the runtime
        deps = [str(Label("//bazel:libtorch"))],
        **common
    )

def _files(ref, ctx, outs, files, deps):
    """The Files a catalogue Ref names (kiln.bazel.explore.Ref)."""
    kind = ref["kind"]
    if kind == "out":
        return [outs[ref["value"]]]
    if kind == "out_attr":
        value = getattr(ctx.outputs, ref["value"])
        return value if type(value) == "list" else [value]
    if kind == "attr":
        return files.get(ref["value"], [])
    if kind == "dep_out":
        return [info.outputs[ref["value"]] for info in deps.get(ref["attr"], [])]
    fail("unknown file reference %s: catalogue.bzl is newer than kiln_rule.bzl" % ref)

def _all(refs, ctx, outs, files, deps):
    found = {}
    for ref in refs:
        for f in _files(ref, ctx, outs, files, deps):
            found[f.path] = f
    return [found[p] for p in sorted(found)]

def _argv(argv, ctx, outs, files, deps, python):
    """(the command line with the interpreter, as the planner compares it with `{python}`)"""
    real = []
    planned = []
    for arg in argv:
        if arg.get("python"):
            real.append(python)
            planned.append("{python}")
        elif "file" in arg:
            paths = [f.path for f in _files(arg["file"], ctx, outs, files, deps)]
            real += paths
            planned += paths
        else:
            real.append(arg["text"])
            planned.append(arg["text"])
    return real, planned

def _impl(ctx):
    kind = ctx.attr._kind
    entry = RULES[kind]
    label = str(ctx.label)
    attrs = json.decode(ctx.attr.kiln_attrs) if ctx.attr.kiln_attrs else {}
    attrs["name"] = ctx.label.name

    # The label attributes, as canonical labels for kiln and as Files for the actions.
    files = {}  # attribute path -> [File]
    deps = {}  # attribute -> [KilnInfo]
    graph = {}
    plain = {}  # label -> paths, for what is no kiln target
    own_pip = {}  # distribution -> KilnSiteInfo: this target's @pip// deps' closures
    python_env = {}  # and its kiln dependencies': what its Python actions run with
    for name, how in entry["labels"].items():
        value = getattr(ctx.attr, name)
        if how == "label":
            targets = [value] if value else []
            if value:
                attrs[name] = str(value.label)
        else:
            targets = value
            if value:
                attrs[name] = [str(t.label) for t in value]
        own = []
        for target in targets:
            found = target[DefaultInfo].files.to_list()
            own += found
            if KilnPipInfo in target:
                own_pip.update(target[KilnPipInfo].packages)
            if KilnInfo in target:
                info = target[KilnInfo]
                graph.update(info.graph)
                python_env.update(info.pip)
                deps.setdefault(name, []).append(info)
                for sub, sub_files in info.files.items():
                    path = name + "." + sub
                    files[path] = files.get(path, []) + sub_files
            else:
                plain[str(target.label)] = [f.path for f in found]
        files[name] = own
    for name, how in entry["outputs"].items():
        value = getattr(ctx.attr, name)
        if how == "output" and value:
            attrs[name] = value.name
        elif how == "output_list" and value:
            attrs[name] = [out.name for out in value]

    shape = _shape(entry, attrs)
    outs = {}
    for out in shape["outputs"] if shape else []:
        if out["kind"] != "out" or out["test"]:
            continue  # an output attribute's file: Bazel declared it; a test's: none
        path = out["value"].replace("{name}", ctx.label.name)
        declare = ctx.actions.declare_directory if out["directory"] else ctx.actions.declare_file
        outs[out["value"]] = declare(path)

    toolchain = ctx.toolchains[str(Label(_PYTHON))].kiln
    kiln_py = ctx.attr._kiln_py[KilnPyInfo]
    env = dict(ENV, PYTHONPATH = kiln_py.root)

    # A Python action imports the locked packages of the target's @pip// deps and of its
    # kiln dependencies' (kiln: a model's environment is its packaging's): their files are
    # inputs, their sites follow kiln's code on the PYTHONPATH. Bazel keys the action by
    # those files; the planner checks that kiln's rule runs it with the same packages.
    python_env.update(own_pip)
    packages = [python_env[n] for n in sorted(python_env)]
    package_files = depset(transitive = [p.files for p in packages])
    python_path = ":".join([kiln_py.root] + [p.site for p in packages])
    pins = ["%s==%s" % (p.name, p.version) for p in packages]
    root = ctx.bin_dir.path
    if ctx.label.workspace_root:
        root += "/" + ctx.label.workspace_root  # kiln.bazel.paths.bazel_output_root
    graph[label] = {
        "kind": kind,
        "package": ctx.label.package,
        "name": ctx.label.name,
        "output_root": root,
        "attrs": attrs,
        "files": plain,
    }

    # The actions kiln's rule plans, as Bazel runs them and as the planner checks them.
    writes = _all(shape["writes"], ctx, outs, files, deps) if shape else []
    planned = []
    launcher = None
    runfiles = []
    for action in shape["actions"] if shape else []:
        argv, planned_argv = _argv(action["argv"], ctx, outs, files, deps, toolchain.interpreter)
        inputs = _all(action["inputs"], ctx, outs, files, deps)
        python = bool(action["argv"] and action["argv"][0].get("python"))
        if action["test"]:
            output_paths = [_test_output(ctx, ref) for ref in action["outputs"]]
        else:
            outputs = _all(action["outputs"], ctx, outs, files, deps)
            output_paths = [f.path for f in outputs]
        planned.append({
            "mnemonic": action["mnemonic"],
            "argv": planned_argv,
            "inputs": [f.path for f in inputs],
            "outputs": sorted(output_paths),
            "python_env": pins if python else [],
        })
        if action["test"]:
            # Not a build action: the test `bazel test` runs, from a launcher, over the
            # same inputs (its runfiles).
            env = dict(action["env"], PYTHONPATH = python_path)
            launcher = _launcher(ctx, label, argv, env)
            runfiles += inputs + kiln_py.files.values() + [toolchain.versions]
            runfiles += package_files.to_list()
            continue
        code = [kiln_py.files[p] for p in CODE.get(action["module"], [])]
        ctx.actions.run(
            executable = argv[0],
            arguments = argv[1:],
            inputs = depset(
                inputs + code + [toolchain.versions],
                transitive = [package_files] if python else [],
            ),
            outputs = outputs,
            env = dict(action["env"], PYTHONPATH = python_path if python else kiln_py.root),
            mnemonic = action["mnemonic"],
            progress_message = "%s %s" % (action["mnemonic"], label),
            execution_requirements = {"requires-gpu": "1"} if action["gpu"] else {},
        )
    default = _all(shape["files"], ctx, outs, files, deps) if shape else []
    expected = None
    if shape:
        expected = {
            "writes": [f.path for f in writes],
            "actions": planned,
            "files": [f.path for f in default],
        }

    request = ctx.actions.declare_file(ctx.label.name + ".kiln_target.json")
    report = ctx.actions.declare_file(ctx.label.name + ".kiln_plan.json")
    ctx.actions.write(request, json.encode({
        "kind": "BazelPlan",
        "format": FORMAT,
        "label": label,
        "targets": graph,
        "expected": expected,
        "report": report.path,
    }))
    ctx.actions.run(
        executable = toolchain.interpreter,
        arguments = ["-m", PLANNER, request.path],
        inputs = [request, toolchain.versions] + [kiln_py.files[p] for p in CODE[PLANNER]],
        outputs = writes + [report],
        env = env,
        mnemonic = "KilnPlan",
        progress_message = "Planning %s" % label,
    )

    groups = {"kiln_plan": depset([report]), "_validation": depset([report])}
    if shape and shape["cc"]:
        cc = shape["cc"]
        header = _runfiles_header(ctx, [outs[d] for d in cc["data"]])
        groups["cc_srcs"] = depset([outs[s] for s in cc["srcs"]])
        groups["cc_hdrs"] = depset([outs[h] for h in cc["hdrs"]] + [header])
        groups["cc_data"] = depset([outs[d] for d in cc["data"]])
    runfiles += _all(shape["runfiles"], ctx, outs, files, deps) if shape else []
    if _is_test(entry) and not launcher:  # no shape: the planning action says why
        launcher = _launcher(ctx, label, ["false"], {})
    return [
        DefaultInfo(
            files = depset(default if shape else [report]),
            runfiles = ctx.runfiles(files = runfiles),
            executable = launcher,
        ),
        OutputGroupInfo(**groups),
        KilnInfo(graph = graph, files = files, outputs = outs, pip = own_pip),
    ]

def _test_output(ctx, ref):
    """The execroot path of a test action's output, which Bazel does not declare (its test
    set-up keeps the log and test.xml): the planner compares it."""
    if ref["kind"] != "out":
        fail("a test action's output is %s, not one of the target's own" % ref)
    folder = ctx.bin_dir.path + ("/" + ctx.label.package if ctx.label.package else "")
    return folder + "/" + ref["value"].replace("{name}", ctx.label.name)

def _launcher(ctx, label, argv, env):
    """<name>.kiln_test.sh: the test as `bazel test` runs it, kiln's test action inside a
    copy of the execroot's layout made of links into the runfiles.

    The test's spec holds execroot paths (sources at their path, outputs under
    bazel-out/<cfg>/bin, other repositories under external/), as under kiln: the links
    put each at its runfiles' file. The test runner writes Bazel's XML_OUTPUT_FILE.
    """
    bin_dir = ctx.bin_dir.path
    lines = [
        "#!/bin/bash",
        "# Generated by kiln's Bazel rules for %s: runs its test action (docs/bazel.md)." % label,
        "set -euo pipefail",
        'runfiles="${TEST_SRCDIR:-$0.runfiles}"',
        'main="$runfiles/%s"' % ctx.workspace_name,
        'root="${TEST_TMPDIR:-$(mktemp -d)}/kiln_execroot"',
        'rm -rf "$root" && mkdir -p "$root/%s"' % bin_dir,
        'for entry in "$main"/*; do',
        '    ln -s "$entry" "$root/"',
        '    ln -s "$entry" "$root/%s/"' % bin_dir,
        "done",
        # (the main repository's runfiles may hold external/ too: the legacy layout)
        'ln -sfn "$runfiles" "$root/external"',
        'ln -sfn "$runfiles" "$root/%s/external"' % bin_dir,
        'cd "$root"',
    ]
    for key in sorted(env):
        lines.append("export %s=%s" % (key, _quote(env[key])))
    lines += [
        "export TEST_TARGET=%s" % _quote(label),
        'export KILN_TEST_OUTPUTS="$root/.kiln_test"',
        "export KILN_TEST_ATTEMPTS=1  # flaky: Bazel runs it again",
        'export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"',
        "exec " + " ".join([_quote(a) for a in argv]),
    ]
    script = ctx.actions.declare_file(ctx.label.name + ".kiln_test.sh")
    ctx.actions.write(script, "\n".join(lines) + "\n", is_executable = True)
    return script

def _quote(text):
    return "'" + text.replace("'", "'\\''") + "'"

def _runfiles_header(ctx, packages):
    """<name>_runfiles.h: <NAME>_RLOCATION, the package's path for the runfiles library
    (@bazel_tools//tools/cpp/runfiles), `<workspace>/<package>/<name>.pt2`."""
    symbol = "".join([c if c.isalnum() else "_" for c in ctx.label.name.upper().elems()])
    lines = [
        "// Generated by kiln's Bazel rules for %s. Do not edit." % ctx.label,
        "// Where its package is in the runfiles of a binary that depends on %s_cc:" %
        ctx.label.name,
        "//   auto runfiles = bazel::tools::cpp::runfiles::Runfiles::Create(argv[0], &error);",
        "//   std::string package = runfiles->Rlocation(%s_RLOCATION);" % symbol,
        "#pragma once",
    ]
    for package in packages:
        short = package.short_path
        path = short[3:] if short.startswith("../") else ctx.workspace_name + "/" + short
        lines.append("#define %s_RLOCATION \"%s\"" % (symbol, path))
    header = ctx.actions.declare_file(ctx.label.name + "_runfiles.h")
    ctx.actions.write(header, "\n".join(lines) + "\n")
    return header
