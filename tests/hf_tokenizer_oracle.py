#!/usr/bin/env python3
"""Builds tokenizer.json files with the real `tokenizers` library and writes its answers.

Usage: hf_tokenizer_oracle.py OUT_DIR

Trains small BPE tokenizers of the kinds ftrain reads (byte-level like GPT-2, Llama 3 and
Qwen2.5; SentencePiece-style with byte_fallback like Llama 2 and Mistral) on training text,
saves each as OUT_DIR/<name>/tokenizer.json with a tokenizer_config.json, writes held-out
documents to OUT_DIR/heldout.jsonl, and writes OUT_DIR/expected.json: for every tokenizer
the ids of encode(doc, add_special_tokens=False) for each document, the decoded text, and the
BOS/EOS ids. Also writes tokenizers ftrain must refuse under OUT_DIR/unsupported-*/.
No network: everything is built here.
"""
import json
import os
import sys

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, trainers)

GPT2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
              r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def training_lines():
    """English prose from the licenses every Debian has, plus Russian and code lines."""
    lines = []
    for name in ["GPL-3", "Apache-2.0", "LGPL-2.1"]:
        path = os.path.join("/usr/share/common-licenses", name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                lines += [ln.rstrip("\n") for ln in f if ln.strip()]
    russian = [
        "Обучение больших языковых моделей требует много данных и терпения.",
        "Служба поддержки ответила клиенту через два часа после обращения.",
        "Документация описывает, как запустить обучение на кластере Slurm.",
        "Каждый узел хранит контрольную точку на общем диске, и задача продолжается.",
        "Пользователь сообщил об ошибке: программа завершилась с кодом 2.",
    ]
    code = [
        "def main(argv):\n    return run(argv[1:])",
        "for (int i = 0; i < n; ++i) { sum += a[i]; }",
        "if err != nil {\n\treturn fmt.Errorf(\"open %s: %w\", path, err)\n}",
    ]
    for i in range(40):
        lines += [f"{s} Номер {i}." for s in russian] + code + [f"value_{i} = {i * 37}"]
    return lines


HELDOUT = [
    "Hello, world! The model's loss was 2.345 after 10,000 steps.",
    "Привет, мир! Обучение заняло 5 дней на 64 GPU, и модель не потеряла ни одного шага.",
    "Mixed: English и русский in one line, with числа 1234567890 and 3.14159.",
    "Emoji: 😀🚀 and flags 🇷🇺🇬🇧, a family 👨‍👩‍👧 and ☕ coffee.",
    "def f(x):\n    return x ** 2  # square\n\n\nprint(f(12))\n",
    "Whitespace   runs\t\ttabs\n\n\n   leading and trailing   \r\n",
    "NFD input: cafe\u0301, e\u0301te\u0301, \u0415\u0308\u043b\u043a\u0430 and \u0439 vs \u0438\u0306.",
    "Special strings inside text: <|endoftext|> and <s> and </s> stay as written?",
    "Unusual spaces:\u00a0non-breaking,\u2003em, \u3000ideographic,\u0085next-line.",
    "Digits: 2026-12-02 07:00:00 UTC, ٣٤٥ Arabic-Indic, ²½ fractions, ⅠⅡⅢ.",
    "中文文本没有空格。日本語のテキストも。한국어 텍스트.",
    "    indented code block\n\tand a tab; trailing spaces     ",
    "ftrain_token appears as a user-added token ftrain_token.",
    "a",
    " ",
    "Long word: " + "abc" * 120 + " end.",
    "Repeated punctuation!!!??? ... --- *** \"quotes\" 'single' `back`",
]


def save(tok, out, name, config):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    return Tokenizer.from_file(os.path.join(d, "tokenizer.json"))


def with_model_fields(tok, **fields):
    j = json.loads(tok.to_str())
    j["model"].update(fields)
    return Tokenizer.from_str(json.dumps(j))


def byte_level(lines, pre, normalizer=None, vocab=1200):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=GPT2_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    return tok


def sentencepiece_style(lines, prepend_scheme_metaspace):
    """A Llama-2-like BPE: <unk> <s> </s>, then the 256 <0xXX> byte tokens, then merges."""
    norm = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.normalizer = norm
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=120, show_progress=False)
    base.train_from_iterator(lines, trainer)
    trained = json.loads(base.to_str())["model"]
    old = sorted(trained["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in old:
        if t not in vocab:
            vocab[t] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    if prepend_scheme_metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first",
                                                     split=False)
    else:
        tok.normalizer = norm
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ["<unk>", "<s>", "</s>"]])
    return tok


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    lines = training_lines()
    toks = {}

    gpt2 = byte_level(lines, pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]))
    gpt2.add_tokens([AddedToken("ftrain_token", normalized=True)])
    toks["gpt2"] = save(gpt2, out, "gpt2", {"bos_token": None, "eos_token": "<|endoftext|>"})

    llama3 = byte_level(lines, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
    llama3.add_special_tokens([AddedToken("<|begin_of_text|>", special=True, normalized=False),
                               AddedToken("<|end_of_text|>", special=True, normalized=False)])
    llama3 = with_model_fields(llama3, ignore_merges=True)
    toks["llama3"] = save(llama3, out, "llama3", {
        "bos_token": "<|begin_of_text|>",
        "eos_token": {"content": "<|end_of_text|>", "lstrip": False, "rstrip": False}})

    qwen = byte_level(lines, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        normalizer=normalizers.NFC())
    toks["qwen"] = save(qwen, out, "qwen", {"bos_token": None, "eos_token": "<|im_end|>"})

    toks["llama2"] = save(sentencepiece_style(lines, False), out, "llama2",
                          {"bos_token": "<s>", "eos_token": "</s>"})
    toks["metaspace"] = save(sentencepiece_style(lines, True), out, "metaspace",
                             {"bos_token": "<s>", "eos_token": "</s>"})

    with open(os.path.join(out, "heldout.jsonl"), "w", encoding="utf-8") as f:
        for d in HELDOUT:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    expected = {}
    for name, tok in toks.items():
        ids = [tok.encode(d, add_special_tokens=False).ids for d in HELDOUT]
        with open(os.path.join(out, name, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)

        def tid(v):
            if v is None:
                return -1
            return tok.token_to_id(v["content"] if isinstance(v, dict) else v)
        expected[name] = {"ids": ids, "decoded": [tok.decode(i) for i in ids],
                          "bos": tid(cfg["bos_token"]), "eos": tid(cfg["eos_token"]),
                          "vocab_size": max(tok.get_vocab(with_added_tokens=True).values()) + 1}
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)

    # What ftrain must refuse: one line naming the component, exit 2.
    wp = Tokenizer(models.WordPiece(vocab={"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    uni = Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0), ("b", -2.0)], 0))
    lower = Tokenizer.from_str(toks["gpt2"].to_str())
    lower.normalizer = normalizers.Lowercase()
    for name, tok in [("wordpiece", wp), ("unigram", uni), ("lowercase", lower)]:
        d = os.path.join(out, "unsupported-" + name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))


if __name__ == "__main__":
    main()
