"""A kiln action as REAPI messages, encoded as Bazel encodes a spawn.

    Command     arguments = argv; environment_variables = the action's env, sorted by
                name; output_files and output_paths = its declared outputs, sorted
                (REAPI 2.0 and 2.1+ servers read one or the other); platform
    Directory   the input root: every input file at its execroot path, a Directory
                message per folder, entries sorted by name, each referenced by the
                digest of its serialised message
    Action      command_digest, input_root_digest, timeout, platform

Serialisation is deterministic, so the same action gives the same digests on
every machine. One file more goes into the input root, `.kiln/task.pickle`:
kiln's own record of the action (remote_exec.protocol.RemoteTask: the wheels
of its Python environment, whether to sandbox), which a kiln worker reads to
run the action through kiln's execroot runner; it is part of the input root,
so the action digest covers it. A worker that is not kiln's runs the Command
as it is.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field

from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)

from kiln.action_graph import Action
from kiln.cache.digest import Digest, digest_bytes
from kiln.reapi.store import to_proto

TASK_PATH = ".kiln/task.pickle"


@dataclass(frozen=True)
class InputFile:
    digest: Digest
    executable: bool


@dataclass
class Encoded:
    action_digest: Digest
    # Every message blob (Command, Action, Directories, the task record) by digest.
    blobs: dict[Digest, bytes] = field(default_factory=dict)


def _serialise(message: object, function: str, blobs: dict[Digest, bytes]) -> Digest:
    data: bytes = message.SerializeToString(deterministic=True)  # type: ignore[attr-defined]
    digest = digest_bytes(data, function)
    blobs[digest] = data
    return digest


def _platform(properties: tuple[tuple[str, str], ...]) -> re_pb2.Platform:
    return re_pb2.Platform(
        properties=[re_pb2.Platform.Property(name=n, value=v) for n, v in sorted(properties)]
    )


def input_root(files: Mapping[str, InputFile], function: str, blobs: dict[Digest, bytes]) -> Digest:
    """The Directory tree of files (execroot path -> file), its root's digest."""
    tree: dict[str, object] = {}
    for path, item in files.items():
        node = tree
        *folders, name = path.split("/")
        for folder in folders:
            child = node.setdefault(folder, {})
            assert isinstance(child, dict), f"{path}: a file where a folder is"
            node = child
        node[name] = item

    def encode(node: dict[str, object]) -> Digest:
        directory = re_pb2.Directory()
        for name in sorted(node):
            entry = node[name]
            if isinstance(entry, dict):
                directory.directories.add(name=name, digest=to_proto(encode(entry)))
            else:
                assert isinstance(entry, InputFile)
                directory.files.add(
                    name=name, digest=to_proto(entry.digest), is_executable=entry.executable
                )
        return _serialise(directory, function, blobs)

    return encode(tree)


def encode_action(
    action: Action,
    inputs: Mapping[str, InputFile],
    task: object,
    properties: tuple[tuple[str, str], ...],
    timeout: float | None,
    function: str,
) -> Encoded:
    blobs: dict[Digest, bytes] = {}
    task_blob = pickle.dumps(task, protocol=5)
    task_digest = digest_bytes(task_blob, function)
    blobs[task_digest] = task_blob
    files = {**inputs, TASK_PATH: InputFile(task_digest, False)}
    outputs = sorted(f.path for f in action.outputs)
    command = re_pb2.Command(
        arguments=list(action.argv),
        environment_variables=[
            re_pb2.Command.EnvironmentVariable(name=n, value=v) for n, v in sorted(action.env)
        ],
        output_files=outputs,
        output_paths=outputs,
        platform=_platform(properties),
    )
    message = re_pb2.Action(
        command_digest=to_proto(_serialise(command, function, blobs)),
        input_root_digest=to_proto(input_root(files, function, blobs)),
        platform=_platform(properties),
    )
    if timeout:
        message.timeout.FromMilliseconds(round(timeout * 1000))
    return Encoded(_serialise(message, function, blobs), blobs)
