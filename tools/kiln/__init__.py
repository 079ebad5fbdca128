"""kiln: a Bazel-style build system for PyTorch model artifacts.

Layers, each importing only those below it:
cli -> loading -> analysis -> exec -> cache; errors and label are shared leaves.
"""

__version__ = "0.1.0"
