"""Reads an ftrain checkpoint shard with no ftrain code, two ways, and checks they agree.

usage: h5_interop.py read SHARD.h5 SAFETENSORS      (HDF5_PLUGIN_PATH=ftrain's plugin dir)
       h5_interop.py read-raw SHARD.h5 SAFETENSORS  (no HDF5 filter at all: raw chunks are
           decoded here with python-zstandard + numpy unshuffle, an independent
           implementation of the hdf5plugin Zstd chunk format: one zstd frame per chunk)
       h5_interop.py write-raw OUT.h5   (chunks compressed here, filter pipeline declared as
           shuffle + zstd 32015 level 3, written with direct chunk writes)
       h5_interop.py read-foreign OUT.h5  (read that file through ftrain's plugin)
Run with Debian's /usr/bin/python3 (python3-h5py, python3-zstandard). Prints a digest of
every dataset so the caller can compare the readers; exits 1 on any mismatch.
"""
import hashlib
import json
import struct
import sys

import numpy as np


def bf16_to_f32(raw_u16):
    return (raw_u16.astype(np.uint32) << 16).view(np.float32)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dt = {"F32": np.float32, "BF16": np.uint16}[e["dtype"]]
        out[name] = np.frombuffer(data[b:end], dtype=dt).reshape(e["shape"])
    return out


ZSTD_ID = 32015
SHUFFLE_ID = 2


def raw_dataset(ds):
    """Decodes a dataset from its raw chunks with no HDF5 filter involved."""
    import zstandard
    dcpl = ds.id.get_create_plist()
    filters = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
    if dcpl.get_layout() != 2 or not filters:  # not chunked: nothing to decode
        return ds[()]
    assert set(filters) <= {ZSTD_ID, SHUFFLE_ID}, filters
    chunk = ds.chunks[0]
    n = ds.shape[0]
    item = ds.dtype.itemsize
    out = np.empty(n, dtype=ds.dtype)
    for c in range(0, n, chunk):
        mask, raw = ds.id.read_direct_chunk((c,))
        plain = zstandard.ZstdDecompressor().decompress(raw) if ZSTD_ID in filters else raw
        assert len(plain) == chunk * item, (len(plain), chunk, item)
        buf = np.frombuffer(plain, dtype=np.uint8)
        if SHUFFLE_ID in filters and item > 1:
            buf = buf.reshape(item, chunk).T.copy().reshape(-1)  # undo the byte shuffle
        vals = buf.view(ds.dtype)
        m = min(chunk, n - c)
        out[c:c + m] = vals[:m]
    return out


def read_shard(path, weights_path, raw=False):
    import h5py
    weights = read_safetensors(weights_path)
    digest = hashlib.sha256()
    with h5py.File(path, "r") as f:
        assert f.attrs["magic"] in (b"ftrain-checkpoint", "ftrain-checkpoint"), f.attrs["magic"]
        rank = int(f.attrs["rank"])
        names = []
        f.visit(lambda n: names.append(n) if isinstance(f[n], h5py.Dataset) else None)
        for n in sorted(names):
            ds = f[n]
            arr = raw_dataset(ds) if raw else ds[()]
            digest.update(n.encode())
            digest.update(arr.tobytes())
            dtype = ds.attrs["dtype"]
            dtype = dtype.decode() if isinstance(dtype, bytes) else dtype
            if n.startswith("master/"):
                # This rank's flat slice must equal the same slice of the exported weights.
                name = n[len("master/"):]
                off = int(ds.attrs["offset"])
                want = weights[name].reshape(-1)[off:off + arr.size]
                if not np.array_equal(arr, want):
                    print(f"MISMATCH {n} rank {rank}")
                    sys.exit(1)
            if dtype == "bfloat16":
                vals = bf16_to_f32(arr)
                assert np.all(np.isfinite(vals)), n
    print("digest", digest.hexdigest(), "datasets", len(names))


def main():
    cmd = sys.argv[1]
    if cmd == "read":
        read_shard(sys.argv[2], sys.argv[3])
    elif cmd == "read-raw":
        read_shard(sys.argv[2], sys.argv[3], raw=True)
    elif cmd == "write-raw":
        import h5py
        import zstandard
        data = (np.arange(300000, dtype=np.float32) * 0.25).astype(np.float32)
        chunk = 65536
        with h5py.File(sys.argv[2], "w") as f:
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk((chunk,))
            dcpl.set_shuffle()
            dcpl.set_filter(ZSTD_ID, h5py.h5z.FLAG_MANDATORY, (3,))
            space = h5py.h5s.create_simple((data.size,))
            dsid = h5py.h5d.create(f.id, b"x", h5py.h5t.IEEE_F32LE, space, dcpl=dcpl)
            for c in range(0, data.size, chunk):
                block = np.zeros(chunk, dtype=np.float32)
                part = data[c:c + chunk]
                block[:part.size] = part
                shuffled = block.view(np.uint8).reshape(chunk, 4).T.copy().tobytes()
                dsid.write_direct_chunk((c,), zstandard.ZstdCompressor(level=3).compress(shuffled))
        print("wrote", hashlib.sha256(data.tobytes()).hexdigest())
    elif cmd == "read-foreign":
        import h5py
        with h5py.File(sys.argv[2], "r") as f:
            data = f["x"][()]
        print("read", hashlib.sha256(data.tobytes()).hexdigest())
    else:
        sys.exit(2)


if __name__ == "__main__":
    main()
