"""The Python side of tests/torch/checkpoint_dir_python_test.cc: runs the Python
snippets of docs/interop.md itself, so the page is what the test checks.

  checkpoint_dir_python.py DOC WORKDIR INPUT OUT

DOC is docs/interop.md; WORKDIR holds ckpt/step-00001000 (the path the page's
"Checkpoint directories" snippet reads) that two C++ ranks wrote with
CheckpointWriter. From every ```python block of DOC it takes the definitions
(imports, functions, classes, UPPER_CASE constants: load_safetensors, DTYPES,
FashionCnn), then runs the "Checkpoint directories" block whole, in WORKDIR,
with model = FashionCnn(); that block ends in a strict load_state_dict. Then
it checks that the index names every model-*.safetensors file and that its
total_size is the tensors' bytes, and torch.saves {'logits': model(INPUT)}
(eval mode, one thread) to OUT. Exit status 0 on success; a message and 1
otherwise. No safetensors package: the page's reader is struct + json.
"""
import ast
import glob
import json
import os
import sys

import torch
from torch import nn


def python_blocks(doc_path):
    """[(section heading, code)] of every ```python block, in page order."""
    blocks, section, code = [], "", None
    with open(doc_path, encoding="utf-8") as f:
        for line in f:
            if code is None and line.startswith("## "):
                section = line[3:].strip()
            elif code is None and line.strip() == "```python":
                code = []
            elif code is not None and line.strip() == "```":
                blocks.append((section, "".join(code)))
                code = None
            elif code is not None:
                code.append(line)
    return blocks


def is_definition(node):
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
        return True
    return isinstance(node, ast.Assign) and all(
        isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)


def fail(message):
    print("checkpoint_dir_python.py:", message)
    sys.exit(1)


def main(doc, workdir, input_path, out_path):
    torch.set_num_threads(1)
    blocks = python_blocks(doc)
    namespace = {"torch": torch, "nn": nn}
    for _, code in blocks:
        tree = ast.parse(code)
        tree.body = [node for node in tree.body if is_definition(node)]
        exec(compile(tree, doc, "exec"), namespace)
    for name in ("load_safetensors", "FashionCnn"):
        if name not in namespace:
            fail(f"{doc} defines no {name} in a ```python block")
    checkpoint_blocks = [code for section, code in blocks if section == "Checkpoint directories"]
    if len(checkpoint_blocks) != 1:
        fail(f"{doc}: {len(checkpoint_blocks)} python blocks under 'Checkpoint directories', want 1")
    model = namespace["FashionCnn"]()
    namespace["model"] = model
    os.chdir(workdir)
    exec(compile(checkpoint_blocks[0], doc, "exec"), namespace)  # strict load_state_dict

    step, index, state = namespace["step"], namespace["index"], namespace["state"]
    shards = sorted(os.path.basename(p) for p in glob.glob(os.path.join(step, "model-*.safetensors")))
    if shards != sorted(set(index["weight_map"].values())):
        fail(f"the index maps to {sorted(set(index['weight_map'].values()))}, the folder holds {shards}")
    total = sum(t.numel() * t.element_size() for t in state.values())
    if int(index["metadata"]["total_size"]) != total:
        fail(f"total_size {index['metadata']['total_size']}, the tensors hold {total} bytes")
    model.eval()
    with torch.no_grad():
        logits = model(torch.load(input_path)["input"])
    torch.save({"logits": logits}, out_path)
    print(f"checkpoint_dir_python.py: {len(state)} tensors from {len(shards)} shards loaded strictly")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        fail(__doc__)
    main(*sys.argv[1:])
