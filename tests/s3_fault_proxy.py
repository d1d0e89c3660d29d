#!/usr/bin/env python3
"""A fault-injecting HTTP proxy in front of the moto S3 server, for tests/ckpt_s3_test.cc:
moto cannot throttle, so this answers 503 SlowDown to the first N requests (--fail-first),
every Kth (--fail-every), every one (--always-503) or every one after the Nth (--fail-after),
stalls the first N (--stall-first) or every request whose "METHOD PATH" matches the regular
expression RE after the first K such (--stall-match RE --stall-skip K), answers 503 to every
request while the file DOWN exists (--down-file DOWN: an outage a test starts and ends) or to
the first N requests whose "METHOD PATH" matches RE (--fail-match RE --fail-match-count N), or
forwards without the If-None-Match header (a store that ignores conditional writes). Everything else is forwarded to the
upstream unchanged. Writes its port to PORT_FILE once listening and counts the faults it
injected in PORT_FILE.faults.

  s3_fault_proxy.py UPSTREAM PORT_FILE [--fail-first N] [--fail-every K] [--stall-first N]
      [--stall-s S] [--stall-match RE] [--stall-skip K] [--fail-after N] [--always-503]
      [--down-file DOWN] [--fail-match RE] [--fail-match-count N] [--strip-if-none-match]
"""
import argparse
import os
import re
import http.client
import http.server
import threading
import time
import urllib.parse

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message></Error>')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("upstream")
    ap.add_argument("port_file")
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--fail-every", type=int, default=0)
    ap.add_argument("--stall-first", type=int, default=0)
    ap.add_argument("--stall-s", type=float, default=5.0)
    ap.add_argument("--stall-match", default="")
    ap.add_argument("--stall-skip", type=int, default=0)
    ap.add_argument("--fail-after", type=int, default=0)
    ap.add_argument("--always-503", action="store_true")
    ap.add_argument("--down-file", default="")
    ap.add_argument("--fail-match", default="")
    ap.add_argument("--fail-match-count", type=int, default=1)
    ap.add_argument("--strip-if-none-match", action="store_true")
    a = ap.parse_args()
    up = urllib.parse.urlparse(a.upstream)
    lock = threading.Lock()
    state = {"seen": 0, "faults": 0, "matched": 0, "fail_matched": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def handle_any(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            with lock:
                state["seen"] += 1
                seen = state["seen"]
                stall = seen <= a.stall_first
                if a.stall_match and re.search(a.stall_match, self.command + " " + self.path):
                    state["matched"] += 1
                    stall = stall or state["matched"] > a.stall_skip
                fail_match = False
                if a.fail_match and re.search(a.fail_match, self.command + " " + self.path):
                    state["fail_matched"] += 1
                    fail_match = state["fail_matched"] <= a.fail_match_count
                fault = (a.always_503 or seen <= a.fail_first or fail_match or
                         (a.down_file and os.path.exists(a.down_file)) or
                         (a.fail_after > 0 and seen > a.fail_after) or
                         (a.fail_every > 0 and seen % a.fail_every == 0))
                if fault or stall:
                    state["faults"] += 1
                    with open(a.port_file + ".faults", "w") as f:
                        f.write(str(state["faults"]))
            if stall:  # answers nothing for a while: the client's stall timeout retries
                time.sleep(a.stall_s)
                self.close_connection = True
                return
            if fault:
                self.send_response(503)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(SLOWDOWN)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(SLOWDOWN)
                return
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "connection")
                       and not (a.strip_if_none_match and k.lower() == "if-none-match")}
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
            conn.request(self.command, self.path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
            self.send_response(r.status)
            for k, v in r.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            length = r.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            conn.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(a.port_file + ".tmp", "w") as f:  # written, then renamed: never read half-written
        f.write(str(server.server_address[1]))
    os.rename(a.port_file + ".tmp", a.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
