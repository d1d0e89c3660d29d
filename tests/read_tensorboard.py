#!/usr/bin/env python3
"""Reads a TensorBoard log directory with TensorBoard's own EventAccumulator and prints
{tag: [[step, value], ...]} as JSON (values are the float32 scalars as Python floats, exact).
Used by the metrics tests; needs the `tensorboard` package on PYTHONPATH
(scripts/install-deps.sh puts it in /opt/ftrain/py-tensorboard-<version>)."""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator


def main():
    acc = event_accumulator.EventAccumulator(
        sys.argv[1], size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    out = {tag: [[e.step, e.value] for e in acc.Scalars(tag)]
           for tag in acc.Tags()["scalars"]}
    json.dump(out, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
