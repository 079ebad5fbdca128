"""Sandboxes for actions (issue 11 A3, A4): each sees its declared inputs, read-only, the
toolchain, and nothing else of the host.

Like Bazel's linux-sandbox: a user namespace (so no privilege is needed) with
a mount namespace whose root is a tmpfs holding only bind mounts: the
toolchain read-only, the execroot writable, each input read-only at its
path, a private /tmp. view.py says what is shown, rootfs.py makes it, linux.py
holds the system calls; host.py keeps one sandbox and remakes its view for
each action, running commands one at a time or a persistent worker;
client.py is kiln's side (a host per command running at once). It guards
against accidents (an action reading an undeclared file, writing into a
source or /tmp), not against hostile code: the network, /dev and /proc are
the host's, and an action is root of its namespace.
"""
