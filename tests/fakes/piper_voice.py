"""A Piper voice made for the tests (Piper's real voices are trained models people download;
none can be had here): an ONNX model with a Piper voice's inputs and output, built with the
onnx package, that says each phoneme as 256 samples of a 220 Hz tone, and its .onnx.json
(the `text` phoneme type: letters are the phonemes). Piper's own code loads it, maps the
text to phoneme ids and runs it in onnxruntime, as it does any voice."""

from __future__ import annotations

import json
import math
from pathlib import Path

RATE = 22_050
PER_PHONEME = 256
"""Samples each phoneme id becomes."""
SYMBOLS = ["_", "^", "$", " ", *"abcdefghijklmnopqrstuvwxyz", *".,!?':;-()"]


def make_voice(path: Path) -> Path:
    """Write the voice (`path`, a .onnx) and its config beside it; returns `path`."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    samples = np.arange(PER_PHONEME, dtype=np.float32)
    chunk = (0.3 * np.sin(2 * math.pi * 220 * samples / RATE)).astype(np.float32)
    nodes = [
        helper.make_node("Shape", ["input"], ["shape"]),
        helper.make_node("Slice", ["shape", "one", "two"], ["count"]),
        helper.make_node("Concat", ["ones", "count"], ["repeats"], axis=0),
        helper.make_node("Tile", ["chunk", "repeats"], ["output"]),
    ]
    constants = [
        helper.make_tensor("one", TensorProto.INT64, [1], [1]),
        helper.make_tensor("two", TensorProto.INT64, [1], [2]),
        helper.make_tensor("ones", TensorProto.INT64, [2], [1, 1]),
        helper.make_tensor("chunk", TensorProto.FLOAT, [1, 1, PER_PHONEME], chunk.tolist()),
    ]
    graph = helper.make_graph(
        nodes,
        "voice",
        [
            helper.make_tensor_value_info("input", TensorProto.INT64, [1, None]),
            helper.make_tensor_value_info("input_lengths", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("scales", TensorProto.FLOAT, [3]),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1, None])],
        constants,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # what onnxruntime of the pinned versions reads
    onnx.save(model, str(path))
    config = {
        "num_symbols": len(SYMBOLS),
        "num_speakers": 1,
        "audio": {"sample_rate": RATE},
        "espeak": {"voice": "en-us"},
        "phoneme_type": "text",
        "phoneme_id_map": {s: [i] for i, s in enumerate(SYMBOLS)},
    }
    Path(f"{path}.json").write_text(json.dumps(config))
    return path
