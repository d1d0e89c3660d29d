#!/usr/bin/python3
"""Generates the golden-value fixture for tests/model_test.cc (run once; output is checked in).

An independent reference for src/model/llama.cc: the Hugging Face LlamaForCausalLM equations
(modeling_llama.py, eager attention) written out here in float64 with Debian's python3-torch
(transformers is not needed). It also writes safetensors by hand, so the C++ loader is checked
against a writer it does not share code with.

Writes, for the shapes of configs/tiny.cfg:
  tests/fixtures/llama_golden.safetensors           weights (BF16, HF names, untied lm_head)
  tests/fixtures/llama_golden_expected.safetensors  tokens, targets, hidden_0..L (after Embed
      and after each layer), logits, loss, and logits_tied / loss_tied (same weights with
      lm_head := model.embed_tokens.weight), all float32 except the int64 tokens

Usage (needs `apt-get install python3-torch`; not a build or test dependency):
  /usr/bin/python3 scripts/make_golden.py [--out tests/fixtures] [--config configs/tiny.cfg]
"""
import argparse
import configparser
import json
import math
import os
import struct

import torch

SEED = 20240611
BATCH, SEQ = 2, 16


def read_config(path):
    cp = configparser.ConfigParser(inline_comment_prefixes=("#",))
    with open(path) as f:
        cp.read_file(f)
    m = cp["model"]
    cfg = {k: int(m[k]) for k in ("vocab_size", "hidden_size", "intermediate_size",
                                  "num_layers", "num_heads", "num_kv_heads", "max_seq_len")}
    cfg["num_kv_heads"] = int(m.get("num_kv_heads", cfg["num_heads"]))
    cfg["rope_theta"] = float(m.get("rope_theta", "10000"))
    cfg["rms_norm_eps"] = float(m.get("rms_norm_eps", "1e-5"))
    return cfg


def make_weights(cfg, gen):
    """HF names in named_parameters() order. Scales are chosen so that every part matters:
    attention is peaked (not uniform), norm weights are not all ones, residual branches are
    comparable to the stream they are added to."""
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = H // cfg["num_heads"]
    kv = cfg["num_kv_heads"] * hd

    def normal(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    def norm_w(n):
        return 1.0 + 0.2 * torch.randn((n,), generator=gen, dtype=torch.float32)

    w = {"model.embed_tokens.weight": normal((V, H), 0.5)}
    for i in range(cfg["num_layers"]):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = normal((H, H), 0.15)
        w[p + "self_attn.k_proj.weight"] = normal((kv, H), 0.15)
        w[p + "self_attn.v_proj.weight"] = normal((kv, H), 0.15)
        w[p + "self_attn.o_proj.weight"] = normal((H, H), 0.15)
        w[p + "mlp.gate_proj.weight"] = normal((I, H), 0.15)
        w[p + "mlp.up_proj.weight"] = normal((I, H), 0.15)
        w[p + "mlp.down_proj.weight"] = normal((H, I), 0.08)
        w[p + "input_layernorm.weight"] = norm_w(H)
        w[p + "post_attention_layernorm.weight"] = norm_w(H)
    w["model.norm.weight"] = norm_w(H)
    w["lm_head.weight"] = normal((V, H), 0.15)
    # Stored as BF16: round here so the reference uses exactly the stored values.
    return {k: v.to(torch.bfloat16) for k, v in w.items()}


# --- the reference model (HF LlamaForCausalLM, float64 activations) -----------------------


def rms_norm(x, weight, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(seq_len, head_dim, theta):
    # LlamaRotaryEmbedding: inv_freq, freqs and cos/sin are float32 in HF; keep that.
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    t = torch.arange(seq_len, dtype=torch.int64).float()
    freqs = t[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().double(), emb.sin().double()


def decoder_layer(cfg, w, i, h):
    p = f"model.layers.{i}."
    B, T, H = h.shape
    nh, nkv = cfg["num_heads"], cfg["num_kv_heads"]
    hd = H // nh
    eps = cfg["rms_norm_eps"]
    residual = h
    x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
    q = (x @ w[p + "self_attn.q_proj.weight"].T).view(B, T, nh, hd).transpose(1, 2)
    k = (x @ w[p + "self_attn.k_proj.weight"].T).view(B, T, nkv, hd).transpose(1, 2)
    v = (x @ w[p + "self_attn.v_proj.weight"].T).view(B, T, nkv, hd).transpose(1, 2)
    cos, sin = rope_cos_sin(T, hd, cfg["rope_theta"])
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    # repeat_kv: kv head j serves query heads j*rep .. j*rep+rep-1
    rep = nh // nkv
    k = k[:, :, None].expand(B, nkv, rep, T, hd).reshape(B, nh, T, hd)
    v = v[:, :, None].expand(B, nkv, rep, T, hd).reshape(B, nh, T, hd)
    scores = (q @ k.transpose(2, 3)) / math.sqrt(hd)
    causal = torch.full((T, T), torch.finfo(torch.float64).min, dtype=torch.float64).triu(1)
    probs = torch.softmax(scores + causal, dim=-1)
    attn = (probs @ v).transpose(1, 2).reshape(B, T, H)
    h = residual + attn @ w[p + "self_attn.o_proj.weight"].T
    residual = h
    x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
    gate = x @ w[p + "mlp.gate_proj.weight"].T
    up = x @ w[p + "mlp.up_proj.weight"].T
    mlp = (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    return residual + mlp


def forward(cfg, w, tokens, lm_head):
    hidden = [w["model.embed_tokens.weight"][tokens]]
    for i in range(cfg["num_layers"]):
        hidden.append(decoder_layer(cfg, w, i, hidden[-1]))
    x = rms_norm(hidden[-1], w["model.norm.weight"], cfg["rms_norm_eps"])
    return hidden, x @ lm_head.T


def cross_entropy(logits, targets):
    lp = torch.log_softmax(logits.reshape(-1, logits.shape[-1]), dim=-1)
    return -lp.gather(1, targets.reshape(-1, 1)).mean()


# --- safetensors writer (the format spec, written out independently of src/model) ----------

DTYPES = {torch.bfloat16: "BF16", torch.float32: "F32", torch.int64: "I64"}


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        if t.dtype == torch.bfloat16:
            raw = t.view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            raw = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures"))
    ap.add_argument("--config", default=os.path.join(root, "configs", "tiny.cfg"))
    args = ap.parse_args()

    cfg = read_config(args.config)
    gen = torch.Generator().manual_seed(SEED)
    weights = make_weights(cfg, gen)
    tokens = torch.randint(0, cfg["vocab_size"], (BATCH, SEQ), generator=gen, dtype=torch.int64)
    tokens[0, 0], tokens[1, -1] = 0, cfg["vocab_size"] - 1  # both ends of the vocabulary
    targets = torch.randint(0, cfg["vocab_size"], (BATCH, SEQ), generator=gen, dtype=torch.int64)

    w64 = {k: v.double() for k, v in weights.items()}
    hidden, logits = forward(cfg, w64, tokens, w64["lm_head.weight"])
    loss = cross_entropy(logits, targets)
    _, logits_tied = forward(cfg, w64, tokens, w64["model.embed_tokens.weight"])
    loss_tied = cross_entropy(logits_tied, targets)

    os.makedirs(args.out, exist_ok=True)
    meta = {"format": "pt", "generator": "scripts/make_golden.py", "seed": str(SEED),
            "config": json.dumps(cfg, sort_keys=True)}
    write_safetensors(os.path.join(args.out, "llama_golden.safetensors"), weights, meta)
    expected = {"tokens": tokens, "targets": targets}
    for i, h in enumerate(hidden):
        expected[f"hidden_{i}"] = h.float()
    expected.update({"logits": logits.float(), "loss": loss.float().reshape(()),
                     "logits_tied": logits_tied.float(), "loss_tied": loss_tied.float().reshape(())})
    write_safetensors(os.path.join(args.out, "llama_golden_expected.safetensors"), expected, meta)

    # Sanity report: attention should be far from uniform and every branch should matter.
    print(f"config {cfg}")
    print(f"loss {loss.item():.9g} loss_tied {loss_tied.item():.9g} "
          f"logits std {logits.std().item():.4g} max|logit| {logits.abs().max().item():.4g}")
    for i, h in enumerate(hidden):
        print(f"hidden_{i} rms {h.pow(2).mean().sqrt().item():.4g}")


if __name__ == "__main__":
    main()
