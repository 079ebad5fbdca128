"""Batch norms' eps constants put into an engine's weight map, so that Torch-TensorRT's
fast refit takes them (kiln.actions.tensorrt.refit).

A refit must give TensorRT every refittable weight of the engine. Torch-TensorRT records,
at compile time, where each one comes from (the engine's weight name map: state-dict
names, and the values of small constants). With TensorRT-RTX it compiles without
constant folding, and each batch norm's `eps` becomes a refittable constant of its own
that the map leaves out (pytorch/TensorRT#3752). Its fast refit then finds them missing
("Fast refitting failed due to incomplete mapping") and falls back to the slow one,
which interprets the whole graph into a TensorRT network again: on ResNet-18 (20 batch
norms) that made AotiRefit as slow on a weights-only change as in a full build (15.8 s
on the H100, docs/gpu.md).

An eps never changes with the weights: it is the batch norm node's last argument. So
before each engine's refit the missing constants named `<module>/<node>_eps CONSTANT`
are added to the map's `constant_mapping`, from the node of that name in the graph being
refit. Anything else missing is left alone: Torch-TensorRT's slow refit still handles
it, and refit_module_weights(verify_output=True) still compares the refit module with
the program (and refits again the slow way where they differ).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

# "layer2.1.bn2/_native_batch_norm_legit_no_training_9_eps CONSTANT" -> the node's name
EPS_CONSTANT = re.compile(r"(?:.*/)?(_native_batch_norm_legit_no_training(?:_\d+)?)_eps CONSTANT")
# aten._native_batch_norm_legit_no_training(input, weight, bias, mean, var, momentum, eps)
EPS_ARG = 6


@contextlib.contextmanager
def eps_in_weight_maps(refit_module: Any) -> Iterator[None]:
    """While refitting: every engine's weight map completed with its batch norms' eps.

    `refit_module` is torch_tensorrt.dynamo._refit (None: nothing to do); where it lacks
    the per-engine step this wraps (another Torch-TensorRT), nothing is changed."""
    step = getattr(refit_module, "_refit_single_trt_engine_with_gm", None) if refit_module else None
    if step is None:
        yield
        return

    def completed(*args: Any, **kwargs: Any) -> Any:
        weight_name_map = kwargs.get("weight_name_map")
        new_gm = kwargs.get("new_gm", args[0] if args else None)
        engine = kwargs.get("old_engine", args[1] if len(args) > 1 else None)
        if weight_name_map and new_gm is not None and engine is not None:
            try:
                weights = _engine_weights(refit_module, engine)
                added = add_eps_constants(weight_name_map, weights, new_gm.graph)
                # the action's log says what the fast refit was given (docs/gpu.md)
                left = [n for n in weights if EPS_CONSTANT.fullmatch(n) and n not in added]
                print(
                    f"kiln: {len(added)} batch norm eps constant(s) put in the engine's weight "
                    f"map; left: {[(n, weight_name_map.get(n)) for n in left[:2]]}"
                )
            except Exception as error:  # a map left as it was: the slow refit takes it
                print(f"kiln: the engine's weight map left as it was ({error!r})")
        return step(*args, **kwargs)

    refit_module._refit_single_trt_engine_with_gm = completed
    try:
        yield
    finally:
        refit_module._refit_single_trt_engine_with_gm = step


def add_eps_constants(
    weight_name_map: dict[str, Any],
    engine_weights: dict[str, tuple[Any, int]],
    graph: Any,
) -> list[str]:
    """Add to weight_name_map["constant_mapping"] each of the engine's weights (name ->
    numpy dtype, count) it lacks that is a batch norm's eps whose node is in `graph`; the
    names added."""
    import numpy as np

    constants: dict[str, Any] = weight_name_map.setdefault("constant_mapping", {})
    nodes = {node.name: node for node in graph.nodes}
    added = []
    for name, (declared, count) in engine_weights.items():
        if name in constants or _maps_to_state_dict(weight_name_map.get(name)):
            continue
        match = EPS_CONSTANT.fullmatch(name)
        node = nodes.get(match.group(1)) if match else None
        if node is None or len(node.args) <= EPS_ARG:
            continue
        eps = node.args[EPS_ARG]
        if not isinstance(eps, (int, float)):
            continue
        # Where the map lists it with no state-dict name (what a search of the state dict
        # for its value left: Torch-TensorRT then skips it), its dtype is the map's.
        listed = weight_name_map.pop(name, None)
        listed_dtype = isinstance(listed, (list, tuple)) and len(listed) == 2
        dtype = np.dtype(listed[1]) if listed_dtype else declared
        constants[name] = np.full(count, float(eps), dtype=dtype)
        added.append(name)
    return added


def _maps_to_state_dict(entry: Any) -> bool:
    """Whether a weight map entry ([state-dict name(s), dtype]) names where the weight is."""
    if not isinstance(entry, (list, tuple)) or not entry:
        return entry is not None
    source = entry[0]
    return bool(source) and not (isinstance(source, str) and source.endswith(".unknown"))


def _engine_weights(refit_module: Any, engine: Any) -> dict[str, tuple[Any, int]]:
    """name -> (numpy dtype, count) of every refittable weight of the engine, as its
    prototype declares it (float32 and 1 where this TensorRT cannot say). The refitter
    is dropped before Torch-TensorRT makes its own."""
    import numpy as np

    trt = refit_module.trt
    refitter = trt.Refitter(engine, refit_module.TRT_LOGGER)
    prototype = getattr(refitter, "get_weights_prototype", None)
    found: dict[str, tuple[Any, int]] = {}
    for name in refitter.get_all_weights():
        try:
            weights = prototype(name)  # type: ignore[misc]
            found[name] = (np.dtype(trt.nptype(weights.dtype)), max(1, int(weights.size)))
        except Exception:  # no prototype in this binding, or none for this weight
            found[name] = (np.float32, 1)
    del refitter
    return found
