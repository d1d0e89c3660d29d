"""Flips one byte inside the stored data of one dataset of an ftrain checkpoint shard, the way
a bad disk or a stray write would, leaving the HDF5 structure intact (so only the data hash
can tell).

usage: flip_byte.py SHARD.h5 GROUP      flips a byte in the middle of the first dataset under
                                         /GROUP (e.g. master) that has at least 64 bytes
Prints "flipped DATASET at OFFSET (chunked|contiguous)". Run with Debian's /usr/bin/python3
(python3-h5py); HDF5_PLUGIN_PATH is not needed (no data is decoded).
"""
import sys

import h5py


def main():
    path, group = sys.argv[1], sys.argv[2]
    target = None
    with h5py.File(path, "r") as f:
        names = []
        f[group].visit(lambda n: names.append(n))
        for n in sorted(names):
            obj = f[group][n]
            if not isinstance(obj, h5py.Dataset) or obj.size * obj.dtype.itemsize < 64:
                continue
            dsid = obj.id
            if obj.chunks is not None:
                info = dsid.get_chunk_info(0)
                target = ("/%s/%s" % (group, n), info.byte_offset + info.size // 2, "chunked")
            else:
                off = dsid.get_offset()
                target = ("/%s/%s" % (group, n), off + obj.size * obj.dtype.itemsize // 2,
                          "contiguous")
            break
    if target is None:
        sys.exit("no dataset of at least 64 bytes under /%s in %s" % (group, path))
    with open(path, "r+b") as f:
        f.seek(target[1])
        b = f.read(1)
        f.seek(target[1])
        f.write(bytes([b[0] ^ 0x5A]))
    print("flipped %s at %d (%s)" % target)


if __name__ == "__main__":
    main()
