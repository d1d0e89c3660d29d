#!/usr/bin/env python3
"""synthetic-corpus.py OUT_FILE: a deterministic 8.8 MB text corpus (60,000 lines of words made
of 1-5 random syllables, ~42,000 distinct words) for the device checks (scripts/gpu-check.sh,
scripts/gpu-lease.sh). The GPU image's /usr/share/common-licenses is 0.17 MB, too little text
for an 8,000-piece tokenizer (SentencePiece refused: at most 2,452). Same bytes everywhere."""
import random
import sys

if len(sys.argv) != 2:
    sys.exit("usage: synthetic-corpus.py OUT_FILE")
random.seed(0)
syl = [a + b for a in "bcdfghjklmnprstvwz" for b in "aeiou"] + ["th", "ch", "sh", "qu", "st"]
words = sorted({"".join(random.choice(syl) for _ in range(random.randint(1, 5)))
                for _ in range(60000)})
with open(sys.argv[1], "w") as f:
    for _ in range(60000):
        f.write(" ".join(random.choice(words) for _ in range(random.randint(5, 30))) + "\n")
