#!/usr/bin/env python3
"""Parses a Prometheus text-format file with prometheus_client's parser (Debian's
python3-prometheus-client) and prints [{"family", "type", "help", "name", "labels", "value"}]
as JSON, one entry per sample. Exits 1 with the parser's message when the file is malformed."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        text = f.read()
    out = []
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out.append({"family": fam.name, "type": fam.type, "help": fam.documentation,
                            "name": s.name, "labels": s.labels, "value": s.value})
    except ValueError as e:
        print("malformed: %s" % e, file=sys.stderr)
        sys.exit(1)
    json.dump(out, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
