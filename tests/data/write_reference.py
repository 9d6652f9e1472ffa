#!/usr/bin/python3
"""Writes HDF5 and LMDB files the way other people's tools do (h5py, the lmdb
module, a hand-written tf.train.Example encoder), so that the tests check
lockstep's readers against files lockstep did not write.

  write_reference.py h5 OUT IMAGES LABELS [--count N] [--float] [--chunk R]
                        [--images-name P] [--labels-name P] [--labels-count N]
                        [--image-dtype int32]
  write_reference.py lmdb OUT IMAGES LABELS [--count N]

IMAGES/LABELS are IDX files (gzip'd or not), e.g. Fashion-MNIST's.
"""
import argparse
import gzip
import struct

import numpy as np


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    assert zero == 0 and dtype == 0x08, path
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):  # length-delimited field
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def int64_feature(values):  # Feature{int64_list=3: Int64List{value=1 packed}}
    packed = b"".join(varint(v & 0xFFFFFFFFFFFFFFFF) for v in values)
    return field(3, field(1, packed))


def bytes_feature(value):  # Feature{bytes_list=1: BytesList{value=1}}
    return field(1, field(1, value))


def example(features):  # Example{features=1: Features{feature=1: map entry{key=1, value=2}}}
    entries = b"".join(field(1, field(1, k.encode()) + field(2, v)) for k, v in sorted(features.items()))
    return field(1, entries)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["h5", "lmdb"])
    p.add_argument("out")
    p.add_argument("images")
    p.add_argument("labels")
    p.add_argument("--count", type=int, default=0)
    p.add_argument("--float", action="store_true")
    p.add_argument("--chunk", type=int, default=0)
    p.add_argument("--images-name", default="images")
    p.add_argument("--labels-name", default="labels")
    p.add_argument("--labels-count", type=int, default=-1)
    p.add_argument("--image-dtype", default="")
    p.add_argument("--empty-chunk-rows", type=int, default=0,
                   help="images left unwritten, chunked by this many rows (a chunk shape test)")
    p.add_argument("--unwritten-labels", action="store_true",
                   help="the label dataset created with a fill value and never written")
    p.add_argument("--written-rows", type=int, default=0,
                   help="images chunked by --chunk rows, only the first this many written")
    p.add_argument("--external-images", default="",
                   help="images stored in this external raw file")
    a = p.parse_args()
    images, labels = read_idx(a.images), read_idx(a.labels)
    if a.count:
        images, labels = images[:a.count], labels[:a.count]
    if a.kind == "h5":
        import h5py
        with h5py.File(a.out, "w") as f:
            data = images.astype(np.float32) / 255.0 if a.float else images
            if a.image_dtype:
                data = images.astype(a.image_dtype)
            kw = {"chunks": (a.chunk,) + data.shape[1:]} if a.chunk else {}
            if a.written_rows:
                d = f.create_dataset(a.images_name, shape=data.shape, dtype=data.dtype,
                                     chunks=(a.chunk,) + data.shape[1:])
                d[:a.written_rows] = data[:a.written_rows]
            elif a.external_images:
                f.create_dataset(a.images_name, data=data,
                                 external=[(a.external_images, 0, data.nbytes)])
            elif a.empty_chunk_rows:
                f.create_dataset(a.images_name, shape=data.shape, dtype=data.dtype,
                                 maxshape=(None,) + data.shape[1:],
                                 chunks=(a.empty_chunk_rows,) + data.shape[1:])
            else:
                f.create_dataset(a.images_name, data=data, **kw)
            n = len(labels) if a.labels_count < 0 else a.labels_count
            if a.unwritten_labels:
                f.create_dataset(a.labels_name, shape=(n,), dtype=np.int32, fillvalue=3)
            else:
                f.create_dataset(a.labels_name, data=labels[:n].astype(np.int32))
    else:
        import lmdb
        env = lmdb.open(a.out, map_size=1 << 30)
        with env.begin(write=True) as txn:
            for i, (image, label) in enumerate(zip(images, labels)):
                value = example({"image": bytes_feature(image.tobytes()),
                                 "label": int64_feature([int(label)]),
                                 "shape": int64_feature(list(image.shape)),
                                 "format": bytes_feature(b"raw")})
                txn.put(b"%08d" % i, value)
        env.close()


if __name__ == "__main__":
    main()
