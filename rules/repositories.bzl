"""What a WORKSPACE needs for kiln's rules (docs/bazel.md):

    local_repository(name = "kiln", path = "third_party/kiln")
    load("@kiln//rules:repositories.bzl", "kiln_offline_repositories", "kiln_python_repository", "libtorch_repository")
    kiln_offline_repositories()   # Bazel 4.2.3 without network: stubs of @rules_cc, @rules_java, ...
    kiln_python_repository(name = "kiln_python", interpreter = "/opt/venv/bin/python")
    libtorch_repository(name = "libtorch", interpreter = "/opt/venv/bin/python")
    register_toolchains("@kiln_python//:toolchain")
    register_execution_platforms("@kiln_python//:local", "@kiln_python//:all")
    # a workspace with python_requirements(name = "pip", lock = "requirements_lock.txt"):
    kiln_pip_repository(name = "pip", lock = "//:requirements_lock.txt", interpreter = "/opt/venv/bin/python")
"""

load(
    "//rules/private:repositories.bzl",
    _kiln_pip_repository = "kiln_pip_repository",
    _kiln_python_repository = "kiln_python_repository",
    _libtorch_repository = "libtorch_repository",
    _stub_repository = "stub_repository",
)

kiln_python_repository = _kiln_python_repository
kiln_pip_repository = _kiln_pip_repository
libtorch_repository = _libtorch_repository

# Repositories Bazel 4.2.3 fetches from the network as soon as a cc_library, a
# toolchain or `bazel test` is involved; each stub (//bazel/stubs) wraps the native rules.
OFFLINE_STUBS = ["rules_cc", "rules_java", "remote_coverage_tools"]

def kiln_offline_repositories():
    """Defines each of OFFLINE_STUBS the WORKSPACE does not define itself, as a local stub."""
    for name in OFFLINE_STUBS:
        if not native.existing_rule(name):
            _stub_repository(name = name, workspace = Label("//bazel/stubs/%s:WORKSPACE" % name))
