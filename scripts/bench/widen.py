"""Copies an mlx-community model folder with every float tensor widened to
f32 (packed quantized weights stay as they are), so that mlx-lm, which
computes in the dtype of the weights it loads, runs f32 activations too.

Usage: widen.py SRC DST
"""

import json
import shutil
import sys
from pathlib import Path

import mlx.core as mx


def main():
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    dst.mkdir(parents=True, exist_ok=True)
    for path in src.iterdir():
        if path.suffix == ".safetensors":
            tensors, metadata = mx.load(str(path), return_metadata=True)
            wide = {k: v.astype(mx.float32) if mx.issubdtype(v.dtype, mx.floating) else v for k, v in tensors.items()}
            mx.save_safetensors(str(dst / path.name), wide, metadata=metadata)
        elif path.name == "config.json":
            config = json.loads(path.read_text())
            config["torch_dtype"] = "float32"
            (dst / path.name).write_text(json.dumps(config, indent=2))
        elif path.is_file():
            shutil.copy2(path, dst / path.name)


if __name__ == "__main__":
    main()
