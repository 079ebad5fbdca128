"""Whether this build's actions run in a sandbox (kiln.sandbox), decided once per build.

On Linux, with `--sandbox` (the default), the first action to run starts a
sandbox host (kiln.sandbox.host); every local command then runs in a host's
sandbox, its view remade for it, and every persistent worker in a sandbox
whose view each of its actions remakes. Where the
kernel will not make user and mount namespaces (not Linux; a container
without them; kernel.unprivileged_userns_clone=0; an AppArmor policy that
restricts them), actions run as they would with --nosandbox, after one
warning naming the reason: they can then read undeclared files by absolute
path and write outside their execroot, and a write through an input is
caught only afterwards (execroot_files.input_stats).

Besides an action's own files, a sandbox shows the toolchain (view.py: the
system directories and the interpreter's, the Python environments), all
read-only, and at /tmp/kiln-torch-store the disk cache's torch state
(layout.DiskCache.torch_tmp), read-only too: torch's precompiled headers, which
only kiln's header maker writes (make_header; actions/header_store.py). Each
action's torch folder is its own, /tmp/kiln-torch-tmp in its private /tmp: a
fixed path, the same for every user and machine, which packages embed
(actions/inductor_cache.py). Without the sandbox, actions get the disk cache's
folder itself, per user, and write it as inductor does.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from kiln import windows_torch_libs as torch_libs
from kiln.errors import KilnError
from kiln.exec import header_requests
from kiln.layout import DiskCache, OutputBase

if TYPE_CHECKING:
    from kiln.action_graph import Action
    from kiln.sandbox.client import Sandbox

# Where a sandboxed action finds the torch state; and the variable that tells it
# (kiln.actions.temp_state reads it: the same string, pinned by a test).
SANDBOXED_TORCH_TMP = "/tmp/kiln-torch-tmp"
TORCH_TMP_ENV = "KILN_TORCH_TMP"
# The disk cache's torch state, read-only to every action (actions/header_store.py), and
# writable to kiln's header maker alone (actions/header_maker.py): the same strings there.
SANDBOXED_TORCH_STORE = "/tmp/kiln-torch-store"
SANDBOXED_TORCH_PUBLISH = "/tmp/kiln-torch-publish"
TORCH_STORE_ENV = "KILN_TORCH_STORE"
TORCH_PUBLISH_ENV = "KILN_TORCH_PUBLISH"
IN_USE_LOCK = ".in-use.lock"  # actions/temp_state.py: held shared by its users
_MAKER_TIMEOUT = 600.0  # seconds; a header takes 5-8 s, a hung maker must not hang the build


class Sandboxing:
    def __init__(
        self,
        enabled: bool,
        python: str,
        workspace: Path,
        hidden: Sequence[Path],
        output_base: OutputBase,
        disk_cache: DiskCache,
        warn: Callable[[str], None],
        *,
        detached: bool = False,  # hosts nobody's child: a Ray node's (client.Sandbox.start)
    ) -> None:
        self.enabled = enabled
        self.detached = detached
        self._python = python
        self._workspace = workspace
        self._hidden = tuple(hidden)
        self._output_base = output_base
        self._disk_cache = disk_cache
        self.warn = warn
        self._lock = threading.Lock()
        self._decided = False
        self._sandbox: Sandbox | None = None
        # the header maker's queue (make_header): one at a time, each request once a build
        self._makers: ThreadPoolExecutor | None = None
        self._made: dict[str, Future[None]] = {}
        self._closing = False
        self._store_lock: int | None = None  # the torch store's in-use lock, held shared
        self._store_guard = threading.Lock()

    def get(self) -> Sandbox | None:
        """The build's sandbox, started at the first call; None if off or unavailable."""
        with self._lock:
            if not self._decided:
                self._decided = True
                if self.enabled:
                    self._sandbox = self._start()
            return self._sandbox

    def private(self) -> Sandbox | None:
        """A sandbox of its own, which the caller closes (the dynamic strategy's local run:
        cancelling it must not touch the build's other commands); None where the build's
        is off or unavailable."""
        if self.get() is None:
            return None
        return self._start()

    def torch_tmp(self, sandboxed: bool) -> str:
        """The torch state's path as the action sees it."""
        return SANDBOXED_TORCH_TMP if sandboxed else str(self._disk_cache.torch_tmp)

    def windows_torch(self, action: Action, find_links: tuple[str, ...] = ()) -> dict[str, str]:
        """Before `action` runs: the Windows torch libraries it names, unpacked by kiln into
        the folder the sandbox shows it read-only (actions/windows/torch_libs.py), and the
        variable that tells it so. Nothing where the build is not sandboxed: the action
        unpacks them itself, as --nosandbox shares everything else. A KilnError if the
        wheel cannot be had or unpacked."""
        if action.windows_torch is None or self.get() is None:
            return {}
        torch_tmp = self._disk_cache.torch_tmp
        try:
            torch_libs.prepare(action.windows_torch, torch_tmp, dict(action.env), find_links)
        except torch_libs.Unavailable as error:
            raise KilnError(error.message, hint=error.hint) from None
        except OSError as error:
            where = torch_tmp / torch_libs.PREPARED
            raise KilnError(
                f"cannot unpack the Windows torch libraries into {where}: {error.strerror}",
                hint="free space there, or remove the disk cache's tmp/torch folder",
            ) from None
        return {torch_libs.PREPARED_ENV: "1"}

    def make_header(self, request: str, execroot: Path) -> None:
        """Have kiln's header maker make the precompiled header a running sandboxed action
        asks for (`request`, one line of its requests: exec/header_requests.py) and
        publish it into the read-only store; return when it is published or cannot be.
        One maker at a time, and each request is made once a build: an action asking for
        one being made waits for that make. Best effort: where nothing is published the
        action makes the header itself."""
        if self.get() is None:
            return
        with self._lock:
            made = self._made.get(request)
            if made is None:
                if self._closing:
                    return
                if self._makers is None:
                    self._makers = ThreadPoolExecutor(1, thread_name_prefix="kiln-header-maker")
                made = self._makers.submit(self._make_headers, request, execroot.parent)
                self._made[request] = made
        with contextlib.suppress(Exception):  # cancelled by Ctrl-C: the action makes its own
            made.result()

    def _make_headers(self, request: str, beside: Path) -> None:
        # A folder of the maker's own beside the action's execroot: the maker reads only
        # the request, never what the action can write. Made here, not under the lock.
        scratch = Path(tempfile.mkdtemp(prefix=".header-maker-", dir=beside))
        sandbox = self.get()
        try:
            (scratch / ".tmp").mkdir()
            requests = scratch / ".tmp" / header_requests.REQUESTS_FILE
            requests.write_text(request + "\n", encoding="utf-8")
            if sandbox is not None:
                from kiln.sandbox.view import Bind

                tmp = scratch / ".tmp"
                sandbox.run(
                    [self._python, "-m", "kiln.actions.header_maker", str(requests)],
                    {
                        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                        TORCH_TMP_ENV: SANDBOXED_TORCH_TMP,
                        TORCH_PUBLISH_ENV: SANDBOXED_TORCH_PUBLISH,
                    },
                    scratch,
                    tmp / "header-maker.out",
                    tmp / "header-maker.err",
                    [
                        Bind(str(scratch), str(scratch), writable=True),
                        Bind(
                            str(self._disk_cache.torch_tmp), SANDBOXED_TORCH_PUBLISH, writable=True
                        ),
                    ],
                    _MAKER_TIMEOUT,
                )
        except Exception:  # the sandbox closed under it (an interrupted build): not made
            pass
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def wait_for_headers(self) -> None:
        """Wait until the headers being made are published (each maker is bounded)."""
        with self._lock:
            makers, self._makers = self._makers, None
        if makers is not None:
            makers.shutdown(wait=True)

    def stop_making_headers(self) -> None:
        """Ctrl-C: make no more headers; the one being made ends with the sandbox."""
        with self._lock:
            self._closing = True
            makers, self._makers = self._makers, None
        if makers is not None:
            makers.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        self.wait_for_headers()
        with self._lock:
            self._closing = True
            sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            sandbox.close()
        with self._store_guard:  # no action of this build sees the store any more
            store_lock, self._store_lock = self._store_lock, None
        if store_lock is not None:
            os.close(store_lock)

    def _start(self) -> Sandbox | None:
        try:
            from kiln.sandbox.client import Sandbox, SandboxUnavailable
            from kiln.sandbox.view import Bind, SandboxConfig, toolchain_dirs
        except OSError as error:  # no libc to call: not Linux
            self._fall_back(str(error))
            return None
        torch_tmp = self._disk_cache.torch_tmp
        torch_tmp.mkdir(parents=True, exist_ok=True)
        # Read-only in here, so made now: what `kiln clean` from another workspace waits on.
        # Held shared while this sandbox lives, as torch actions hold it: every action's
        # view binds the store, and an expunge that removed it meanwhile failed the next
        # action's set-up, a genrule's too ("mount ... on /tmp/kiln-torch-store: No such
        # file or directory", tests/e2e/test_damaged_cache.py).
        self._hold_store(torch_tmp / IN_USE_LOCK)
        windows = torch_tmp / torch_libs.PREPARED
        windows.mkdir(exist_ok=True)
        # The Python environments of actions with packages (kiln.pyenv) are toolchain
        # too, read-only: made outside the sandbox, before their actions run, in here.
        environments = self._disk_cache.python_envs
        environments.mkdir(parents=True, exist_ok=True)
        config = SandboxConfig(
            toolchain=(*toolchain_dirs(self._hidden), str(environments)),
            binds=(
                Bind(str(torch_tmp), SANDBOXED_TORCH_STORE),
                # The Windows torch libraries, which kiln unpacks before an action that names
                # them (windows_torch), read-only where the action looks them up.
                Bind(str(windows), f"{SANDBOXED_TORCH_TMP}/{torch_libs.WINDOWS_TORCH}"),
            ),
            staging=str(self._output_base.sandbox),
            scratch=(str(self._workspace), str(self._output_base.execroot)),
        )
        try:
            return Sandbox.start(self._python, config, detached=self.detached)
        except SandboxUnavailable as error:
            self._fall_back(error.message)
            return None

    def _hold_store(self, lock: Path) -> None:
        # Not self._lock: get() holds it while it starts the sandbox.
        with self._store_guard:
            if self._store_lock is not None:
                return
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_SH)
            self._store_lock = fd

    def _fall_back(self, reason: str) -> None:
        self.warn(
            f"actions run without a sandbox: {reason} (user and mount namespaces are not "
            "available here); they can read undeclared files and write outside their "
            "execroot. --nosandbox says so without this warning"
        )
