// `ftrain data inspect|verify|batches`: flags and printing only; the work is in data/.
//   inspect SRC  counts, tokens, tokenizer, a decoded sample row
//   verify SRC   every checksum; exit 1 naming each bad shard
//   batches SRC  the batches one rank would get (debugging, and the resume tests)
// Runs inside the torch-free `ftrain-data` binary (see sibling_exec.cc for why).
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/cli_util.h"
#include "cli/data_commands.h"
#include "core/env.h"
#include "data/format/format.h"
#include "data/format/hash.h"
#include "data/pack/pack.h"
#include "data/read/dataset.h"
#include "data/read/reader.h"
#include "data/read/verify_dataset.h"
#include "data/tokenize/tokenizer.h"

namespace ftrain::cli {

namespace po = boost::program_options;

namespace {

void AddHttpFlags(po::options_description* opts, data::HttpOptions* h) {
  opts->add_options()("http-retries", po::value<int>(&h->max_retries)->default_value(5),
                      "retries of a transient HTTP failure")(
      "http-backoff-ms", po::value<int>(&h->backoff_ms)->default_value(200),
      "first retry delay (doubles each retry)")(
      "http-stall-ms", po::value<int>(&h->stall_timeout_ms)->default_value(15000),
      "an HTTP transfer without progress for this long is retried");
}

// Reads the tokenizer stored with the dataset and checks it against the index.
StatusOr<std::unique_ptr<data::Tokenizer>> DatasetTokenizer(data::Dataset* ds,
                                                            const std::string& override_path) {
  const data::DatasetIndex& x = ds->index();
  std::unique_ptr<data::Tokenizer> tok;
  std::string where;
  if (!override_path.empty()) {
    where = override_path;
    FT_ASSIGN_OR_RETURN(tok, data::Tokenizer::Load(override_path, Env::Default()));
  } else {
    where = ds->source()->Where(x.tokenizer_file);
    FT_ASSIGN_OR_RETURN(std::string bytes, ds->source()->ReadFile(x.tokenizer_file));
    std::string config;
    if (!x.tokenizer_config_file.empty()) {
      FT_ASSIGN_OR_RETURN(config, ds->source()->ReadFile(x.tokenizer_config_file));
    }
    FT_ASSIGN_OR_RETURN(tok,
                        data::Tokenizer::FromBytes(std::move(bytes), where, std::move(config)));
  }
  if (tok->xxh3() != x.tokenizer_xxh3) {
    return Status::Corruption(where + ": tokenizer hash " + data::Hex64(tok->xxh3()) +
                              " does not match the index's tokenizer hash " +
                              data::Hex64(x.tokenizer_xxh3) +
                              " (the data was packed with another tokenizer)");
  }
  return tok;
}

int Inspect(int argc, char** argv) {
  const std::string program = "ftrain data inspect";
  std::string src, tokenizer;
  uint64_t row = 0;
  int max_chars = 400;
  data::HttpOptions http;
  po::options_description opts("ftrain data inspect DIR|URL [--row K]");
  opts.add_options()("help,h", "show this help")(
      "source", po::value<std::string>(&src)->required(),
      "packed directory, http(s) URL or s3://BUCKET/PREFIX")(
      "row", po::value<uint64_t>(&row)->default_value(0), "global row to decode as a sample")(
      "chars", po::value<int>(&max_chars)->default_value(400), "characters of the sample shown")(
      "tokenizer", po::value<std::string>(&tokenizer),
      "decode with this tokenizer (file or model directory; must match the index) instead of "
      "the stored one");
  AddHttpFlags(&opts, &http);
  po::positional_options_description pos;
  pos.add("source", 1);
  if (WantsHelp(argc, argv)) {
    std::cout << opts;
    return kExitOk;
  }
  po::variables_map vm;
  Status s = ParseFlags(program, argc, argv, opts, pos, &vm);
  if (!s.ok()) return Fail(program, s);
  auto ds = data::Dataset::Open(src, Env::Default(), http);
  if (!ds.ok()) return Fail(program, ds.status());
  const data::DatasetIndex& x = (*ds)->index();
  uint64_t in_bytes = 0;
  for (const auto& in : x.inputs) in_bytes += in.bytes;
  std::cout << "source:        " << src << "\n"
            << "data version:  " << x.data_version << "\n"
            << "rows:          " << x.num_rows << " of " << x.row_tokens() << " " << x.dtype_name()
            << " tokens (seq_len " << x.seq_len << ", " << x.row_bytes() << " bytes)\n"
            << "tokens:        " << x.num_rows * x.seq_len + 1 << " trainable of "
            << x.stats.stream_tokens << " in the stream (" << x.stats.dropped_tail_tokens
            << " dropped after the last row)\n"
            << "shards:        " << x.shards.size() << " x " << x.rows_per_shard
            << " rows (last: " << x.shards.back().rows << "), " << x.chunk_rows
            << " rows per checksummed chunk\n"
            << "documents:     " << x.stats.documents << " (" << x.stats.text_bytes / 1e6
            << " MB of text; skipped: " << x.stats.skipped_empty_documents << " empty, "
            << x.stats.skipped_invalid_lines << " invalid UTF-8 lines)\n"
            << "tokenizer:     " << x.tokenizer_file << " vocab " << x.vocab_size << ", bos "
            << x.bos_id << ", eos " << x.eos_id << ", xxh3 " << data::Hex64(x.tokenizer_xxh3)
            << " (" << x.tokenizer_type << ")\n"
            << "inputs:        " << x.inputs.size() << " files, " << in_bytes / 1e6 << " MB\n";
  if (!x.stats.bad_records.empty()) {
    std::cout << "bad records:   " << data::BadRecordSummary(x.stats) << ", listed in "
              << data::kBadRecordsFileName << "\n";
  }
  if (row >= x.num_rows) {
    return Fail(program,
                Status::InvalidArgument("--row " + std::to_string(row) + " is past the last row " +
                                        std::to_string(x.num_rows - 1)));
  }
  auto tok = DatasetTokenizer(ds->get(), tokenizer);
  if (!tok.ok()) return Fail(program, tok.status());
  std::vector<uint8_t> chunk;
  s = (*ds)->ReadChunk((*ds)->ChunkOfSample(row), &chunk);
  if (!s.ok()) return Fail(program, s);
  const uint8_t* p = chunk.data() + (row % x.chunk_rows) * x.row_bytes();
  std::vector<int> ids;
  for (uint64_t t = 0; t < x.row_tokens(); ++t) {
    uint32_t v = 0;
    for (uint32_t b = 0; b < x.token_bytes; ++b) v |= uint32_t(p[t * x.token_bytes + b]) << (8 * b);
    ids.push_back(static_cast<int>(v));
  }
  auto text = (*tok)->Decode(ids);
  if (!text.ok()) return Fail(program, text.status());
  std::string shown = text->substr(0, static_cast<size_t>(std::max(0, max_chars)));
  std::cout << "row " << row << " tokens: ";
  for (size_t i = 0; i < std::min<size_t>(ids.size(), 16); ++i) std::cout << ids[i] << " ";
  std::cout << (ids.size() > 16 ? "...\n" : "\n");
  std::cout << "row " << row << " text:   " << shown << (shown.size() < text->size() ? " ..." : "")
            << "\n";
  return kExitOk;
}

int Verify(int argc, char** argv) {
  const std::string program = "ftrain data verify";
  std::string src, tokenizer;
  data::HttpOptions http;
  po::options_description opts("ftrain data verify DIR|URL [--tokenizer MODEL]");
  opts.add_options()("help,h", "show this help")(
      "source", po::value<std::string>(&src)->required(),
      "packed directory, http(s) URL or s3://BUCKET/PREFIX")(
      "tokenizer", po::value<std::string>(&tokenizer),
      "also check that this tokenizer (file or model directory) is the one the data was packed "
      "with");
  AddHttpFlags(&opts, &http);
  po::positional_options_description pos;
  pos.add("source", 1);
  if (WantsHelp(argc, argv)) {
    std::cout << opts
              << "\nExit codes: 0 all good, 1 a shard or the tokenizer is bad (named),"
                 " 2 usage.\n";
    return kExitOk;
  }
  po::variables_map vm;
  Status s = ParseFlags(program, argc, argv, opts, pos, &vm);
  if (!s.ok()) return Fail(program, s);
  auto ds = data::Dataset::Open(src, Env::Default(), http);
  if (!ds.ok()) return Fail(program, ds.status());
  data::VerifyReport report;
  if (!tokenizer.empty()) {
    auto file =
        data::ResolveTokenizerFile(tokenizer, Env::Default());  // a model directory names its file
    if (!file.ok()) return Fail(program, file.status());
    tokenizer = *file;
  }
  s = data::VerifyDataset(ds->get(), tokenizer, &report, Env::Default(),
                          [](const std::string& name, bool ok) {
                            std::cout << name << ": " << (ok ? "ok" : "BAD") << "\n";
                          });
  if (!s.ok()) return Fail(program, s);
  for (const auto& p : report.problems) std::cerr << program << ": " << p << "\n";
  std::cout << (report.ok() ? "verify: OK: " : "verify: FAILED: ") << report.shards_checked
            << " shards, " << report.bytes_checked << " bytes checked, " << report.problems.size()
            << " problems; data version " << (*ds)->index().data_version << "\n";
  return report.ok() ? kExitOk : kExitBad;
}

int Batches(int argc, char** argv) {
  const std::string program = "ftrain data batches";
  data::ReaderOptions r;
  r.env = Env::Default();  // this process's files
  int steps = 4;
  std::string cursor_in, cursor_out;
  bool print_tokens = false;
  po::options_description opts("ftrain data batches DIR|URL --micro-batch M [--steps N]");
  opts.add_options()("help,h", "show this help")(
      "source", po::value<std::string>(&r.source)->required(),
      "packed directory, http(s) URL or s3://BUCKET/PREFIX")(
      "seed", po::value<uint64_t>(&r.seed)->default_value(0), "shuffle seed")(
      "dp-rank", po::value<int>(&r.dp_rank)->default_value(0), "data-parallel rank")(
      "dp-size", po::value<int>(&r.dp_size)->default_value(1), "data-parallel size")(
      "micro-batch", po::value<int>(&r.micro_batch)->required(), "rows per batch")(
      "steps", po::value<int>(&steps)->default_value(4), "batches to print")(
      "epoch", po::value<uint64_t>(&r.start_epoch)->default_value(0), "start epoch (no cursor)")(
      "window-chunks", po::value<int>(&r.window_chunks)->default_value(32), "shuffle window")(
      "prefetch", po::value<int>(&r.prefetch_depth)->default_value(4), "prefetch depth")(
      "io-threads", po::value<int>(&r.io_threads)->default_value(4), "parallel chunk reads")(
      "cursor-in", po::value<std::string>(&cursor_in), "resume from this cursor file")(
      "cursor-out", po::value<std::string>(&cursor_out), "write the cursor after the last batch")(
      "tokens", po::bool_switch(&print_tokens), "print every token");
  AddHttpFlags(&opts, &r.http);
  po::positional_options_description pos;
  pos.add("source", 1);
  if (WantsHelp(argc, argv)) {
    std::cout << opts
              << "\nOne line per batch: step, global position, epoch:sample of each row,"
                 " XXH3-64 of the tokens.\n";
    return kExitOk;
  }
  po::variables_map vm;
  Status s = ParseFlags(program, argc, argv, opts, pos, &vm);
  if (!s.ok()) return Fail(program, s);
  std::string blob;
  if (!cursor_in.empty()) {
    std::ifstream in(cursor_in);
    if (!in) return Fail(program, Status::NotFound(cursor_in + ": cannot read the cursor file"));
    std::getline(in, blob);
  }
  auto reader = data::TokenReader::Open(r, cursor_in.empty() ? nullptr : &blob);
  if (!reader.ok()) return Fail(program, reader.status());
  for (int i = 0; i < steps; ++i) {
    auto b = (*reader)->Next();
    if (!b.ok()) return Fail(program, b.status());
    std::ostringstream line;
    line << "step " << i << " pos " << b->position << " rows";
    for (int j = 0; j < b->rows; ++j) line << " " << b->epochs[j] << ":" << b->samples[j];
    line << " sum " << data::Hex64(data::Hash64(b->tokens.data(), b->tokens.size() * 4));
    if (print_tokens) {
      for (int32_t t : b->tokens) line << " " << t;
    }
    std::cout << line.str() << "\n";
  }
  if (!cursor_out.empty()) {
    std::ofstream out(cursor_out, std::ios::trunc);
    out << (*reader)->SaveCursor() << "\n";
    if (!out.flush()) {
      return Fail(program, Status::IOError("write " + cursor_out + " failed"));
    }
  }
  return kExitOk;
}

}  // namespace

int RunDataLocal(int argc, char** argv) {
  const std::string usage =
      "usage: ftrain data inspect|verify|batches SRC [flags]   ('ftrain data <cmd> --help')\n";
  if (argc < 2) {
    std::cerr << usage;
    return kExitUsage;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << usage;
    return kExitOk;
  }
  if (cmd == "inspect") return Inspect(argc - 1, argv + 1);
  if (cmd == "verify") return Verify(argc - 1, argv + 1);
  if (cmd == "batches") return Batches(argc - 1, argv + 1);
  std::cerr << "ftrain data: unknown command '" << cmd << "'\n" << usage;
  return kExitUsage;
}

}  // namespace ftrain::cli
