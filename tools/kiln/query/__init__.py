"""kiln query: Bazel's query language over the target graph."""
