"""A REAPI Command that is not kiln's (Bazel sent it): run as the Command says.

    the input root    materialised from the CAS (each blob fetched once, verified)
                      into a fresh folder: Directory messages become folders,
                      files read-only copies with their executable bit
    the command       its arguments, with exactly its environment variables, in
                      working_directory under that folder; stdout and stderr kept
    the outputs       every output path that exists afterwards (a file, or a folder
                      as a Tree), uploaded once the server lacks them

What kiln's own actions get besides (a sandbox, the platform check, inputs
checked against the declaration) comes from kiln's task record, which such a
command has none of: this is what buildbox-run-hosttools does, a farm's plain
worker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)

from kiln.cache.digest import Digest, digest_bytes, digest_file
from kiln.reapi.store import GrpcStore, from_proto, to_proto

_MAX_OUTPUT = 1 << 20  # bytes of stdout/stderr sent (inline)


def run_command(
    store: GrpcStore, action: re_pb2.Action, root: Path, timeout: float | None
) -> re_pb2.ActionResult:
    command = re_pb2.Command.FromString(store.read_bytes(from_proto(action.command_digest)))
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    try:
        _materialise(store, from_proto(action.input_root_digest), root)
        workdir = root / command.working_directory
        outputs = list(command.output_paths) or [
            *command.output_files,
            *command.output_directories,
        ]
        for path in outputs:
            (workdir / path).parent.mkdir(parents=True, exist_ok=True)
        env = {v.name: v.value for v in command.environment_variables}
        seconds = action.timeout.ToSeconds() if action.HasField("timeout") else timeout
        started = time.monotonic()
        try:
            ran = subprocess.run(
                list(command.arguments),
                cwd=workdir,
                env=env,
                capture_output=True,
                timeout=seconds or None,
                check=False,
            )
            code, out, err = ran.returncode, ran.stdout, ran.stderr
        except subprocess.TimeoutExpired as expired:
            code, out, err = 124, expired.stdout or b"", (expired.stderr or b"") + b"\ntimed out"
        except OSError as error:
            code, out, err = 127, b"", str(error).encode()
        result = re_pb2.ActionResult(exit_code=code)
        _output_text(store, result, "stdout", out)
        _output_text(store, result, "stderr", err)
        if code == 0:
            _collect(store, result, workdir, outputs)
        elapsed = time.monotonic() - started
        result.execution_metadata.execution_start_timestamp.GetCurrentTime()
        result.execution_metadata.execution_completed_timestamp.FromNanoseconds(
            result.execution_metadata.execution_start_timestamp.ToNanoseconds()
            + round(elapsed * 1e9)
        )
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _materialise(store: GrpcStore, digest: Digest, folder: Path) -> None:
    directory = re_pb2.Directory.FromString(store.read_bytes(digest))
    for file in directory.files:
        path = folder / file.name
        data = store.read_bytes(from_proto(file.digest)) if file.digest.size_bytes else b""
        path.write_bytes(data)
        path.chmod(0o555 if file.is_executable else 0o444)
    for link in directory.symlinks:
        os.symlink(link.target, folder / link.name)
    for child in directory.directories:
        (folder / child.name).mkdir()
        _materialise(store, from_proto(child.digest), folder / child.name)


def _output_text(store: GrpcStore, result: re_pb2.ActionResult, name: str, data: bytes) -> None:
    """Inline, as servers pass it on; its last _MAX_OUTPUT bytes at most."""
    setattr(result, f"{name}_raw", data[-_MAX_OUTPUT:])


def _collect(
    store: GrpcStore, result: re_pb2.ActionResult, workdir: Path, outputs: list[str]
) -> None:
    for path in sorted(outputs):
        full = workdir / path
        if full.is_file():
            digest = digest_file(full, store.digest_function)
            if store.find_missing([digest]):
                store.upload_file(digest, full)
            result.output_files.add(
                path=path, digest=to_proto(digest), is_executable=os.access(full, os.X_OK)
            )
        elif full.is_dir():
            children: list[re_pb2.Directory] = []
            tree = re_pb2.Tree(root=_directory(store, full, children))
            tree.children.extend(children)
            data = tree.SerializeToString(deterministic=True)
            digest = digest_bytes(data, store.digest_function)
            store.upload_bytes(digest, data)
            result.output_directories.add(path=path, tree_digest=to_proto(digest))


def _directory(
    store: GrpcStore, folder: Path, children: list[re_pb2.Directory]
) -> re_pb2.Directory:
    directory = re_pb2.Directory()
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.is_dir():
            child = _directory(store, entry, children)
            children.append(child)
            data = child.SerializeToString(deterministic=True)
            directory.directories.add(
                name=entry.name, digest=to_proto(digest_bytes(data, store.digest_function))
            )
        elif entry.is_file():
            digest = digest_file(entry, store.digest_function)
            if store.find_missing([digest]):
                store.upload_file(digest, entry)
            directory.files.add(
                name=entry.name, digest=to_proto(digest), is_executable=os.access(entry, os.X_OK)
            )
    return directory
