#!/usr/bin/env python3
"""Regenerates the committed fuzz seeds in fuzz/seeds/<target>/ from the repository's own data.

Run from anywhere: `python3 fuzz/seed-corpus.py`. It rewrites every seed folder, so a changed
schema, snapshot or vector shows as a seed diff. Sources:

- schema/tests/data/signing-vectors.json: every envelope (valid and refused) and its signing bytes;
- snapshots/payloads/v*/: the hex of every action, response and refusal, and the JSON of every
  WebSocket frame (encoded here as canonical DAG-CBOR), per protocol version;
- schema/src/generated.rs: the order of ACTIONS (the actions target picks one by index).

The input layout of each target is in its `//!` doc (fuzz/fuzz_targets/<target>.rs).
"""

import json
import random
import re
import shutil
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "fuzz" / "seeds"


def cbor_head(major, value):
    if value < 24:
        return bytes([major << 5 | value])
    for info, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if value < 1 << (8 * width):
            return bytes([major << 5 | info]) + value.to_bytes(width, "big")
    raise ValueError(f"{value} does not fit a CBOR head")


def cbor(value):
    """Canonical DAG-CBOR of a JSON value (map keys by length, then bytewise)."""
    if value is None:
        return b"\xf6"
    if value is True:
        return b"\xf5"
    if value is False:
        return b"\xf4"
    if isinstance(value, int):
        return cbor_head(0, value) if value >= 0 else cbor_head(1, -1 - value)
    if isinstance(value, float):
        return b"\xfb" + struct.pack(">d", value)
    if isinstance(value, str):
        raw = value.encode()
        return cbor_head(3, len(raw)) + raw
    if isinstance(value, bytes):
        return cbor_head(2, len(value)) + value
    if isinstance(value, list):
        return cbor_head(4, len(value)) + b"".join(cbor(item) for item in value)
    if isinstance(value, dict):
        keys = sorted(value, key=lambda key: (len(key.encode()), key.encode()))
        return cbor_head(5, len(keys)) + b"".join(cbor(key) + cbor(value[key]) for key in keys)
    raise TypeError(type(value))


def envelope(action_bytes, protocol):
    """An envelope around already encoded action bytes, signed by nobody (a zero `sig`)."""
    principal = bytes.fromhex("ed01" + "47" * 32)
    entries = [
        ("sig", cbor(bytes(64))),
        ("type", cbor("AgentsAction")),
        ("action", action_bytes),
        ("signer", cbor(principal)),
        ("account", cbor(principal)),
        ("protocol", cbor(protocol)),
    ]
    return cbor_head(5, len(entries)) + b"".join(cbor(key) + value for key, value in entries)


def actions_order():
    text = (ROOT / "schema/src/generated.rs").read_text()
    table = text[text.index("pub const ACTIONS") :]
    table = table[: table.index("\n];")]
    return re.findall(r'^\s+name: "([A-Za-z]+)",', table, re.M)


def snapshots():
    """(protocol, kind, stem, bytes) for every payload snapshot."""
    for folder in sorted((ROOT / "snapshots/payloads").glob("v*")):
        protocol = int(folder.name[1:])
        for path in sorted(folder.glob("*.snap")):
            kind = path.stem.split("-", 1)[0]
            if kind == "index":
                continue
            text = path.read_text()
            body = text.split("\n---\n", 1)[1]
            match = re.search(r"^hex \(\d+ bytes\):\n((?:[0-9a-f]+\n)+)", body, re.M)
            if match:
                data = bytes.fromhex(match.group(1).replace("\n", ""))
            elif kind == "frame":
                data = cbor(json.loads(body))
            else:
                raise SystemExit(f"no payload in {path}")
            yield protocol, kind, path.stem, "refused:" in body, data


# Inputs that once failed a target (each fixed in its own commit, with a regression test), kept so
# every run replays them.
REGRESSIONS = {
    # An indefinite-length map key, and bytes after a link's CID: the decoder took both.
    "envelope": {
        "indefinite-map-key": "a17fff3a610013ff",
        "link-trailing-bytes": "d82a490001480001ffedeeee",
    },
    # An integer below -2^63 in an open value: stored, but no union could read it back.
    "actions": {"integer-below-i64": "288ca1603bc26f748181818160"},
}


def write(target, name, data):
    folder = SEEDS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


def main():
    if SEEDS.exists():
        shutil.rmtree(SEEDS)
    vectors = json.loads((ROOT / "schema/tests/data/signing-vectors.json").read_text())
    for case in vectors["cases"]:
        for field in ("envelopeHex", "signedBytesHex"):
            if case.get(field):
                write("envelope", f"vector-{case['id']}-{field[:-3]}", bytes.fromhex(case[field]))

    for target, inputs in REGRESSIONS.items():
        for name, data in inputs.items():
            write(target, f"regression-{name}", bytes.fromhex(data))

    order = actions_order()
    for protocol, kind, stem, refused, data in snapshots():
        write("compat", f"v{protocol}-{stem}", bytes([protocol - 1, 0xFF]) + data)
        if kind != "action" or refused:
            continue
        name = stem.split("-")[1]
        write("actions", f"v{protocol}-{stem}", bytes([order.index(name), protocol - 1]) + data)
        if protocol == 3:
            write("envelope", f"unsigned-{stem}", envelope(data, protocol))

    paths = [
        "notes/a.md",
        "notes\\sub\\a.md",
        "./notes//./a.md/",
        "a..b/..c",
        "../x",
        "a/../../b",
        "/etc/passwd",
        "a\0b",
        "./.",
        "/".join(["d"] * 17),
        "a" * 513,
        "\u20ac" * 171,
        "./" * 40 + "x",
        "\u65e5\u672c/\U0001f600.txt",
    ]
    for index, path in enumerate(paths):
        write("memory_path", f"path-{index:02}", path.encode())

    # The chunk-order input is read with `arbitrary`, so any bytes are an input; a few fixed ones.
    rng = random.Random(13)
    for index in range(8):
        write("chunk_order", f"random-{index}", bytes(rng.randrange(256) for _ in range(32 + 48 * index)))


if __name__ == "__main__":
    main()
