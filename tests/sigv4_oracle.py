#!/usr/bin/env python3
"""An S3 look-alike on 127.0.0.1 that checks every request's SigV4 signature with botocore's
S3SigV4Auth (the AWS SDK's signer) and answers SignatureDoesNotMatch when it differs, for
tests/data_s3_test.cc: moto's own check mishandles query values with reserved characters, so
listings with prefixes and continuation tokens are checked here. Listing answers come in two
pages, the first with a continuation token full of reserved characters; GETs of objects answer
"ok". Prints its port, then serves until killed.

  sigv4_oracle.py ACCESS_KEY SECRET_KEY SESSION_TOKEN REGION
"""
import http.server
import sys
import urllib.parse

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

TOKEN = "page 2/of+2=ü"
KEY, SECRET, SESSION, REGION = sys.argv[1:5]


class Handler(http.server.BaseHTTPRequestHandler):
    def expected_signature(self):
        auth = self.headers.get("Authorization", "")
        signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";") if "SignedHeaders=" in auth else []
        req = AWSRequest(method="GET", url=f"http://{self.headers['Host']}{self.path}",
                         headers={k: v for k, v in self.headers.items() if k.lower() in signed})
        req.context["timestamp"] = self.headers.get("X-Amz-Date", "")
        signer = S3SigV4Auth(Credentials(KEY, SECRET, SESSION), "s3", REGION)
        canonical = signer.canonical_request(req)
        return signer.signature(signer.string_to_sign(req, canonical), req), auth, signed

    def answer(self, code, body):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - http.server's name
        sig, auth, signed = self.expected_signature()
        if not auth.endswith("Signature=" + sig) or "x-amz-security-token" not in signed:
            sys.stderr.write(f"sigv4_oracle: mismatch for {self.path}\n")
            return self.answer(403, "<Error><Code>SignatureDoesNotMatch</Code>"
                                    "<Message>botocore computes another signature</Message></Error>")
        if "list-type=2" not in self.path:
            return self.answer(200, "ok")
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        second = "continuation-token" in query
        if second and query["continuation-token"] != [TOKEN]:
            return self.answer(400, "<Error><Code>InvalidArgument</Code>"
                                    "<Message>continuation token mangled</Message></Error>")
        key = "d ir/ü/b&amp;2.txt" if second else "d ir/ü/a.txt"
        more = "" if second else ("<NextContinuationToken>" + TOKEN.replace("&", "&amp;") +
                                  "</NextContinuationToken>")
        return self.answer(200, "<ListBucketResult><IsTruncated>" + ("false" if second else "true") +
                           "</IsTruncated><Contents><Key>" + key + "</Key><Size>3</Size></Contents>" +
                           more + "</ListBucketResult>")

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
