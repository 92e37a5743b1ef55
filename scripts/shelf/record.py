#!/usr/bin/env python3
"""Writes the tensor tables of the starter shelf (assets/shelf.json).

Each model on the shelf is recorded by hand as the hub describes it: repo,
name, licence, download size, and its config.json verbatim. This script adds
what the fit needs from the weight headers, every tensor's name, dtype and
shape, without downloading a byte: it builds the model from the config with
mlx-lm's own class for its `model_type` (lazily: MLX computes shapes, never
values), casts it to the config's `torch_dtype`, and quantizes it as the
config's `quantization` block says (per-layer entries first, then mlx-lm's
rule: layers that have `to_quantized` and whose input width is a multiple of
the group size). Where the record carries the hub's own weight total
(`hub_total_size`, the index's metadata.total_size) the table must add up to
it exactly, or the script fails.

    .deps/venv/bin/python scripts/shelf/record.py [assets/shelf.json]

Names repeated across layers are written once with `{i}` for the layer
index (the record's `layers` says how many), which keeps the file small.
"""

import json
import re
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.utils import _get_classes as get_model_classes  # mlx-lm 0.32.2 keeps it private

DTYPES = {
    mx.bfloat16: "BF16",
    mx.float16: "F16",
    mx.float32: "F32",
    mx.uint32: "U32",
    mx.uint8: "U8",
    mx.int8: "I8",
}
TORCH_DTYPES = {"bfloat16": mx.bfloat16, "float16": mx.float16, "float32": mx.float32}


def build(config):
    model_class, args_class = get_model_classes(config)
    model = model_class(args_class.from_dict(config))
    dtype = TORCH_DTYPES[config.get("torch_dtype") or config.get("dtype") or "bfloat16"]
    model.set_dtype(dtype)
    quant = config.get("quantization")
    if quant:
        group_size, bits = quant["group_size"], quant["bits"]

        def predicate(path, module):
            if not hasattr(module, "to_quantized"):
                return False
            if path in quant:
                return quant[path]
            return module.weight.shape[-1] % group_size == 0

        nn.quantize(model, group_size=group_size, bits=bits, mode=quant.get("mode", "affine"), class_predicate=predicate)
    return model


def tensors(model, layers):
    """(name, dtype, shape) rows, layer-repeated names folded into `{i}`."""
    rows = [(name, DTYPES[a.dtype], list(a.shape)) for name, a in tree_flatten(model.parameters())]
    per_layer = re.compile(r"^(.*\.layers\.)(\d+)(\..*)$")
    by_template = {}
    for name, dtype, shape in rows:
        m = per_layer.match(name)
        key = f"{m[1]}{{i}}{m[3]}" if m else name
        by_template.setdefault(key, []).append((m and int(m[2]), dtype, shape))
    out = []
    for key, found in by_template.items():
        same = len({(d, tuple(s)) for _, d, s in found}) == 1
        if "{i}" in key and same and sorted(i for i, _, _ in found) == list(range(layers)):
            out.append([key, found[0][1], found[0][2]])
        else:
            for i, dtype, shape in found:
                out.append([key.replace("{i}", str(i)) if i is not None else key, dtype, shape])
    return out


def nbytes(rows, layers):
    size = {"BF16": 2, "F16": 2, "F32": 4, "U32": 4, "U8": 1, "I8": 1}
    total = 0
    for name, dtype, shape in rows:
        n = size[dtype]
        for d in shape:
            n *= d
        total += n * (layers if "{i}" in name else 1)
    return total


def dump(shelf):
    """Indented JSON with each tensor row on one line (a diff shows which tensor changed)."""
    text = json.dumps({**shelf, "models": []}, indent=1)
    models = []
    for record in shelf["models"]:
        fields = [f'  "{k}": {json.dumps(v)}' for k, v in record.items() if k != "tensors"]
        rows = ",\n".join(f"   {json.dumps(r)}" for r in record["tensors"])
        models.append("  {\n" + ",\n".join(fields) + ',\n  "tensors": [\n' + rows + "\n  ]}")
    return text.replace('"models": []', '"models": [\n' + ",\n".join(models) + "\n ]")


def main():
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "assets/shelf.json")
    shelf = json.loads(path.read_text())
    failed = False
    for record in shelf["models"]:
        config = record["config"]
        layers = config.get("num_hidden_layers") or config["text_config"]["num_hidden_layers"]
        rows = tensors(build(config), layers)
        record["layers"] = layers
        record["tensors"] = rows
        total = nbytes(rows, layers)
        shown = record.get("hub_files_gb")
        if shown is None:
            verdict = "no hub sizes to check against"
        else:
            # Each file's rounding, plus its own safetensors header (under 1 MB).
            slack = len(shown) * (0.005e9 + 1e6)
            hub = sum(shown) * 1e9
            ok = abs(total - hub) <= slack
            failed |= not ok
            verdict = f"{'within' if ok else 'OUTSIDE'} the rounding of the hub's {'+'.join(map(str, shown))} GB ({(total - hub) / 1e6:+.1f} MB)"
        print(f"{record['repo']:55} {len(rows):4} rows  {total:>14,} bytes  {verdict}")
    path.write_text(dump(shelf) + "\n")
    if failed:
        sys.exit("the tensor tables do not add up to the hub's totals")


if __name__ == "__main__":
    main()
