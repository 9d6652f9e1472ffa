#!/usr/bin/env python3
"""A safetensors reader and writer written from the format's description
(docs/interop.md, "safetensors"), with no safetensors package: struct + json +
torch.frombuffer. tests/torch/safetensors_test.cc runs it against files
lockstep wrote and reads the files it writes.

  safetensors_reader.py check FILE        values lockstep's test wrote
  safetensors_reader.py linear FILE       load_state_dict of an nn.Linear(3, 2)
  safetensors_reader.py write FILE        a file for lockstep's loader to read

Exit status 0 when every value matches; a message and 1 otherwise.
"""
import json
import struct
import sys

import torch

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
    "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
    "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}


# --- the reader: the same code docs/interop.md shows -------------------------
def load_safetensors(path):
    """Returns ({name: tensor}, metadata) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        shape = info["shape"]
        if begin == end:  # torch.frombuffer refuses an empty buffer
            tensors[name] = torch.empty(shape, dtype=dtype)
        else:
            flat = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype)
            tensors[name] = flat.reshape(shape).clone()
    return tensors, metadata
# -----------------------------------------------------------------------------


def save_safetensors(path, tensors, metadata):
    """Writes {name: tensor} as safetensors: header padded to 8 bytes, data packed."""
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def expected_values(dtype, shift):
    """What the C++ test computes the same way from arange(6) - shift."""
    base = torch.arange(6, dtype=torch.float64).reshape(2, 3) - shift
    if dtype == torch.bool:
        return (torch.arange(6).reshape(2, 3) + shift) % 2 == 1
    if dtype.is_floating_point:
        return (base * 0.375).to(dtype)
    return (base * 3 + 20).to(dtype)


def fail(message):
    print("safetensors_reader.py:", message)
    sys.exit(1)


def check(path):
    tensors, metadata = load_safetensors(path)
    if metadata != {"writer": "lockstep", "note": "ü"}:
        fail(f"metadata {metadata}")
    for name, dtype in DTYPES.items():
        got, want = tensors[name], expected_values(dtype, 2)
        if got.dtype != dtype or not torch.equal(got, want):
            fail(f"{name}: got {got} want {want}")
    if tensors["scalar"].shape != () or tensors["scalar"].item() != 2.5:
        fail(f"scalar {tensors['scalar']}")
    if tensors["empty"].shape != (0, 4):
        fail(f"empty {tensors['empty'].shape}")
    if len(tensors) != len(DTYPES) + 2:
        fail(f"{len(tensors)} tensors: {sorted(tensors)}")


def linear(path):
    tensors, _ = load_safetensors(path)
    model = torch.nn.Linear(3, 2)
    model.load_state_dict(tensors)  # strict: every name and shape must match
    y = model(torch.ones(1, 3, dtype=torch.float32))
    want = torch.tensor([[0.3 + 0.5, 1.2 - 0.5]])
    if not torch.allclose(y, want, atol=1e-6):
        fail(f"Linear output {y}, want {want}")


def write(path):
    tensors = {name: expected_values(dtype, 1) for name, dtype in DTYPES.items()}
    tensors["scalar"] = torch.tensor(-1.25, dtype=torch.float64)
    tensors["empty"] = torch.empty(3, 0, dtype=torch.int32)
    save_safetensors(path, tensors, {"writer": "python"})


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("check", "linear", "write"):
        fail(__doc__)
    {"check": check, "linear": linear, "write": write}[sys.argv[1]](sys.argv[2])
    print("safetensors_reader.py:", sys.argv[1], "ok")
