"""The shape of a rule's action graph, found by running the rule: what Bazel must declare.

For every rule, an example target is analyzed with kiln's own RuleContext and
a recording ActionFactory, on a host able to build everything (each
toolchain's `example`; every distribution "installed"): mandatory attributes
take their schema's `examples`, label attributes name fake source files or
fake targets of the catalogue's rules (whichever the implementation accepts).
That is repeated for every combination of the finite attributes (bools,
Literals, optional values, whether a label attribute is set); combinations
that fail validation or analysis are not shapes (the planning action reports
them under Bazel with kiln's message).

Each file of the recorded graph is then described relative to the target, as
a Ref: an output ("{name}.pt2"), an output attribute's value (`out`), the
files of a label attribute, through dependencies ("model.src": the `src` of
the target `model` names), or an output of a dependency. Combinations with
the same shape are merged, and the attributes whose values change the shape
become the key Bazel selects it by (aoti_package: device, validate).

Nothing here reads the machine: the catalogue generated from it is the same
on every machine, so a test can hold the checked-in copy to it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from kiln.action_graph import GENERATED_ROOT, PYTHON_INTERPRETER, Action, File
from kiln.errors import KilnError
from kiln.host_facts import GPU_HOST, HostFacts, Toolchain, ToolchainResolver
from kiln.rule_api import AnalyzedTarget, DefaultInfo, Rule, RuleAttrs, RuleContext
from kiln.rule_api.attrs import LABEL, OUTPUT
from kiln.rule_api.testing import MNEMONIC as TEST_MNEMONIC
from kiln.test_results import ATTEMPTS_ENV, OUTPUTS_ENV, TIMEOUT_ENV

NAME = "kiln_shape"  # the example target's name; "{name}" in output templates
PACKAGE = "shape"
FAKE = "@fake/"  # fake source files: @fake/<attribute path>/<index>
SOURCE = "source"  # a dependency that is a plain file (source, genrule output, ...)
COMMON = frozenset(RuleAttrs.model_fields)  # name, tags, visibility, ...: Bazel's own
# What every Bazel test rule has (kiln's test rules too: rules/testing/test_attrs.py):
# Bazel's own on a test rule.
TEST_COMMON = frozenset({"size", "timeout", "flaky"})
LIMIT = 4096  # attribute combinations a rule may have
# A test action's environment that Bazel's test set-up gives instead (its label, its
# timeout from size/timeout, its attempts from flaky) or the launcher sets (the outputs):
# left out of the shape, so size, timeout and flaky do not select one.
TEST_ENV = frozenset({"TEST_TARGET", TIMEOUT_ENV, ATTEMPTS_ENV, OUTPUTS_ENV})

Json = Any


class ShapeError(Exception):
    """A rule whose action graph cannot be described to Bazel; says what to change."""


@dataclass(frozen=True, order=True)
class Ref:
    """A file of a target's action graph, as its Bazel rule finds it.

    kind "out": an output, `value` its name with "{name}" for the target's name;
    "out_attr": the value of the output attribute `value`; "attr": the files of
    the label attribute path `value` ("model.src"); "dep_out": the output
    `value` of the targets the label attribute `attr` names.
    """

    kind: Literal["out", "out_attr", "attr", "dep_out"]
    value: str
    attr: str = ""

    def data(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "value": self.value,
            **({"attr": self.attr} if self.attr else {}),
        }


@dataclass(frozen=True)
class Arg:
    """One element of an action's argv: the interpreter, a literal, or a file's path."""

    python: bool = False
    text: str | None = None
    file: Ref | None = None

    def data(self) -> dict[str, Json]:
        if self.python:
            return {"python": True}
        if self.file is not None:
            return {"file": self.file.data()}
        return {"text": self.text}


@dataclass(frozen=True)
class ActionShape:
    mnemonic: str
    module: str | None  # the kiln module `-m` runs: its code is an input
    argv: tuple[Arg, ...]
    env: tuple[tuple[str, str], ...]
    inputs: tuple[Ref, ...]
    outputs: tuple[Ref, ...]
    gpu: bool
    # The test action (kiln.rule_api.testing): under Bazel the test itself, run by
    # `bazel test` from the target's launcher, not a build action.
    test: bool = False
    # A test action's command is `python -m kiln.actions.test_runner -- COMMAND`: the kiln
    # module COMMAND runs (model_test), whose code the test reads too.
    command_module: str | None = None

    def data(self) -> dict[str, Json]:
        return {
            "mnemonic": self.mnemonic,
            "module": self.module,
            "command_module": self.command_module,
            "argv": [a.data() for a in self.argv],
            "env": dict(self.env),
            "inputs": [r.data() for r in self.inputs],
            "outputs": [r.data() for r in self.outputs],
            "gpu": self.gpu,
            "test": self.test,
        }


@dataclass(frozen=True)
class Output:
    ref: Ref
    directory: bool
    test: bool = False  # the test action's: Bazel declares it not (its test set-up has them)


@dataclass(frozen=True)
class RuleShape:
    """What Bazel declares for one target: outputs, the files the planning action writes,
    the actions after it, and the files the target stands for."""

    outputs: tuple[Output, ...]
    writes: tuple[Ref, ...]
    actions: tuple[ActionShape, ...]
    files: tuple[Ref, ...]
    runfiles: tuple[Ref, ...]

    @property
    def gpu(self) -> bool:
        return any(a.gpu for a in self.actions)

    def cc(self) -> dict[str, list[str]] | None:
        """A C++ library among the target's files (a loader), for its `<name>_cc`
        cc_library: sources, headers, the folders holding headers, and the packages
        (.pt2) it loads as data."""
        names = [r.value for r in self.files if r.kind == "out"]
        hdrs = [n for n in names if n.endswith((".h", ".hpp"))]
        srcs = [n for n in names if n.endswith((".cpp", ".cc"))]
        if not hdrs and not srcs:
            return None
        folders = sorted({h.rpartition("/")[0] for h in hdrs if "/" in h})
        data = [n for n in names if n.endswith(".pt2")]
        return {"srcs": srcs, "hdrs": hdrs, "includes": folders, "data": data}

    def data(self) -> dict[str, Json]:
        return {
            "outputs": [
                {**o.ref.data(), "directory": o.directory, "test": o.test} for o in self.outputs
            ],
            "writes": [r.data() for r in self.writes],
            "actions": [a.data() for a in self.actions],
            "files": [r.data() for r in self.files],
            "runfiles": [r.data() for r in self.runfiles],
            "gpu": self.gpu,
            "test": any(a.test for a in self.actions),
            "cc": self.cc(),
        }


@dataclass(frozen=True)
class RuleTable:
    """A rule as its Bazel rule needs it: typed attributes, and a shape per key."""

    name: str
    doc: str
    labels: dict[str, str]  # attribute -> "label" | "label_list"
    outputs: dict[str, str]  # attribute -> "output" | "output_list"
    key: tuple[str, ...]  # the attributes whose values select a shape (labels: whether set)
    defaults: dict[str, Json]  # their values when the BUILD file leaves them out
    shapes: dict[str, RuleShape]  # json.dumps([values of key]) -> shape
    modules: tuple[str, ...]  # the kiln modules its actions run
    # A root_package rule's targets are found by name from any repository (a
    # python_requirements target by its @pip's packages): public unless the BUILD says.
    public: bool = False

    def data(self) -> dict[str, Json]:
        return {
            "doc": self.doc,
            "public": self.public,
            "labels": self.labels,
            "outputs": self.outputs,
            "key": list(self.key),
            "defaults": self.defaults,
            "shapes": {key: shape.data() for key, shape in self.shapes.items()},
        }


def key_of(values: Sequence[Json]) -> str:
    """The table key of the key attributes' values: what Starlark's json.encode writes."""
    return json.dumps(list(values), separators=(",", ":"), sort_keys=True)


# -- a host that can build anything ---------------------------------------------------


class _CapableHost(HostFacts):
    def version(self, distribution: str) -> str | None:
        del distribution
        return "0"


HOST = _CapableHost(
    os="linux",
    arch="x86_64",
    python="3.11.7",
    python_impl="cpython",
    interpreter="python3",
    distributions=(),
)


class _ExampleToolchains(ToolchainResolver):
    def get(self, toolchain: Toolchain[Any]) -> Any:
        if toolchain.name == GPU_HOST.name:  # GPU actions run on the capable host too
            return self.host
        if toolchain.example is None:
            raise ShapeError(
                f"toolchain '{toolchain.name}' has no example value: give its Toolchain(...) "
                "an example= that a host able to build every target would resolve to"
            )
        return toolchain.example()


# -- attributes --------------------------------------------------------------------------


def spelling(name: str, info: FieldInfo) -> str:
    """The attribute's name as BUILD files write it (validate_ is `validate`)."""
    return info.alias or name


def _default(info: FieldInfo) -> Json:
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return info.default


def _finite(annotation: Any) -> tuple[Json, ...] | None:
    """Every value of a type with few values (bool, Literal, and those or None), else None."""
    if annotation is bool:
        return (False, True)
    origin = get_origin(annotation)
    if origin is Literal:
        return get_args(annotation)
    if origin in (Union, types.UnionType):
        values: list[Json] = []
        for arg in get_args(annotation):
            if arg is type(None):
                values.insert(0, None)
                continue
            inner = _finite(arg)
            if inner is None:
                return None
            values += inner
        return tuple(values)
    return None


@dataclass
class _Attrs:
    """One rule's attributes, sorted into what Bazel types and what kiln packs."""

    rule: Rule
    labels: dict[str, str] = field(default_factory=dict)  # spelling -> label | label_list
    outputs: dict[str, str] = field(default_factory=dict)
    example: dict[str, Json] = field(default_factory=dict)
    domains: dict[str, tuple[Json, ...]] = field(default_factory=dict)
    defaults: dict[str, Json] = field(default_factory=dict)
    # Optional attributes' examples, tried where their defaults make a combination invalid
    # (model_test's baseline needs a max_drop): that combination has a shape too.
    fallback: dict[str, Json] = field(default_factory=dict)

    @staticmethod
    def of(rule: Rule) -> _Attrs:
        out = _Attrs(rule)
        marked_labels = set(rule.attrs.fields_marked(LABEL))
        marked_outputs = set(rule.attrs.fields_marked(OUTPUT))
        test = set(rule.attrs.model_fields) >= TEST_COMMON
        for name, info in rule.attrs.model_fields.items():
            if name in COMMON or (test and name in TEST_COMMON):
                continue
            attr = spelling(name, info)
            many = get_origin(info.annotation) is list
            if name in marked_labels:
                out.labels[attr] = "label_list" if many else "label"
                fake = [f"//{PACKAGE}:{attr}_{i}" for i in range(2 if many else 1)]
                out.example[attr] = fake if many else fake[0]
                if not info.is_required():
                    # Whether it is set may change the graph: explored, keyed as a bool.
                    out.domains[attr] = ([] if many else None, out.example[attr])
                    out.defaults[attr] = bool(_default(info))
                continue
            if name in marked_outputs:
                out.outputs[attr] = "output_list" if many else "output"
            if info.is_required():
                if not info.examples:
                    raise ShapeError(
                        f"{rule.name}: attribute '{attr}' is mandatory and has no example: "
                        "give its Field(...) examples=[...] (a valid value)"
                    )
                out.example[attr] = info.examples[0]
            else:
                out.defaults[attr] = _default(info)
                if info.examples:
                    out.fallback[attr] = info.examples[0]
            values = _finite(info.annotation)
            if values is not None and name not in marked_outputs:
                out.domains[attr] = values
        return out


# -- analysis of example targets ---------------------------------------------------------


@dataclass
class _Example:
    """An analyzed example target: its context and providers, and what its files are."""

    ctx: RuleContext[Any]
    providers: dict[type, Any]
    known: dict[str, Ref]  # path of a dependency's file -> how this target reaches it


class Explorer:
    """Finds the shapes of the catalogue's rules (`registry`: name -> Rule)."""

    def __init__(self, registry: Mapping[str, Rule]):
        self.registry = dict(registry)
        self._dep_kinds: dict[str, dict[str, str]] = {}
        self._resolving: list[str] = []

    def table(self, rule: Rule) -> RuleTable:
        attrs = _Attrs.of(rule)
        kinds = self.dep_kinds(rule)
        names = list(attrs.domains)
        combos = list(itertools.product(*attrs.domains.values()))
        if len(combos) > LIMIT:
            raise ShapeError(
                f"{rule.name}: {len(combos)} combinations of finite attributes ({', '.join(names)})"
                f" are more than {LIMIT}"
            )
        found: dict[tuple[Json, ...], RuleShape | None] = {}
        for combo in combos:
            values = dict(attrs.example)
            for name, value in zip(names, combo, strict=True):
                if name in attrs.labels and not value:
                    values.pop(name)  # a label attribute left out
                else:
                    values[name] = value
            shape = self._shape_or_none(rule, values, kinds)
            if shape is None and attrs.fallback:
                shape = self._shape_or_none(rule, {**attrs.fallback, **values}, kinds)
            found[_hashable(combo)] = shape
        if not any(found.values()):
            raise ShapeError(f"{rule.name}: no combination of attributes analyzes")
        key = _relevant(names, attrs, found)
        shapes: dict[str, RuleShape] = {}
        # A label attribute left out only drops its files: the shape with it set serves
        # both (its files resolve to none), unless it is part of the key. Where two may not
        # be set together (model_test's eager and reference), the shape with the most set
        # serves the key.
        served: dict[str, int] = {}  # key -> how many labels its shape's combination left out

        def unset(combo: tuple[Json, ...]) -> int:
            values = dict(zip(names, combo, strict=True))
            return sum(1 for a in names if a in attrs.labels and a not in key and not values[a])

        for combo, shape in sorted(found.items(), key=lambda item: unset(item[0])):
            if shape is None:
                continue
            values = dict(zip(names, combo, strict=True))
            picked = key_of([_key_value(attrs, a, values[a]) for a in key])
            if picked not in shapes:
                shapes[picked], served[picked] = shape, unset(combo)
            elif served[picked] == unset(combo) == 0 and shapes[picked] != shape:
                raise ShapeError(f"{rule.name}: attributes {names} do not determine the shape")
        modules = sorted(
            {
                m
                for s in shapes.values()
                for a in s.actions
                for m in (a.module, a.command_module)
                if m
            }
        )
        return RuleTable(
            name=rule.name,
            doc=rule.doc,
            labels=attrs.labels,
            outputs=attrs.outputs,
            key=tuple(key),
            defaults={a: attrs.defaults[a] for a in key},
            shapes=dict(sorted(shapes.items())),
            modules=tuple(modules),
            public=rule.root_package,
        )

    def dep_kinds(self, rule: Rule) -> dict[str, str]:
        """What each label attribute of `rule` names in its example: a plain file, or a
        target of which catalogue rule (the first its implementation accepts)."""
        if rule.name in self._dep_kinds:
            return self._dep_kinds[rule.name]
        if rule.name in self._resolving:
            raise ShapeError(f"rules depend on each other in a cycle: {self._resolving}")
        self._resolving.append(rule.name)
        try:
            attrs = _Attrs.of(rule)
            candidates = [SOURCE, *(n for n in self.registry if n != rule.name)]
            given = dict(rule.example_deps)
            if set(attrs.labels) <= set(given):  # the rule says: its example's
                self._dep_kinds[rule.name] = {a: given[a] for a in attrs.labels}
                return self._dep_kinds[rule.name]
            errors: list[str] = []
            choices = [[given[a]] if a in given else candidates for a in attrs.labels]
            for combo in itertools.product(*choices):
                kinds = dict(zip(attrs.labels, combo, strict=True))
                try:
                    self.example(rule, attrs.example, kinds, prefix="", name=NAME)
                except (KilnError, ShapeError, ValidationError) as error:
                    errors.append(str(error))
                    continue
                self._dep_kinds[rule.name] = kinds
                return kinds
            raise ShapeError(f"{rule.name}: its example never analyzes: {errors[:1]}")
        finally:
            self._resolving.pop()

    def example(
        self, rule: Rule, values: dict[str, Json], kinds: dict[str, str], *, prefix: str, name: str
    ) -> _Example:
        """Analyzes `rule` with attributes `values`, its label attributes naming fakes of
        `kinds`; `prefix` is the attribute path that reaches this target ("" at the top)."""
        deps: dict[str, AnalyzedTarget] = {}
        known: dict[str, Ref] = {}
        for attr, kind in kinds.items():
            value = values.get(attr)
            labels = [] if value is None else [value] if isinstance(value, str) else value
            path = f"{prefix}{attr}"
            for index, label in enumerate(labels):
                deps[label] = self._fake_dep(kind, path, index, label, known)
        model = rule.attrs.model_validate({"name": name, **values})
        ctx: RuleContext[Any] = RuleContext(
            rule,
            f"//{'' if rule.root_package else PACKAGE}:{name}",
            model,
            deps,
            _ExampleToolchains(HOST),
        )
        if rule.impl is None:
            raise ShapeError(f"{rule.name} has no implementation")
        providers = {type(p): p for p in rule.impl(ctx)}
        return _Example(ctx, providers, known)

    def _fake_dep(
        self, kind: str, path: str, index: int, label: str, known: dict[str, Ref]
    ) -> AnalyzedTarget:
        if kind == SOURCE:
            file = File(f"{FAKE}{path}/{index}")
            known[file.path] = Ref("attr", path)
            return AnalyzedTarget(label, {DefaultInfo: DefaultInfo((file,))})
        rule = self.registry[kind]
        dep_name = f"{path.replace('.', '_')}_{index}"
        dep = self.example(
            rule, _Attrs.of(rule).example, self.dep_kinds(rule), prefix=f"{path}.", name=dep_name
        )
        known.update(dep.known)
        for action in dep.ctx.actions.declared:
            for output in action.outputs:
                name = output.path.removeprefix(f"{dep.ctx.bin_dir}/")
                if "." in path:
                    raise ShapeError(
                        f"{output.path}: an output of a dependency of a dependency; the Bazel "
                        "rules reach outputs of direct dependencies only"
                    )
                known[output.path] = Ref("dep_out", name.replace(dep_name, "{name}"), attr=path)
        return AnalyzedTarget(label, dep.providers)

    def _shape_or_none(
        self, rule: Rule, values: dict[str, Json], kinds: dict[str, str]
    ) -> RuleShape | None:
        try:
            found = self.example(rule, values, kinds, prefix="", name=NAME)
        except (KilnError, ValidationError):
            return None  # invalid attributes: the planning action reports them under Bazel
        return shape_of(found, _Attrs.of(rule), values)


def shape_of(example: _Example, attrs: _Attrs, values: Mapping[str, Json]) -> RuleShape:
    """The shape of an analyzed example target."""
    ctx = example.ctx
    output_attr = {}
    for attr in attrs.outputs:
        value = values.get(attr)
        for out in [value] if isinstance(value, str) else value or []:
            output_attr[f"{ctx.bin_dir}/{out}"] = attr
    own: dict[str, Output] = {}
    for action in ctx.actions.declared:
        for out in action.outputs:
            if out.path in output_attr:
                named = Ref("out_attr", output_attr[out.path])
            else:
                rel = out.path.removeprefix(f"{ctx.bin_dir}/")
                named = Ref("out", rel.replace(NAME, "{name}"))
            own[out.path] = Output(named, out.directory, action.mnemonic == TEST_MNEMONIC)

    def ref(path: str) -> Ref:
        found = own[path].ref if path in own else example.known.get(path)
        if found is None:
            raise ShapeError(f"{ctx.rule.name}: {path} is neither an output nor a dependency's")
        return found

    def refs(files: Sequence[File]) -> tuple[Ref, ...]:
        paths = {f.path for f in files}
        out = tuple(dict.fromkeys(ref(p) for p in sorted(paths)))
        for item in out:  # a label attribute's files are used whole, or not at all
            every = {p for p, r in example.known.items() if r == item}
            if item.kind == "attr" and not every <= paths:
                raise ShapeError(
                    f"{ctx.rule.name}: uses some files of attribute '{item.value}', not all"
                )
        return out

    writes: list[Ref] = []
    actions: list[ActionShape] = []
    for action in ctx.actions.declared:
        if action.content is not None:
            writes += refs(action.outputs)
        else:
            actions.append(_action_shape(ctx, action, ref, refs))
    info: DefaultInfo = example.providers[DefaultInfo]
    return RuleShape(
        outputs=tuple(own.values()),
        writes=tuple(writes),
        actions=tuple(actions),
        files=refs(info.files),
        runfiles=refs(info.runfiles),
    )


def _action_shape(ctx: RuleContext[Any], action: Action, ref: Any, refs: Any) -> ActionShape:
    paths = {f.path for f in (*action.inputs, *action.outputs)}
    argv: list[Arg] = []
    for i, arg in enumerate(action.argv):
        if i == 0 and arg == PYTHON_INTERPRETER:
            argv.append(Arg(python=True))
        elif arg in paths:
            argv.append(Arg(file=ref(arg)))
        elif FAKE in arg or f"{GENERATED_ROOT}/" in arg:
            raise ShapeError(
                f"{ctx.rule.name}: argument {arg!r} of {action.mnemonic} holds a path inside "
                "a longer string; pass paths as arguments of their own"
            )
        else:
            argv.append(Arg(text=arg))
    module = None
    if len(action.argv) > 2 and action.argv[1] == "-m":
        module = action.argv[2]
    test = action.mnemonic == TEST_MNEMONIC
    command = list(action.argv[action.argv.index("--") + 1 :]) if "--" in action.argv else []
    command_module = command[2] if test and command[1:2] == ["-m"] else None
    return ActionShape(
        mnemonic=action.mnemonic,
        module=module,
        argv=tuple(argv),
        env=tuple((k, v) for k, v in action.env if not (test and k in TEST_ENV)),
        inputs=refs(action.inputs),
        outputs=refs(action.outputs),
        gpu=action.resources.gpu > 0,
        test=test,
        command_module=command_module,
    )


def _hashable(combo: tuple[Json, ...]) -> tuple[Json, ...]:
    return tuple(tuple(v) if isinstance(v, list) else v for v in combo)


def _key_value(attrs: _Attrs, attr: str, value: Json) -> Json:
    return bool(value) if attr in attrs.labels else value


def _relevant(
    names: list[str], attrs: _Attrs, found: dict[tuple[Json, ...], RuleShape | None]
) -> list[str]:
    """The attributes a change of which, all else equal, changes a valid shape."""
    relevant: list[str] = []
    for i, name in enumerate(names):
        domain = attrs.domains[name]
        label = name if name in attrs.labels else None
        if any(
            _changes(i, combo, shape, domain, found, label)
            for combo, shape in found.items()
            if shape
        ):
            relevant.append(name)
    return relevant


def _changes(
    i: int,
    combo: tuple[Json, ...],
    shape: RuleShape,
    domain: tuple[Json, ...],
    found: dict[tuple[Json, ...], RuleShape | None],
    label: str | None,
) -> bool:
    for value in _hashable(domain):
        other = found.get((*combo[:i], value, *combo[i + 1 :]))
        if other is None:
            continue
        if label is not None:  # set vs left out: equal but for the attribute's own files?
            other, shape = _without(other, label), _without(shape, label)
        if other != shape:
            return True
    return False


def _without(shape: RuleShape, attr: str) -> RuleShape:
    """`shape` without the files of label attribute `attr` (and its dependencies')."""

    def keep(ref: Ref) -> bool:
        if ref.kind == "attr":
            return ref.value != attr and not ref.value.startswith(f"{attr}.")
        return ref.attr != attr

    def refs(items: tuple[Ref, ...]) -> tuple[Ref, ...]:
        return tuple(r for r in items if keep(r))

    actions = tuple(
        dataclasses.replace(a, inputs=refs(a.inputs), outputs=refs(a.outputs))
        for a in shape.actions
    )
    return RuleShape(
        outputs=tuple(o for o in shape.outputs if keep(o.ref)),
        writes=refs(shape.writes),
        actions=actions,
        files=refs(shape.files),
        runfiles=refs(shape.runfiles),
    )


def explore(registry: Mapping[str, Rule], names: Sequence[str]) -> Iterator[RuleTable]:
    explorer = Explorer(registry)
    for name in names:
        yield explorer.table(registry[name])
