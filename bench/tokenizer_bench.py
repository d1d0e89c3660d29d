#!/usr/bin/env python3
"""The peer side of bench/tokenizer_bench.sh: corpus, tokenizer training, and the reference
tokenizers' single-core throughput, printed as one JSON line each.

  tokenizer_bench.py corpus OUT.jsonl MB     multilingual JSON Lines corpus of about MB MB
  tokenizer_bench.py train OUT_DIR CORPUS V  Llama-3-style byte-level BPE, vocab V
  tokenizer_bench.py hf TOKENIZER.json TEXT.jsonl REPEAT    tokenizers, one thread
  tokenizer_bench.py spm MODEL TEXT.jsonl REPEAT            sentencepiece's Python module
"""
import glob
import json
import os
import random
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"  # tokenizers' encode_batch on one core
os.environ["TOKENIZERS_PARALLELISM"] = "false"

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
RU_WORDS = ("обучение модель данные узел кластер ошибка клиент обращение поддержка документ "
            "контрольная точка задача запуск перезапуск сервер диск память график отчёт "
            "пользователь система запрос ответ время шаг потеря скорость версия файл строка "
            "и в на с по для не что это как при из от до после через также уже только "
            "быстро медленно снова всегда никогда сегодня вчера завтра").split()
RU_SYLLABLES = ("ка то ри мен са ло ве дан ми кра бер ни зо та пел гру ще фор ль ы ю ост "
                "про пре за на ра ко жи ду").split()


def corpus(out, mb):
    rng = random.Random(2026)
    docs = []
    for path in sorted(glob.glob("/usr/share/doc/*/copyright")) + sorted(
            glob.glob("/usr/share/common-licenses/*")):
        try:
            with open(path, encoding="utf-8") as f:
                docs.append(f.read())
        except (UnicodeDecodeError, IsADirectoryError):
            continue
    english = sum(len(d.encode()) for d in docs)
    # As much Russian as English: ticket-like documents with numbers and punctuation.
    ru = 0
    while ru < english:
        # Half real words, half invented from syllables: many distinct words, as real text has.
        words = [rng.choice(RU_WORDS) if rng.random() < 0.5 else
                 "".join(rng.choice(RU_SYLLABLES) for _ in range(rng.randint(2, 5)))
                 for _ in range(rng.randint(40, 400))]
        for i in range(0, len(words), 12):
            words[i] = words[i].capitalize()
        text = " ".join(words).replace(" и ", ", и ") + f". Заявка №{rng.randint(1, 99999)}."
        docs.append(text)
        ru += len(text.encode())
    rng.shuffle(docs)
    written = 0
    with open(out, "w", encoding="utf-8") as f:
        while written < mb * 1e6:
            for d in docs:
                f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
                written += len(d.encode())
                if written >= mb * 1e6:
                    break
    print(json.dumps({"corpus": out, "mb": round(written / 1e6, 3), "docs": len(docs)}))


def read_docs(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def train(out_dir, corpus_path, vocab):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=int(vocab), show_progress=False,
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(read_docs(corpus_path), trainer)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, f)


def timed(name, docs, repeat, encode_all):
    tokens = encode_all(docs)  # warm-up pass, untimed (caches)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(repeat):
        encode_all(docs)
    s, cpu = time.perf_counter() - t0, time.process_time() - c0
    mb = sum(len(d.encode()) for d in docs) / 1e6
    # mb_s is per CPU second of the whole process (the machine may be shared); wall_mb_s too.
    print(json.dumps({"impl": name, "docs": len(docs), "mb": round(mb, 3), "tokens": tokens,
                      "cpu_s": round(cpu, 3), "mb_s": round(mb * repeat / cpu, 3),
                      "wall_mb_s": round(mb * repeat / s, 3)}))


def main():
    cmd = sys.argv[1]
    if cmd == "corpus":
        corpus(sys.argv[2], float(sys.argv[3]))
    elif cmd == "train":
        train(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "hf":
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(sys.argv[2])
        batch = os.environ.get("FTRAIN_TOK_BENCH_PEER_CALL", "encode_batch") == "encode_batch"
        timed("tokenizers", read_docs(sys.argv[3]), int(sys.argv[4]), lambda docs: sum(
            len(e.ids) for e in tok.encode_batch(docs, add_special_tokens=False)) if batch else
            sum(len(tok.encode(d, add_special_tokens=False).ids) for d in docs))
    elif cmd == "spm":
        import sentencepiece
        sp = sentencepiece.SentencePieceProcessor(model_file=sys.argv[2])
        timed("sentencepiece", read_docs(sys.argv[3]), int(sys.argv[4]),
              lambda docs: sum(len(sp.encode(d)) for d in docs))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
