#!/usr/bin/env python3
"""Checks, with boto3 and an independent CRC32C (bitwise, from the Castagnoli polynomial,
checked against the published check value of "123456789", 0xE3069283), that every single-PUT
object under PREFIX carries the CRC32C of the bytes it holds, as ftrain sent it in
x-amz-checksum-crc32c. moto's own CRC32C falls back to plain CRC32 without the crc32c package,
so it cannot be the oracle; multipart objects (whose checksum moto computes itself) are listed
but not judged. Prints one line per object; exits 1 on any mismatch.

  s3_checksum_oracle.py ENDPOINT BUCKET PREFIX
"""
import base64
import sys

import boto3


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


TABLE = _table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def main():
    assert crc32c(b"123456789") == 0xE3069283
    endpoint, bucket, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    bad = 0
    for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]:
        key = o["Key"]
        head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        got = head.get("ChecksumCRC32C")
        if head.get("ETag", "").strip('"').find("-") >= 0:  # multipart: "<md5 of md5s>-N"
            print(f"{key} multipart {head['ETag']} (checksum {got}: the store's own, not judged)")
            continue
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        want = base64.b64encode(crc32c(body).to_bytes(4, "big")).decode()
        ok = got == want
        bad += not ok
        print(f"{key} {got} {'ok' if ok else 'MISMATCH'} (CRC32C of its {len(body)} bytes: {want})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
