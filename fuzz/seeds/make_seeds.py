#!/usr/bin/env python3
"""Builds the seed corpora of the fuzz targets from tests/fixtures (run by scripts/fuzz.sh).

Usage: make_seeds.py <repo root> <corpus root>. Writes <corpus root>/<target>/seed-*; existing
files (the fuzzer's own finds) are kept.
"""
import glob, json, os, struct, sys, zlib

root, out = sys.argv[1], sys.argv[2]
fx = os.path.join(root, "tests", "fixtures")
n = [0]

def put(target, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    n[0] += 1
    with open(os.path.join(d, "seed-%05d" % n[0]), "wb") as f:
        f.write(data)

def read(p):
    with open(p, "rb") as f:
        return f.read()

# Schemas and their test values: [schema, data...] per group of the JSON-Schema-Test-Suite subset.
for p in sorted(glob.glob(os.path.join(fx, "json-schema-test-suite", "*", "*.json"))):
    try:
        groups = json.loads(read(p))
    except ValueError:
        continue
    if not isinstance(groups, list):
        continue
    for g in groups:
        if not isinstance(g, dict) or "schema" not in g:
            continue
        values = [t.get("data") for t in g.get("tests", [])]
        doc = json.dumps([g["schema"]] + values).encode()
        put("schema_compile", doc)
        put("schema_compile", b"\x83" + doc)  # all errors, any root
        for v in values:
            put("args_validate", json.dumps(v).encode())

# JCS inputs: canonical form and argument text.
for p in sorted(glob.glob(os.path.join(fx, "jcs", "input", "*"))):
    put("jcs", read(p))
    put("args_validate", read(p))
put("jcs", b'[1e21,1e-7,-0,0.1,123456789012345678901,"\\u00e9\\ud83d\\ude00",{"b":1,"a":2}]')

# SSE recordings: a chunking seed byte, then the body.
for p in sorted(glob.glob(os.path.join(fx, "sse", "*.sse"))):
    body = read(p)
    put("sse_assembly", b"\x07" + body)
    put("sse_assembly", b"\x01" + body)

# State files: raw snapshot + journal (flags 0), framed JSON payloads (flags 3), legacy state.json (4).
def seed_state(flags, snap, journal):
    snap = snap[:0xFFFF]
    put("state_load", bytes([flags]) + struct.pack("<H", len(snap)) + snap + journal)

for sess in sorted(glob.glob(os.path.join(fx, "state", "*-files", "*"))):
    snaps = sorted(glob.glob(os.path.join(sess, "snapshot-*.ark")))
    journals = sorted(glob.glob(os.path.join(sess, "journal-*.ark")))
    if snaps and journals:
        s, j = read(snaps[-1]), read(journals[-1])
        seed_state(0, s, j)
        # The same content as payloads: the snapshot's JSON and the journal's records split at NUL.
        payloads, i = [], 8
        while i + 8 <= len(j):
            (ln,) = struct.unpack("<I", j[i:i + 4])
            payloads.append(j[i + 8:i + 8 + ln])
            i += 8 + ln
        seed_state(3, s[12:], b"\x00".join(payloads))
for p in sorted(glob.glob(os.path.join(fx, "state", "v*", "*.json"))):
    seed_state(4, read(p), b"")
    seed_state(1, read(p), b"")
print("seeds written:", n[0])
