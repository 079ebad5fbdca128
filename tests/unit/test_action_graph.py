"""ActionGraph: the frozen graph the scheduler runs, dependencies by index, computed once."""

from __future__ import annotations

import pickle

import pytest
from kiln.action_graph import Action, ActionGraph, File


def _action(name: str, *inputs: str) -> Action:
    return Action(
        owner=f"//t:{name}",
        mnemonic="Genrule",
        argv=("true",),
        inputs=tuple(File(path) for path in inputs),
        outputs=(File(f"kiln-out/t/{name}"), File(f"kiln-out/t/{name}.log")),
    )


def test_dependencies_dependents_and_producers_by_index() -> None:
    graph = ActionGraph.of(
        [
            _action("a", "t/src.txt"),
            _action("b", "kiln-out/t/a", "kiln-out/t/a.log"),  # two files of one producer
            _action("c", "kiln-out/t/a", "kiln-out/t/b"),
        ]
    )
    assert len(graph) == 3
    assert graph.dependencies == ((), (0,), (0, 1))
    assert graph.dependents == ((1, 2), (2,), ())
    assert graph.producer["kiln-out/t/b.log"] == 1
    assert "t/src.txt" not in graph.producer  # a source has no producer


def test_two_actions_with_one_output_are_refused() -> None:
    with pytest.raises(ValueError, match="kiln-out/t/a is an output of //t:a and //t:a"):
        ActionGraph.of([_action("a"), _action("a")])


def test_a_graph_pickles_whole_for_the_analysis_cache() -> None:
    graph = ActionGraph.of([_action("a"), _action("b", "kiln-out/t/a")])
    assert pickle.loads(pickle.dumps(graph)) == graph
