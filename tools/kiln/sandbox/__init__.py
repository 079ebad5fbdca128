"""Sandboxes for actions (issue 11 A3, A4): each sees its declared inputs, read-only, the
toolchain, and nothing else of the host.

Like Bazel's linux-sandbox: a user namespace (so no privilege is needed) with
a mount namespace whose root is a tmpfs holding only bind mounts: the
toolchain read-only, the execroot writable, each input read-only at its
path, a private /tmp. view.py says what is shown, rootfs.py makes it, linux.py
holds the system calls; server.py runs local commands (a sandbox each),
host.py a persistent worker (one sandbox, rebound per action), client.py is
kiln's side. It guards against accidents (an action reading an undeclared
file, writing into a source or /tmp), not against hostile code: the network,
/dev and /proc are the host's, and an action is root of its namespace.
"""
