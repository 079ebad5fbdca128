"""A kiln action as REAPI messages: Bazel's encoding, deterministic, and its platform properties."""

from __future__ import annotations

from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)
from kiln.action_graph import Action, File
from kiln.cache.digest import Digest, digest_bytes
from kiln.exec.platform_match import MachineOffer
from kiln.host_facts import HostFacts
from kiln.machine import Gpu
from kiln.reapi.encoding import TASK_PATH, InputFile, encode_action
from kiln.reapi.properties import offer_properties, platform_properties
from kiln.reapi.store import from_proto

A = InputFile(digest_bytes(b"a"), False)
TOOL = InputFile(digest_bytes(b"#!/bin/sh\n"), True)


def _action(**fields: object) -> Action:
    values: dict[str, object] = {
        "owner": "//app:x",
        "mnemonic": "Genrule",
        "argv": ("/bin/sh", "-c", "cat app/a.txt > kiln-out/app/x"),
        "inputs": (File("app/a.txt"), File("tools/run.sh")),
        "outputs": (File("kiln-out/app/x"),),
        "env": (("PATH", "/bin"), ("LANG", "C")),
        "platform": (("os", "linux"), ("arch", "x86_64"), ("gpu_name", "-")),
    }
    values.update(fields)
    return Action(**values)  # type: ignore[arg-type]


def _encode(action: Action) -> tuple[Digest, dict[Digest, bytes]]:
    inputs = {"app/a.txt": A, "tools/run.sh": TOOL}
    encoded = encode_action(action, inputs, "task", platform_properties(action), 30.0, "sha256")
    return encoded.action_digest, encoded.blobs


def test_the_action_names_its_command_input_root_and_platform_as_bazel_does() -> None:
    digest, blobs = _encode(_action())
    action = re_pb2.Action.FromString(blobs[digest])
    command = re_pb2.Command.FromString(blobs[from_proto(action.command_digest)])
    assert list(command.arguments) == ["/bin/sh", "-c", "cat app/a.txt > kiln-out/app/x"]
    assert [(e.name, e.value) for e in command.environment_variables] == [
        ("LANG", "C"),
        ("PATH", "/bin"),
    ]
    assert list(command.output_paths) == list(command.output_files) == ["kiln-out/app/x"]
    assert [(p.name, p.value) for p in action.platform.properties] == [
        ("ISA", "x86_64"),
        ("OSFamily", "Linux"),
    ]
    assert action.timeout.seconds == 30
    root = re_pb2.Directory.FromString(blobs[from_proto(action.input_root_digest)])
    assert [d.name for d in root.directories] == [".kiln", "app", "tools"]
    tools = re_pb2.Directory.FromString(blobs[from_proto(root.directories[2].digest)])
    assert [(f.name, f.is_executable) for f in tools.files] == [("run.sh", True)]
    assert TASK_PATH == ".kiln/task.pickle"


def test_the_same_action_gives_the_same_digest_and_another_another() -> None:
    assert _encode(_action())[0] == _encode(_action())[0]
    assert _encode(_action())[0] != _encode(_action(env=(("PATH", "/usr/bin"),)))[0]


def test_a_cuda_action_asks_for_a_gpu_worker_and_the_defaults_come_first() -> None:
    action = _action(
        platform=(
            ("device", "cuda"),
            ("gpu_name", "NVIDIA H200"),
            ("compute_capability", "9.0"),
            ("torch_tensorrt_flavour", "full"),
            ("python", "3.11.7"),  # the worker checks it; it does not route
        )
    )
    assert platform_properties(action, [("kiln-pool", "gpu")]) == (
        ("compute-capability", "9.0"),
        ("device", "cuda"),
        ("gpu", "NVIDIA H200"),
        ("kiln-pool", "gpu"),
        ("tensorrt-flavour", "full"),
    )


def test_a_worker_advertises_its_own_facts_under_the_same_names() -> None:
    host = HostFacts("linux", "x86_64", "3.11.7", "cpython", "/usr/bin/python3", (), "x86-64-v3")
    offer = MachineOffer(host, (Gpu("NVIDIA H200", "9.0", 141000),), {"cuda": "12.8"})
    assert offer_properties(offer) == (
        ("ISA", "x86_64"),
        ("OSFamily", "Linux"),
        ("compute-capability", "9.0"),
        ("cpu-isa", "x86-64-v3"),
        ("cuda", "12.8"),
        ("device", "cuda"),
        ("gpu", "NVIDIA H200"),
    )
