#!/usr/bin/env python3
# How long a FETCH_PEER takes when some daemons of the start are on dead hosts (printed, never
# pass/fail): real ckptd processes on 127.0.0.1, a ring a <-> b holding rank 0's step 2, N
# "dead" daemons (peer-addr files of this start pointing at ports whose accept queue is full,
# so a connection attempt gets no answer at all, like a host that is down), then a daemon c
# (a replacement node) fetches step 2 twice with the fake trainer. Before #22 each dead peer
# cost a full --peer-timeout-s on every fetch, one after another.
# usage: bench/peer_fetch_dead_peers.py [BIN_DIR [N_DEAD [PEER_TIMEOUT_S]]]
#   (defaults: build/bin 4 3; needs ckptd, ckptd_fake_trainer, ckptctl; ~10 s)
import hashlib
import hmac
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/bin"
N_DEAD = int(sys.argv[2]) if len(sys.argv) > 2 else 4
TIMEOUT = sys.argv[3] if len(sys.argv) > 3 else "3"
SECRET = b"0123456789abcdef-bench-secret"
JOB = "4711"


def start_id():  # daemon/peer_auth.cc StartIdOf
    msg = b"ftrain-ckptd-peer-v1 start\0" + struct.pack("<I", len(JOB)) + JOB.encode()
    return hmac.new(SECRET, msg, hashlib.sha256).digest()[:8].hex()


def main():
    base = tempfile.mkdtemp(prefix="peer-fetch-bench.")
    run, root, secret = base + "/run", base + "/ckpt", base + "/secret"
    os.makedirs(run)
    with open(secret, "wb") as f:
        f.write(SECRET)
    os.chmod(secret, 0o600)
    procs, holes = [], []

    def daemon(node, buddy=None):
        args = [BIN + "/ckptd", "--root", root, "--run-dir", run, "--node", node, "--threads",
                "1", "--peer-listen", "127.0.0.1:0", "--job-id", JOB, "--job-secret-file", secret,
                "--peer-timeout-s", TIMEOUT]
        if buddy:
            args += ["--buddy-file", f"{run}/ckptd-{buddy}/peer-addr"]
        log = open(f"{base}/{node}.log", "w")
        procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT))
        while not os.path.exists(f"{run}/ckptd-{node}/peer-addr"):
            time.sleep(0.05)

    def held():
        out = subprocess.run([BIN + "/ckptctl", "status", run, "--json", "--node", "b"],
                             capture_output=True, text=True).stdout
        rep = json.loads(out.splitlines()[0])["replication"]
        return any(h["step"] == 2 for h in rep["replicas_held"])

    try:
        daemon("a", "b")
        daemon("b", "a")
        subprocess.run([BIN + "/ckptd_fake_trainer", run, "a", "0", "1", "1,2"], check=True,
                       capture_output=True)
        while not held():
            time.sleep(0.1)
        for i in range(N_DEAD):
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen(0)
            port = listener.getsockname()[1]
            fill = []
            for _ in range(3):  # fill the accept queue: later SYNs are dropped
                s = socket.socket()
                s.setblocking(False)
                try:
                    s.connect(("127.0.0.1", port))
                except BlockingIOError:
                    pass
                fill.append(s)
            holes.append((listener, fill))
            d = f"{run}/ckptd-0dead{i}"
            os.makedirs(d, mode=0o700)
            with open(d + "/peer-addr", "w") as f:
                f.write(f"127.0.0.1:{port}\nstart={start_id()} since=-1\n")
        time.sleep(0.3)
        daemon("c")
        print(f"{N_DEAD} dead peers, --peer-timeout-s {TIMEOUT}, binaries {BIN}")
        for what in ["first fetch", "second fetch"]:
            t0 = time.time()
            r = subprocess.run([BIN + "/ckptd_fake_trainer", run, "c", "0", "1", "-",
                                "--fetch-peer", "2"], capture_output=True, text=True)
            line = (r.stdout.strip().splitlines() or [r.stderr.strip()[:200]])[0]
            print(f"  {what}: {time.time() - t0:.2f} s wall; {line}")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
