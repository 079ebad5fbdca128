"""Loading: find the workspace, evaluate BUILD and .bzl files, build the target graph."""
