// Single-core tokenizer throughput of ftrain's Tokenizer (tokenizer.json or .model): reads the
// "text" field of every JSON Lines record into memory, encodes each document once untimed (so
// the per-thread word cache is as warm as the peer's after its own first pass), then times
// --repeat passes on one thread. Prints one JSON line: MB/s of UTF-8 text, tokens per pass.
// Usage: tokenizer_bench --tokenizer PATH --text FILE.jsonl [--repeat N]
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenize/tokenizer.h"

int main(int argc, char** argv) {
  std::string tok_path, text_path;
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--tokenizer") tok_path = argv[i + 1];
    if (a == "--text") text_path = argv[i + 1];
    if (a == "--repeat") repeat = std::stoi(argv[i + 1]);
  }
  if (tok_path.empty() || text_path.empty() || repeat < 1) {
    std::cerr << "usage: tokenizer_bench --tokenizer PATH --text FILE.jsonl [--repeat N]\n";
    return 2;
  }
  auto tok = ftrain::data::Tokenizer::Load(tok_path, ftrain::Env::Default());
  if (!tok.ok()) {
    std::cerr << "tokenizer_bench: " << tok.status().message() << "\n";
    return 2;
  }
  std::ifstream in(text_path);
  if (!in) {
    std::cerr << "tokenizer_bench: cannot read " << text_path << "\n";
    return 2;
  }
  std::vector<std::string> docs;
  uint64_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    docs.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
    bytes += docs.back().size();
  }
  std::vector<int> ids;
  uint64_t tokens = 0;
  for (const auto& d : docs) {  // warm-up pass, untimed
    if (!(*tok)->Encode(d, &ids).ok()) return 1;
    tokens += ids.size();
  }
  auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  for (int r = 0; r < repeat; ++r) {
    for (const auto& d : docs) {
      if (!(*tok)->Encode(d, &ids).ok()) return 1;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;
  // mb_s is per CPU second of the process (the machine may be shared); wall_mb_s too.
  std::printf(
      "{\"impl\":\"ftrain\",\"type\":\"%s\",\"docs\":%zu,\"mb\":%.3f,\"tokens\":%llu,"
      "\"cpu_s\":%.3f,\"mb_s\":%.3f,\"wall_mb_s\":%.3f}\n",
      (*tok)->type(), docs.size(), bytes / 1e6, static_cast<unsigned long long>(tokens), cpu,
      bytes * double(repeat) / 1e6 / cpu, bytes * double(repeat) / 1e6 / s);
  return 0;
}
