"""Execution: action keys, execroots, running actions, scheduling, reporting."""
