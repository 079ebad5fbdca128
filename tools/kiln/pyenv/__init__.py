"""The Python environments kiln's Python actions run in: the toolchain plus a locked closure.

    <disk cache>/python-envs/
        <digest>/                       one environment: a venv without system site-packages
            pyvenv.cfg                  home = the toolchain's base interpreter
            bin/python                  -> that interpreter
            lib/python3.X/site-packages/
                <locked packages>       installed by pip (--no-deps, --require-hashes, --target)
                torch -> ...            the toolchain: symlinks to its distributions' files
                kiln -> ...             the kiln that computed the actions' keys
                _kiln_toolchain.pth     imports the toolchain from where it is installed
            kiln-env.json               written last: an environment without it is unfinished
        <digest>.lock                   held while it is made (flock)
        <digest>.in-use                 held shared by each process using it (flock); its
                                        mtime is the last use. The disk cache's collection
                                        (cache/gc.py) removes the least recently used
                                        environments whole, never one in use; so does
                                        `kiln clean --expunge_disk_cache`

An action's environment holds the toolchain (torch and what it needs, the
libraries kiln's actions use, Torch-TensorRT where installed) and exactly the
locked closure of the packages its target declares (`@pip//timm`), nothing
else of the machine: a package installed by hand into kiln's own virtualenv is
not importable there. The digest names the toolchain (interpreter, prefix,
each distribution's version) and the packages (names, versions, hashes), so a
new lock pin or a new torch makes a new environment and never changes an old
one. Which environment an action needs is in its key already
(Action.python_env and the `pip:<name>` platform properties): the
environment's location is not.

    toolchain.py    which distributions of the toolchain every environment holds
    environment.py  EnvironmentStore: the environment of a closure, made once, atomically
    pip.py          running pip, with progress and its errors as KilnErrors
    wheels.py       WheelStore: the wheels a remote node installs, downloaded here once
    lock.py         `python -m kiln.pyenv.lock requirements.in`: make a lock for this toolchain
"""
