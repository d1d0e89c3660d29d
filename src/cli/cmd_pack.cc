// `ftrain pack`: flags only; the packer lives in data/pack. Runs inside the torch-free
// `ftrain-data` binary (see sibling_exec.cc for why).
#include <iostream>

#include "cli/cli_util.h"
#include "cli/data_commands.h"
#include "core/env.h"
#include "core/log.h"
#include "data/pack/pack.h"
#include "data/pack/pack_parts.h"

namespace ftrain::cli {

namespace po = boost::program_options;

namespace {

int PackOnePart(const std::string& program, const data::PackOptions& o, const std::string& id) {
  data::PartId part;
  Status s = data::ParsePartId(id, &part);
  if (!s.ok()) return Fail(program, s);
  StatusOr<data::PartResult> r = data::PackPart(o, part);
  if (!r.ok()) return Fail(program, r.status());
  std::cout << (r->skipped ? "part " + part.Name() + " was already packed"
                           : "packed part " + part.Name())
            << ": " << r->stats.documents << " documents, " << r->tokens << " tokens in "
            << o.out_dir;
  const std::string bad = data::BadRecordSummary(r->stats);
  if (!bad.empty()) std::cout << "; " << bad;
  std::cout << "\n";
  return kExitOk;
}

// `ftrain pack merge OUT PART_DIR...`
int RunPackMerge(int argc, char** argv) {
  const std::string program = "ftrain pack merge";
  data::MergeOptions m;
  m.env = Env::Default();  // this process's files
  po::options_description opts("ftrain pack merge OUT PART_DIR...");
  opts.add_options()("help,h", "show this help")("force", po::bool_switch(&m.force),
                                                 "replace a packed dataset already in OUT");
  po::options_description all;  // with the positional arguments, left out of --help
  all.add(opts).add_options()("args", po::value<std::vector<std::string>>(), "OUT PART_DIR...");
  po::positional_options_description pos;
  pos.add("args", -1);
  if (WantsHelp(argc, argv)) {
    std::cout << opts
              << "\nJoins the parts written by `ftrain pack --part I/N --out PART_DIR` into OUT:"
                 " the dataset a\nsingle `ftrain pack` of the same inputs writes, byte for"
                 " byte. Exit codes: 0 ok,\n1 bad part data, 2 usage (parts of different"
                 " packs, a missing or unfinished part).\n";
    return kExitOk;
  }
  po::variables_map vm;
  Status s = ParseFlags(program, argc, argv, all, pos, &vm);
  if (!s.ok()) return Fail(program, s);
  std::vector<std::string> args;
  if (vm.count("args")) args = vm["args"].as<std::vector<std::string>>();
  if (args.size() < 2) {
    return Fail(program, Status::InvalidArgument("give OUT and at least one part directory"));
  }
  m.out_dir = args[0];
  m.parts.assign(args.begin() + 1, args.end());
  StatusOr<data::PackResult> r = data::MergeParts(m);
  if (!r.ok()) return Fail(program, r.status());
  const data::DatasetIndex& x = r->index;
  std::cout << "merged " << m.parts.size() << " parts: " << x.stats.documents << " documents into "
            << x.shards.size() << " shards (" << x.num_rows << " rows) in " << m.out_dir
            << "; data version " << x.data_version;
  const std::string bad = data::BadRecordSummary(x.stats);
  if (!bad.empty()) std::cout << "; " << bad << ", see " << m.out_dir << "/bad-records.jsonl";
  std::cout << "\n";
  return kExitOk;
}

// The flags of `ftrain pack` that are not PackOptions fields as they are parsed.
struct PackFlags {
  int vocab = 0, seq_len = 0;
  double sample_mb = 4;
  std::string progress = "auto";
  std::string on_bad = "fail";
  std::string part;
};

constexpr char kPackHelp[] =
    "\nInputs: plain text (one file = one document) and JSON Lines (.jsonl,"
    " .ndjson, .json: one\ndocument per line), optionally .gz or .zst;"
    " directories are searched recursively for\ntext-like names. Writes"
    " DIR/shard-*.bin, the tokenizer (tokenizer.model, or tokenizer.json and\n"
    "tokenizer_config.json) and DIR/index.json (last).\n"
    "Many processes: --part I/N per process, then `ftrain pack merge OUT PARTS...`"
    " (docs/data.md).\nExit codes: 0 ok, 1 bad input data, 2 usage.\n";

// Every flag of `ftrain pack`, parsed into `o` or (when it needs checking first) into `f`.
po::options_description PackFlagOptions(data::PackOptions* o, PackFlags* f) {
  po::options_description opts(
      "ftrain pack (--tokenizer MODEL | --train-tokenizer --vocab-size V) --seq-len L --out DIR "
      "INPUT...");
  opts.add_options()("help,h", "show this help")(
      "tokenizer", po::value<std::string>(&o->tokenizer_path),
      "tokenizer to use: a SentencePiece .model, a Hugging Face tokenizer.json (BOS/EOS from the "
      "tokenizer_config.json beside it), or a model directory holding either")(
      "train-tokenizer", po::bool_switch(&o->train_tokenizer),
      "train a SentencePiece model on the inputs first (saved as DIR/tokenizer.model)")(
      "vocab-size", po::value<int>(&f->vocab), "vocabulary size for --train-tokenizer")(
      "tokenizer-type", po::value<std::string>(&o->train.model_type)->default_value("unigram"),
      "unigram or bpe, for --train-tokenizer")(
      "tokenizer-sample-mb", po::value<double>(&f->sample_mb)->default_value(4),
      "MB of text lines sampled evenly from the inputs to train the tokenizer on")(
      "seq-len", po::value<int>(&f->seq_len)->required(),
      "L: rows hold L+1 tokens (inputs and shifted targets)")(
      "out", po::value<std::string>(&o->out_dir)->required(), "output directory")(
      "shard-mb", po::value<double>(&o->shard_mb)->default_value(256),
      "shard size in MiB (every shard the same number of rows, the last one fewer)")(
      "shard-rows", po::value<uint64_t>(&o->shard_rows)->default_value(0),
      "rows per shard (overrides --shard-mb)")(
      "chunk-kb", po::value<double>(&o->chunk_kb)->default_value(1024),
      "checksummed read unit in KiB; the reader reads whole chunks")(
      "chunk-rows", po::value<uint64_t>(&o->chunk_rows)->default_value(0),
      "rows per chunk (overrides --chunk-kb)")(
      "text-field", po::value<std::string>(&o->docs.text_field)->default_value("text"),
      "the string field of each JSON Lines record")(
      "threads", po::value<int>(&o->threads)->default_value(0), "tokenizer threads (0: all cores)")(
      "skip-invalid-utf8", po::bool_switch(&o->docs.skip_invalid_utf8),
      "drop lines that are not UTF-8 (counted) instead of failing")(
      "on-bad-record", po::value<std::string>(&f->on_bad)->default_value("fail"),
      "fail: stop at the first bad record naming file:line and the reason; skip: count bad "
      "records by reason (malformed JSON, missing or non-string field, invalid UTF-8, "
      "undecodable compressed block) and list them in DIR/bad-records.jsonl")(
      "force", po::bool_switch(&o->force), "replace a packed dataset already in --out")(
      "part", po::value<std::string>(&f->part),
      "I/N: pack only part I (0-based) of N into --out, for `ftrain pack merge` (docs/data.md)")(
      "progress", po::value<std::string>(&f->progress)->default_value("auto"),
      "auto | tty | plain | none")("progress-s",
                                   po::value<double>(&o->progress_interval_s)->default_value(10),
                                   "seconds between plain progress lines")(
      "input", po::value<std::vector<std::string>>(&o->inputs),
      "input files, directories or s3://BUCKET/PREFIX");
  return opts;
}

// Checks the flags parsed into `f` and sets the options they stand for.
Status ApplyPackFlags(const PackFlags& f, data::PackOptions* o) {
  if (f.seq_len <= 0) return Status::InvalidArgument("--seq-len must be > 0");
  o->seq_len = static_cast<uint32_t>(f.seq_len);
  if (o->train_tokenizer && f.vocab <= 0) {
    return Status::InvalidArgument("--train-tokenizer needs --vocab-size V");
  }
  o->train.vocab_size = f.vocab;
  if (!(f.sample_mb > 0)) return Status::InvalidArgument("--tokenizer-sample-mb must be > 0");
  o->train.sample_bytes = static_cast<uint64_t>(f.sample_mb * 1e6);
  if (f.on_bad != "fail" && f.on_bad != "skip") {
    return Status::InvalidArgument("--on-bad-record must be fail or skip");
  }
  o->docs.skip_bad_records = f.on_bad == "skip";
  if (f.progress == "auto") {
    o->progress = data::ProgressMeter::Mode::kAuto;
  } else if (f.progress == "tty") {
    o->progress = data::ProgressMeter::Mode::kTerminal;
  } else if (f.progress == "plain") {
    o->progress = data::ProgressMeter::Mode::kPlain;
  } else if (f.progress == "none") {
    o->progress = data::ProgressMeter::Mode::kNone;
  } else {
    return Status::InvalidArgument("--progress must be auto, tty, plain or none");
  }
  return Status::Ok();
}

}  // namespace

int RunPackLocal(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "merge") return RunPackMerge(argc - 1, argv + 1);
  const std::string program = "ftrain pack";
  data::PackOptions o;
  o.env = Env::Default();  // this process's files
  PackFlags f;
  po::options_description opts = PackFlagOptions(&o, &f);
  po::positional_options_description pos;
  pos.add("input", -1);
  if (WantsHelp(argc, argv)) {
    std::cout << opts << kPackHelp;
    return kExitOk;
  }
  po::variables_map vm;
  Status s = ParseFlags(program, argc, argv, opts, pos, &vm);
  if (s.ok()) s = ApplyPackFlags(f, &o);
  if (!s.ok()) return Fail(program, s);

  if (!f.part.empty()) return PackOnePart(program, o, f.part);
  StatusOr<data::PackResult> r = data::Pack(o);
  if (!r.ok()) return Fail(program, r.status());
  const data::DatasetIndex& x = r->index;
  std::cout << "packed " << x.stats.documents << " documents into " << x.shards.size()
            << " shards of " << x.rows_per_shard << " rows (" << x.num_rows << " rows of "
            << x.row_tokens() << " " << x.dtype_name() << " tokens) in " << o.out_dir
            << "; data version " << x.data_version;
  const std::string bad = data::BadRecordSummary(x.stats);
  if (!bad.empty()) std::cout << "; " << bad << ", see " << o.out_dir << "/bad-records.jsonl";
  std::cout << "\n";
  return kExitOk;
}

}  // namespace ftrain::cli
