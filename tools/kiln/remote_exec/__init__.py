"""Remote execution on a Ray cluster: `kiln build --remote_executor=ray://HOST:PORT`.

    driver (kiln build)                         a worker node (`ray start` + kiln)
    ----------------------------------------    ----------------------------------------
    placement (exec/placement.py): remote?
    spawner.py: inputs the remote cache     ->  node_runner.py, in a Ray task routed by
      lacks are uploaded (HEAD, then PUT)         resources and labels (routing.py):
      a Ray task with the action, its key,        check the fingerprint (platform_match),
      its input digests (and its wheels:          fetch inputs the node's CAS lacks,
      kiln.pyenv.wheels, by digest too)           its Python environment (node_env.py),
                                                  private execroot, the command under a
                                                  supervisor (supervisor.py), outputs
                                                  into the node's CAS, missing blobs to
                                                  the remote cache, then the AC entry
      outputs downloaded into the local CAS  <-   the ActionResult (digests only)
      (verified), action cache, kiln-out/

Bytes never travel through Ray: every blob goes through the remote cache
(--remote_cache, the CAS driver and workers share), streamed from and to
disk, so multi-GB weights never sit in the driver's memory. Each node keeps
its own CAS; a blob it already has is not fetched again, and one the remote
cache has is not uploaded again.

It is the RemoteExecutor (kiln.remote.executor) of the `ray://` scheme:
kiln.remote.backends opens ray_executor.RayExecutor, which makes the spawner,
the GPU platform and `kiln info cluster`'s description; the store it moves
blobs through is the build's one (kiln.remote.stores), and nodes open theirs
from the RemoteOptions each task carries.

Only modules of this package import ray, and only when --remote_executor is
given (cluster.py, node_runner.py run inside Ray tasks). docs/remote-execution.md
is the user's page.
"""
