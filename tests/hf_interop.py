#!/usr/bin/env python3
"""Hugging Face side of ftrain's base-model and export tests (run with FTRAIN_HF_PYTHONPATH).

transformers and safetensors are the oracles: they write the base models ftrain starts from,
read back what ftrain exports, and compute the reference loss on ftrain's packed rows.

  make-base OUT --dtype float32|bfloat16|float16 [--shard-kb N] [--seed S] [--tokenizer FILE]
      a tiny LlamaForCausalLM (configs/tiny.cfg's shapes) saved by save_pretrained, sharded
      when --shard-kb is given; FILE is copied in with a tokenizer_config.json
  same-weights BASE_DIR FILE.safetensors
      every tensor of FILE equals the base's (converted to float32) bit for bit
  loss HF_DIR DATA_DIR
      mean token cross-entropy of every packed row (fp32), printed as %.9g
  check-export EXPORT_DIR BASE_DIR|- DTYPE
      config.json, generation_config.json, tokenizer files and index as the export promises

Several commands in one process (importing torch and transformers is most of a call's time):
CMD ARGS... -- CMD ARGS... runs each in turn; each one's output follows a line "== CMD", a
failing one prints "FAILED: why" there and the others still run; the exit status is 1 if any
failed.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
import torch
from safetensors.torch import load_file


def tiny_config(dtype):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=172,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=64, tie_word_embeddings=False,
                       rope_theta=10000.0, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
                       dtype=dtype)


def make_base(args):
    out, opts = args[0], dict(zip(args[1::2], args[2::2]))
    from transformers import LlamaForCausalLM
    dtype = opts.get("--dtype", "float32")
    torch.manual_seed(int(opts.get("--seed", "7")))
    model = LlamaForCausalLM(tiny_config(dtype))
    with torch.no_grad():  # weights large enough that positions and norms matter
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p, dtype=torch.float32) * (0.1 if "norm" not in name else 0.2)
                    + (1.0 if "norm" in name else 0.0))
    model = model.to(getattr(torch, dtype))
    kw = {"max_shard_size": opts["--shard-kb"] + "KB"} if "--shard-kb" in opts else {}
    model.save_pretrained(out, **kw)
    if "--tokenizer" in opts:
        shutil.copy(opts["--tokenizer"], os.path.join(out, os.path.basename(opts["--tokenizer"])))
        with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>",
                       "eos_token": "</s>"}, f)


def base_tensors(base_dir):
    tensors = {}
    for name in sorted(os.listdir(base_dir)):
        if name.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(base_dir, name)))
    return tensors


def same_weights(args):
    base, got = base_tensors(args[0]), load_file(args[1])
    if sorted(base) != sorted(got):
        sys.exit("tensor sets differ: %s vs %s" % (sorted(base), sorted(got)))
    for name, t in base.items():
        want = t.to(torch.float32)
        if got[name].dtype != torch.float32 or not torch.equal(want, got[name]):
            diff = (want - got[name].float()).abs().max().item()
            sys.exit("%s differs from the base (max abs difference %g)" % (name, diff))
    print("identical: %d tensors" % len(base))


def packed_rows(data_dir):
    rows = []
    index = json.load(open(os.path.join(data_dir, "index.json")))
    for shard in index["shards"]:
        with open(os.path.join(data_dir, shard["name"]), "rb") as f:
            head = f.read(64)
            token_bytes, seq_len = struct.unpack_from("<II", head, 12)
            num_rows, payload = struct.unpack_from("<QQ", head, 24)
            f.seek(payload)
            dtype = np.uint16 if token_bytes == 2 else np.uint32
            data = np.frombuffer(f.read(num_rows * (seq_len + 1) * token_bytes), dtype=dtype)
            rows.append(data.reshape(num_rows, seq_len + 1).astype(np.int64))
    return torch.from_numpy(np.concatenate(rows))


def loss(args):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(args[0], dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    rows = packed_rows(args[1])
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in rows.split(64):
            logits = model(batch[:, :-1]).logits.float()
            ce = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum")
            total += ce.double().item()
            count += batch[:, 1:].numel()
    print("%.9g %d" % (total / count, rows.shape[0]))


def check_export(args):
    out, base, dtype = args
    problems = []
    config = json.load(open(os.path.join(out, "config.json")))
    if config.get("torch_dtype") != dtype:
        problems.append("config.json torch_dtype is %r, not %r" % (config.get("torch_dtype"), dtype))
    if base != "-":
        want = json.load(open(os.path.join(base, "config.json")))
        for key, value in want.items():
            if key not in ("dtype", "torch_dtype") and config.get(key) != value:
                problems.append("config.json %s is %r, the base has %r" % (key, config.get(key), value))
        for name in os.listdir(base):
            if name.endswith(".safetensors") or name.endswith(".index.json") or name == "config.json":
                continue
            if open(os.path.join(base, name), "rb").read() != open(os.path.join(out, name), "rb").read():
                problems.append("%s differs from the base's" % name)
    index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
    files = sorted(set(index["weight_map"].values()))
    if files != sorted(n for n in os.listdir(out) if n.endswith(".safetensors")):
        problems.append("the index names %s" % files)
    size = sum(t.numel() * t.element_size() for f in files
               for t in load_file(os.path.join(out, f)).values())
    if index["metadata"]["total_size"] != size:
        problems.append("index total_size %d != %d" % (index["metadata"]["total_size"], size))
    if problems:
        sys.exit("; ".join(problems))
    print("export ok: %d weight files" % len(files))


def main(argv):
    commands = {"make-base": make_base, "same-weights": same_weights, "loss": loss,
                "check-export": check_export}
    groups = [[]]
    for a in argv:
        if a == "--":
            groups.append([])
        else:
            groups[-1].append(a)
    if any(not g or g[0] not in commands for g in groups):
        sys.exit(__doc__)
    if len(groups) == 1:
        commands[groups[0][0]](groups[0][1:])
        return
    failed = False
    for g in groups:
        print("== " + g[0], flush=True)
        try:
            commands[g[0]](g[1:])
        except SystemExit as e:
            print("FAILED: %s" % e.code, flush=True)
            failed = True
        except Exception as e:  # noqa: BLE001 - reported, and the exit status says so
            print("FAILED: %r" % e, flush=True)
            failed = True
        sys.stdout.flush()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
