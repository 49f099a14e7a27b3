"""A run's bag chunks through zstd at several levels: size, and CPU to encode and to decode.

A finished run's MCAP chunks are mostly truth images (the demo's: 4.9 GB of records in 4,000
chunks). This decodes every fourth chunk of RUN/bag/*.mcap, then encodes them at rosbags'
default level 3, at 1 and at the fast levels -1 and -3, and decodes each result, with the
`zstd` module rosbags uses (Python 3.14's compression.zstd, else backports.zstd). Prints,
per level, the compressed share and the CPU seconds (user + system) scaled to the whole bag:
what bag/storage.py's choice of level costs the recording (encoding, in the run's process)
and verification (decoding, once per reader).

    python bench/bagio.py RUN [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import struct
from pathlib import Path

try:  # as rosbags imports it
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:
    from backports import zstd

LEVELS = (3, 1, -1, -3)
EVERY = 4  # chunks sampled: every fourth


def chunk_records(path: Path) -> list[bytes]:
    """The decompressed records of every EVERY-th zstd chunk of an MCAP file."""
    data = path.read_bytes()
    pos, n, found = 8, 0, []
    while pos + 9 <= len(data):
        op, size = data[pos], struct.unpack_from("<Q", data, pos + 1)[0]
        if op == 0x06:
            body = memoryview(data)[pos + 9 : pos + 9 + size]
            clen = struct.unpack_from("<I", body, 28)[0]
            method = bytes(body[32 : 32 + clen]).decode()
            rlen = struct.unpack_from("<Q", body, 32 + clen)[0]
            if method == "zstd" and n % EVERY == 0:
                found.append(zstd.decompress(body[40 + clen : 40 + clen + rlen]))
            n += method == "zstd"
        if op == 0x0F:  # data end
            break
        pos += 9 + size
    return found


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a finished run folder")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    records = [c for f in sorted((args.run / "bag").glob("*.mcap")) for c in chunk_records(f)]
    if not records:
        raise SystemExit(f"{args.run}/bag: no zstd chunks")
    size = sum(map(len, records))
    rows = {}
    for level in LEVELS:
        t = _cpu()
        packed = [zstd.compress(r, level=level) for r in records]
        encode = _cpu() - t
        t = _cpu()
        for p in packed:
            zstd.decompress(p)
        decode = _cpu() - t
        rows[level] = {
            "share": round(sum(map(len, packed)) / size, 4),
            "encode_cpu_s": round(encode * EVERY, 2),
            "decode_cpu_s": round(decode * EVERY, 2),
        }
    if args.json:
        print(json.dumps({"run": str(args.run), "bytes": size * EVERY, "levels": rows}))
        return
    print(f"{args.run}: {size * EVERY / 1e9:.2f} GB of chunk records (every {EVERY}th sampled)")
    for level, r in rows.items():
        print(
            f"  level {level:2d}: {r['share']:.4f} of the size, encode {r['encode_cpu_s']:5.2f} "
            f"CPU-s, decode {r['decode_cpu_s']:5.2f} CPU-s (whole bag)"
        )


if __name__ == "__main__":
    main()
