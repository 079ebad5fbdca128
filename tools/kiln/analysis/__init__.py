"""Analysis: running rule implementations over the target graph into actions.

Rules themselves see only kiln.rule_api; this package is the engine that
calls them (analyzer.py) and keeps the action graph between runs
(analysis_cache.py).
"""
