#!/usr/bin/env python3
"""An independent reader of TensorBoard event files, for the tests.

Shares no code with lockstep's writer: it checks each TFRecord frame's
masked CRC-32C with its own bitwise CRC-32C (Castagnoli, reflected
polynomial 0x82F63B78), hands each payload to `protoc --decode_raw`, and
reads the Event fields it needs from protoc's text:

    1: wall_time (fixed64, printed as hex)   2: step   3: file_version
    5 { 1 { 1: "tag"  2: simple_value (fixed32, hex)  9 { 1 { 1: "plugin" } } } }

Prints one line per Summary.Value: `<step> <tag> <value or plugin name>`,
and `version <file_version>` for the header. Exits 1 naming the record and
the problem on a bad CRC or a record protoc cannot decode.

With --schema PROTO, prints instead each record as
`protoc --decode=lockstep.test.Event` decodes it against PROTO (a subset of
TensorFlow's and TensorBoard's .proto files, written from their field
numbers), records separated by "---": protoc then also checks wire types.

Usage: read_events.py [--schema PROTO] FILE... (or a directory: every
events.out.tfevents.* in it)
"""
import os
import re
import struct
import subprocess
import sys

_TABLE = []
for n in range(256):
    c = n
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    _TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    pos, index = 0, 0
    while pos < len(data):
        if len(data) - pos < 12:
            fail(path, index, "truncated header")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if length_crc != masked(crc32c(header)):
            fail(path, index, "length CRC mismatch")
        payload = data[pos + 12:pos + 12 + length]
        footer = data[pos + 12 + length:pos + 16 + length]
        if len(payload) != length or len(footer) != 4:
            fail(path, index, "truncated record")
        if struct.unpack("<I", footer)[0] != masked(crc32c(payload)):
            fail(path, index, "payload CRC mismatch")
        yield index, payload
        pos += 16 + length
        index += 1


def fail(path, index, what):
    sys.exit(f"{path}: record {index}: {what}")


SCHEMA = None


def decode_raw(payload):
    out = subprocess.run(["protoc", "--decode_raw"], input=payload, capture_output=True)
    if out.returncode != 0:
        raise ValueError(out.stderr.decode(errors="replace"))
    return out.stdout.decode()


def decode_schema(payload):
    folder, name = os.path.split(os.path.abspath(SCHEMA))
    out = subprocess.run(["protoc", f"--proto_path={folder}", "--decode=lockstep.test.Event", name],
                         input=payload, capture_output=True)
    if out.returncode != 0:
        raise ValueError(out.stderr.decode(errors="replace"))
    return out.stdout.decode()


def parse_text(text):
    """protoc's text as nested lists of (field, value or children)."""
    stack = [[]]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
        elif line.endswith("{"):
            children = []
            stack[-1].append((line[:-1].strip(), children))
            stack.append(children)
        else:
            field, _, value = line.partition(": ")
            stack[-1].append((field, value))
    return stack[0]


def first(fields, number):
    return next((v for f, v in fields if f == number), None)


def unquote(s):
    if not isinstance(s, str) or not s.startswith('"'):
        raise ValueError(f"expected a string, got {s!r}")
    # protoc escapes bytes C-style (octal); tags here are ASCII.
    return bytes(s[1:-1], "ascii").decode("unicode_escape")


def fixed32_float(s):
    return struct.unpack("<f", struct.pack("<I", int(s, 16)))[0]


def describe(path):
    for index, payload in records(path):
        if SCHEMA:
            try:
                print(decode_schema(payload) + "---")
            except ValueError as e:
                fail(path, index, f"protoc --decode: {e}")
            continue
        try:
            event = parse_text(decode_raw(payload))
        except ValueError as e:
            fail(path, index, f"protoc --decode_raw: {e}")
        version = first(event, "3")
        if version is not None:
            print(f"version {unquote(version)}")
            continue
        step = int(first(event, "2") or 0)
        summary = first(event, "5")
        if not isinstance(summary, list):
            fail(path, index, "no summary")
        for field, value in summary:
            if field != "1" or not isinstance(value, list):
                continue
            tag = unquote(first(value, "1"))
            simple = first(value, "2")
            metadata = first(value, "9")
            if simple is not None:
                print(f"{step} {tag} {fixed32_float(simple):.6g}")
            elif isinstance(metadata, list):
                plugin = first(first(metadata, "1"), "1")
                print(f"{step} {tag} plugin={unquote(plugin)}")
            else:
                print(f"{step} {tag} ?")


def main(args):
    global SCHEMA
    if args[:1] == ["--schema"]:
        SCHEMA, args = args[1], args[2:]
    for a in args:
        if os.path.isdir(a):
            for name in sorted(os.listdir(a)):
                if re.match(r"events\.out\.tfevents\.", name):
                    describe(os.path.join(a, name))
        else:
            describe(a)


if __name__ == "__main__":
    main(sys.argv[1:])
