#!/usr/bin/env python3
"""Fills the local moto S3 server that tests/data_s3_test.cc started, with boto3 (the AWS
SDK, as the reference client): a bucket, directories uploaded under prefixes, many small
objects (listings over 1000 keys), an IAM user with an access key and a role's temporary
credentials (for the signed-request tests, which switch moto's authentication on later).
Prints the credentials as one JSON object on stdout.

  s3_fixture.py ENDPOINT BUCKET --upload DIR=PREFIX ... --many PREFIX=COUNT
"""
import argparse
import concurrent.futures
import json
import os
import sys
import time
import urllib.request

import boto3


def wait_for(endpoint, seconds=60):
    deadline = time.time() + seconds
    while True:
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=2)
            return
        except Exception:  # noqa: BLE001 - not up yet
            if time.time() > deadline:
                sys.exit(f"s3_fixture: moto server at {endpoint} did not come up in {seconds} s")
            time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("bucket")
    ap.add_argument("--upload", action="append", default=[])
    ap.add_argument("--many", action="append", default=[])
    a = ap.parse_args()
    wait_for(a.endpoint)
    kw = dict(endpoint_url=a.endpoint, region_name="us-east-1", aws_access_key_id="setup",
              aws_secret_access_key="setup")
    iam = boto3.client("iam", **kw)
    allow_all = json.dumps({"Version": "2012-10-17",
                            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
    iam.create_user(UserName="ftrain")
    iam.put_user_policy(UserName="ftrain", PolicyName="all", PolicyDocument=allow_all)
    key = iam.create_access_key(UserName="ftrain")["AccessKey"]
    trust = json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]})
    role = iam.create_role(RoleName="reader", AssumeRolePolicyDocument=trust)["Role"]
    iam.put_role_policy(RoleName="reader", PolicyName="all", PolicyDocument=allow_all)
    sts = boto3.client("sts", **dict(kw, aws_access_key_id=key["AccessKeyId"],
                                     aws_secret_access_key=key["SecretAccessKey"]))
    temp = sts.assume_role(RoleArn=role["Arn"], RoleSessionName="test")["Credentials"]

    s3 = boto3.client("s3", **kw)
    s3.create_bucket(Bucket=a.bucket)
    jobs = []
    for spec in a.upload:
        local, prefix = spec.split("=", 1)
        for root, _, files in os.walk(local):
            for f in files:
                path = os.path.join(root, f)
                rel = os.path.relpath(path, local)
                jobs.append((prefix.rstrip("/") + "/" + rel, open(path, "rb").read()))
    for spec in a.many:
        prefix, count = spec.split("=", 1)
        for i in range(int(count)):
            jobs.append((f"{prefix.rstrip('/')}/doc-{i:05d}.txt", f"document {i}\n".encode()))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:  # moto itself is the bottleneck
        list(pool.map(lambda j: s3.put_object(Bucket=a.bucket, Key=j[0], Body=j[1]), jobs))
    json.dump({"access_key": key["AccessKeyId"], "secret_key": key["SecretAccessKey"],
               "temp_access_key": temp["AccessKeyId"], "temp_secret_key": temp["SecretAccessKey"],
               "temp_token": temp["SessionToken"], "objects": len(jobs)}, sys.stdout)


if __name__ == "__main__":
    main()
