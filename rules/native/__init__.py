"""Bazel's own rules that kiln implements too: filegroup and genrule."""
