#!/usr/bin/env python3
"""Copies a GGUF file with its metadata edited, for the CLI's bad-input tests.

Reads the header, metadata and tensor table, applies the edits in order,
writes them back with the data section unchanged (tensor offsets are relative
to it; it is re-aligned after the new header). Only the standard library.

  gguf_edit.py IN OUT EDIT...
  EDIT: set KEY TYPE VALUE       TYPE u32|i32|u64|i64|f32|f64|bool|str; VALUE
                                 is Python literal syntax ("inf", "b'\\x1b'")
        rename KEY NEWKEY        NEWKEY in Python bytes-literal syntax
        truncate KEY N           keep the first N elements of an array
        fill KEY FROM COUNT VALUE  set elements FROM..FROM+COUNT-1 of an array
        delete KEY
        poke TENSOR OFFSET HEX   overwrite a tensor's data at byte OFFSET
"""
import ast
import shutil
import struct
import sys

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}
NAMES = {"u32": 4, "i32": 5, "f32": 6, "bool": 7, "str": 8, "u64": 10, "i64": 11, "f64": 12}


class Reader:
    def __init__(self, f):
        self.f = f

    def take(self, fmt):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.f.read(size))[0]

    def string(self):
        return self.f.read(self.take("<Q"))

    def value(self, t):
        if t in SCALARS:
            return self.take(SCALARS[t])
        if t == 8:
            return self.string()
        et, n = self.take("<I"), self.take("<Q")
        return (et, [self.value(et) for _ in range(n)])


def encode(t, v):
    if t in SCALARS:
        return struct.pack(SCALARS[t], v)
    if t == 8:
        return struct.pack("<Q", len(v)) + v
    et, items = v
    return struct.pack("<IQ", et, len(items)) + b"".join(encode(et, x) for x in items)


def main():
    src, dst, edits = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(src, "rb") as f:
        r = Reader(f)
        magic, version, n_tensors, n_kv = r.take("<I"), r.take("<I"), r.take("<Q"), r.take("<Q")
        kvs = []
        for _ in range(n_kv):
            key = r.string()
            t = r.take("<I")
            kvs.append([key, t, r.value(t)])
        tensors = []
        offsets = {}
        for _ in range(n_tensors):
            name = r.string()
            n_dims = r.take("<I")
            dims = [r.take("<Q") for _ in range(n_dims)]
            ttype, offset = r.take("<I"), r.take("<Q")
            offsets[name.decode()] = offset
            tensors.append(struct.pack("<Q", len(name)) + name + struct.pack("<I", n_dims) +
                           b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ttype, offset))
        align = next((v for k, t, v in kvs if k == b"general.alignment"), 32)
        data_at = (f.tell() + align - 1) // align * align

        def find(key):
            for kv in kvs:
                if kv[0] == key.encode():
                    return kv
            return None

        pokes = []
        i = 0
        while i < len(edits):
            op = edits[i]
            if op == "set":
                key, tname, text = edits[i + 1:i + 4]
                t = NAMES[tname]
                value = float(text) if t in (6, 12) else ast.literal_eval(text)
                if t == 8 and isinstance(value, str):
                    value = value.encode()
                kv = find(key)
                if kv:
                    kv[1:] = [t, value]
                else:
                    kvs.append([key.encode(), t, value])
                i += 4
            elif op == "rename":
                find(edits[i + 1])[0] = ast.literal_eval(edits[i + 2])
                i += 3
            elif op == "truncate":
                kv = find(edits[i + 1])
                kv[2] = (kv[2][0], kv[2][1][:int(edits[i + 2])])
                i += 3
            elif op == "fill":
                kv = find(edits[i + 1])
                start, count = int(edits[i + 2]), int(edits[i + 3])
                items = kv[2][1]
                items[start:start + count] = [ast.literal_eval(edits[i + 4])] * count
                i += 5
            elif op == "delete":
                kvs.remove(find(edits[i + 1]))
                i += 2
            elif op == "poke":
                pokes.append((offsets[edits[i + 1]] + int(edits[i + 2]), bytes.fromhex(edits[i + 3])))
                i += 4
            else:
                sys.exit(f"gguf_edit.py: unknown edit '{op}'")

        with open(dst, "wb") as out:
            out.write(struct.pack("<IIQQ", magic, version, n_tensors, len(kvs)))
            for key, t, v in kvs:
                out.write(struct.pack("<Q", len(key)) + key + struct.pack("<I", t) + encode(t, v))
            for rec in tensors:
                out.write(rec)
            out.write(b"\0" * ((-out.tell()) % align))
            f.seek(data_at)
            out_data_at = out.tell()
            shutil.copyfileobj(f, out)
            for at, data in pokes:
                out.seek(out_data_at + at)
                out.write(data)


if __name__ == "__main__":
    main()
