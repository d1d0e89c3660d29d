// Planning a part, packing it into a token stream, and merging the streams (pack_parts.h).
#include "data/pack/pack_parts.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/thread_pool.h"
#include "data/format/format.h"
#include "data/format/hash.h"
#include "data/pack/pack_steps.h"

namespace ftrain::data {
namespace {

using nlohmann::json;

constexpr char kPartFormat[] = "ftrain-pack-part";
constexpr int kPartVersion = 1;

// What a part reads: files (with their slices) and what becomes of each file's inputs entry.
enum class Entry { kDrop, kKeep, kWholeHash };
struct PartPlan {
  std::vector<InputFile> files;
  std::vector<FileSlice> slices;
  std::vector<Entry> entries;
  uint64_t bytes = 0;  // stored bytes read
};

uint64_t RangeStart(uint64_t total, PartId p, uint32_t i) {
  return uint64_t((unsigned __int128)total * i / p.count);
}

StatusOr<PartPlan> PlanPart(const InputScan& scan, PartId p) {
  const uint64_t a = RangeStart(scan.total_bytes, p, p.index);
  const uint64_t b =
      p.index + 1 < p.count ? RangeStart(scan.total_bytes, p, p.index + 1) : UINT64_MAX;
  PartPlan plan;
  auto add = [&](const InputFile& f, FileSlice s, Entry e) {
    plan.files.push_back(f);
    plan.slices.push_back(s);
    plan.entries.push_back(e);
    plan.bytes += s.whole() ? f.bytes : s.end - s.begin;
  };
  uint64_t start = 0;
  for (const InputFile& f : scan.files) {
    const uint64_t z = f.bytes, s = start;
    start += z;
    const bool owns_start = a <= s && s < b;
    const bool local = f.path.find("://") == std::string::npos;  // pread needs a local file
    const bool splittable =
        local && f.compression == Compression::kNone && f.format == InputFormat::kJsonl && z > 0;
    if (!splittable) {
      if (owns_start) add(f, FileSlice(), Entry::kKeep);
      continue;
    }
    if (a >= s + z || b <= s) continue;
    FT_ASSIGN_OR_RETURN(uint64_t lb, LineStartAtOrAfter(f.path, std::max(a, s) - s, z));
    FT_ASSIGN_OR_RETURN(uint64_t ub, LineStartAtOrAfter(f.path, std::min(b, s + z) - s, z));
    if (lb >= ub) continue;  // one line spans the whole range: its start lies before it
    if (lb == 0 && ub == z) {
      add(f, FileSlice(), Entry::kKeep);
      continue;
    }
    FileSlice slice;
    slice.begin = lb;
    slice.end = ub;
    FT_ASSIGN_OR_RETURN(slice.lines_before, CountNewlines(f.path, lb));
    add(f, slice, owns_start ? Entry::kWholeHash : Entry::kDrop);
  }
  return plan;
}

// What makes two parts parts of the same pack: N, the shape, the tokenizer, the options that
// change what is read, and every input's path and size.
std::string PlanHash(const InputScan& scan, const DatasetIndex& x, const Tokenizer& tok,
                     const PackOptions& o, uint32_t count) {
  std::string c =
      std::string(kPartFormat) + " v" + std::to_string(kPartVersion) + "\nparts " +
      std::to_string(count) + "\nseq_len " + std::to_string(x.seq_len) + "\ntoken_bytes " +
      std::to_string(x.token_bytes) + "\nchunk_rows " + std::to_string(x.chunk_rows) +
      "\nrows_per_shard " + std::to_string(x.rows_per_shard) + "\ntokenizer " + Hex64(tok.xxh3()) +
      " " + Hex64(Hash64(tok.config_bytes().data(), tok.config_bytes().size())) + "\ntext_field " +
      o.docs.text_field + "\nskip " + std::to_string(o.docs.skip_bad_records) +
      std::to_string(o.docs.skip_invalid_utf8) + "\n";
  for (const InputFile& f : scan.files) {
    c += "input " + std::to_string(f.bytes) + " " + f.path + "\n";
  }
  return Hex64(Hash64(c.data(), c.size()));
}

// part.json.
struct PartManifest {
  PartId part;
  std::string plan;
  DatasetIndex shape;  // seq_len, token_bytes, chunk_rows, rows_per_shard, tokenizer fields
  uint64_t input_files = 0, input_bytes = 0;  // of the whole pack
  uint64_t tokens = 0, tokens_xxh3 = 0;
  PackStats stats;
  std::vector<InputEntry> inputs;  // the files whose first byte lies in this part

  std::string ToJson() const;
  static StatusOr<PartManifest> Parse(const std::string& text, const std::string& where);
};

std::string PartManifest::ToJson() const {
  const DatasetIndex& x = shape;
  json j = {{"format", kPartFormat},
            {"version", kPartVersion},
            {"part", part.index},
            {"parts", part.count},
            {"plan", plan},
            {"seq_len", x.seq_len},
            {"token_bytes", x.token_bytes},
            {"chunk_rows", x.chunk_rows},
            {"rows_per_shard", x.rows_per_shard},
            {"tokenizer",
             {{"type", x.tokenizer_type},
              {"file", x.tokenizer_file},
              {"xxh3", Hex64(x.tokenizer_xxh3)},
              {"config_file", x.tokenizer_config_file},
              {"vocab_size", x.vocab_size},
              {"bos_id", x.bos_id},
              {"eos_id", x.eos_id}}},
            {"input_files", input_files},
            {"input_bytes", input_bytes},
            {"tokens", tokens},
            {"tokens_xxh3", Hex64(tokens_xxh3)},
            {"stats",
             {{"documents", stats.documents},
              {"text_bytes", stats.text_bytes},
              {"skipped_empty_documents", stats.skipped_empty_documents},
              {"skipped_invalid_lines", stats.skipped_invalid_lines},
              {"bad_records", stats.bad_records}}}};
  j["inputs"] = json::array();
  for (const auto& in : inputs) {
    j["inputs"].push_back({{"path", in.path}, {"bytes", in.bytes}, {"xxh3", Hex64(in.xxh3)}});
  }
  return j.dump(2) + "\n";
}

uint64_t HexField(const json& j, const char* key) {
  uint64_t v = 0;
  if (!ParseHex64(j.at(key).get<std::string>(), &v)) {
    throw std::runtime_error(std::string("field '") + key + "' is not 16 hex digits");
  }
  return v;
}

StatusOr<PartManifest> PartManifest::Parse(const std::string& text, const std::string& where) {
  PartManifest m;
  try {
    json j = json::parse(text);
    if (j.at("format").get<std::string>() != kPartFormat || j.at("version") != kPartVersion) {
      return Status::Corruption(where + ": not a version " + std::to_string(kPartVersion) + " " +
                                kPartFormat + " file");
    }
    m.part.index = j.at("part").get<uint32_t>();
    m.part.count = j.at("parts").get<uint32_t>();
    m.plan = j.at("plan").get<std::string>();
    DatasetIndex& x = m.shape;
    x.seq_len = j.at("seq_len").get<uint32_t>();
    x.token_bytes = j.at("token_bytes").get<uint32_t>();
    x.chunk_rows = j.at("chunk_rows").get<uint32_t>();
    x.rows_per_shard = j.at("rows_per_shard").get<uint64_t>();
    const json& t = j.at("tokenizer");
    x.tokenizer_type = t.at("type").get<std::string>();
    x.tokenizer_file = t.at("file").get<std::string>();
    x.tokenizer_xxh3 = HexField(t, "xxh3");
    x.tokenizer_config_file = t.at("config_file").get<std::string>();
    x.vocab_size = t.at("vocab_size").get<uint32_t>();
    x.bos_id = t.at("bos_id").get<int>();
    x.eos_id = t.at("eos_id").get<int>();
    m.input_files = j.at("input_files").get<uint64_t>();
    m.input_bytes = j.at("input_bytes").get<uint64_t>();
    m.tokens = j.at("tokens").get<uint64_t>();
    m.tokens_xxh3 = HexField(j, "tokens_xxh3");
    const json& s = j.at("stats");
    m.stats.documents = s.at("documents").get<uint64_t>();
    m.stats.text_bytes = s.at("text_bytes").get<uint64_t>();
    m.stats.skipped_empty_documents = s.at("skipped_empty_documents").get<uint64_t>();
    m.stats.skipped_invalid_lines = s.at("skipped_invalid_lines").get<uint64_t>();
    m.stats.bad_records = s.at("bad_records").get<std::map<std::string, uint64_t>>();
    for (const json& in : j.at("inputs")) {
      m.inputs.push_back(
          {in.at("path").get<std::string>(), in.at("bytes").get<uint64_t>(), HexField(in, "xxh3")});
    }
  } catch (const std::exception& e) {
    return Status::Corruption(where + ": " + e.what());
  }
  if (m.part.count == 0 || m.part.index >= m.part.count ||
      (m.shape.token_bytes != 2 && m.shape.token_bytes != 4)) {
    return Status::Corruption(where + ": part " + m.part.Name() + " or token_bytes " +
                              std::to_string(m.shape.token_bytes) + " out of range");
  }
  for (const std::string& name : {m.shape.tokenizer_file, m.shape.tokenizer_config_file}) {
    if (!name.empty()) FT_RETURN_IF_ERROR(ValidateFileName(name, where));
  }
  return m;
}

// tokens.bin: the stream as the dataset stores tokens (little-endian, token_bytes each),
// written as tokens.bin.partial and renamed when complete.
class TokenFileSink : public TokenSink {
 public:
  TokenFileSink(Env* env, std::string path, uint32_t token_bytes)
      : env_(env), path_(std::move(path)), token_bytes_(token_bytes) {}
  Status Open() {
    FT_ASSIGN_OR_RETURN(file_, env_->NewWritableFile(path_ + ".partial"));
    return Status::Ok();
  }
  Status Add(const std::vector<uint32_t>& tokens) override {
    buf_.clear();
    for (uint32_t v : tokens) {
      for (uint32_t b = 0; b < token_bytes_; ++b) buf_.push_back(uint8_t(v >> (8 * b)));
    }
    hash_.Update(buf_.data(), buf_.size());
    tokens_ += tokens.size();
    return file_->Append(buf_.data(), buf_.size());
  }
  Status Commit() {
    FT_RETURN_IF_ERROR(file_->Sync());
    FT_RETURN_IF_ERROR(file_->Close());
    FT_RETURN_IF_ERROR(env_->Rename(path_ + ".partial", path_));
    return env_->SyncDir(Dirname(path_));
  }
  uint64_t tokens() const { return tokens_; }
  uint64_t xxh3() const { return hash_.Digest(); }

 private:
  Env* env_;
  std::string path_;
  uint32_t token_bytes_;
  std::unique_ptr<WritableFile> file_;
  std::vector<uint8_t> buf_;
  Hash64Stream hash_;
  uint64_t tokens_ = 0;
};

StatusOr<PartManifest> LoadManifest(Env* env, const std::string& dir) {
  const std::string path = JoinPath(dir, kPartFileName);
  if (!env->FileExists(path)) {
    return Status::FailedPrecondition(
        dir + ": no " + kPartFileName +
        ": the part is unfinished (or this is not a part directory); rerun its "
        "`ftrain pack --part I/N` (finished parts are kept)");
  }
  std::string text;
  FT_RETURN_IF_ERROR(env->ReadFile(path, &text));
  return PartManifest::Parse(text, path);
}

// Whether dir holds this part of this pack, finished, with the tokens part.json describes.
StatusOr<bool> FinishedPart(Env* env, const std::string& dir, const std::string& plan, PartId p,
                            bool force, PartManifest* out) {
  if (!env->FileExists(JoinPath(dir, kPartFileName))) return false;
  StatusOr<PartManifest> m = LoadManifest(env, dir);
  if (!m.ok()) {
    FT_LOG(Warning) << m.status().message() << "; packing the part again";
    return false;
  }
  if (m->plan != plan || m->part.index != p.index || m->part.count != p.count) {
    if (force) return false;
    return Status::FailedPrecondition(
        dir + " holds part " + m->part.Name() + " of another pack (other inputs, tokenizer, " +
        "options or part count); pass --force to redo part " + p.Name() + " there");
  }
  const std::string tokens = JoinPath(dir, kPartTokensFileName);
  StatusOr<uint64_t> h = HashWholeFile(tokens, m->tokens * m->shape.token_bytes);
  if (!h.ok() || *h != m->tokens_xxh3) {
    FT_LOG(Warning) << tokens << " does not match " << kPartFileName << " ("
                    << (h.ok() ? "checksum differs" : h.status().message())
                    << "); packing the part again";
    return false;
  }
  *out = std::move(*m);
  return true;
}

// Removes part.json first (the part is unfinished from then on), then what a part writes.
Status PreparePartDir(Env* env, const std::string& dir) {
  FT_RETURN_IF_ERROR(CreateDirs(env, dir));
  if (env->FileExists(JoinPath(dir, kIndexFileName))) {
    return Status::FailedPrecondition(dir + " holds a packed dataset (" + kIndexFileName +
                                      "); give each part a directory of its own");
  }
  for (const std::string& name :
       {std::string(kPartFileName), std::string(kPartTokensFileName),
        std::string(kPartTokensFileName) + ".partial", std::string(kBadRecordsFileName),
        std::string(kTokenizerFileName), std::string(kHfTokenizerFileName),
        std::string(kHfTokenizerConfigFileName)}) {
    const std::string path = JoinPath(dir, name);
    if (env->FileExists(path)) FT_RETURN_IF_ERROR(env->RemoveFile(path));
  }
  return Status::Ok();
}

}  // namespace

Status ParsePartId(const std::string& text, PartId* out) {
  const size_t slash = text.find('/');
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 6 && std::all_of(s.begin(), s.end(), ::isdigit);
  };
  if (slash == std::string::npos || !digits(text.substr(0, slash)) ||
      !digits(text.substr(slash + 1))) {
    return Status::InvalidArgument("--part must be I/N (0-based part I of N), got '" + text + "'");
  }
  out->index = uint32_t(std::stoul(text.substr(0, slash)));
  out->count = uint32_t(std::stoul(text.substr(slash + 1)));
  if (out->count == 0 || out->count > 100000 || out->index >= out->count) {
    return Status::InvalidArgument("--part " + text + ": need 0 <= I < N <= 100000");
  }
  return Status::Ok();
}

namespace {

// Tokenizes the part's slice of the inputs into dir; part.json last. m holds the shape and
// plan on entry, everything on return.
Status WritePart(Env* env, const PackOptions& o, const InputScan& scan, const Tokenizer& tok,
                 int threads, PartManifest* m, uint64_t* read_bytes) {
  FT_RETURN_IF_ERROR(PreparePartDir(env, o.out_dir));
  FT_ASSIGN_OR_RETURN(PartPlan plan, PlanPart(scan, m->part));
  *read_bytes = plan.bytes;
  FT_LOG(Info) << "pack: part " << m->part.Name() << " reads " << plan.files.size() << " files ("
               << plan.bytes / 1e6 << " MB of " << scan.total_bytes / 1e6 << " MB)";
  // Whole-file hashes of the split files this part starts, read while it tokenizes.
  std::map<size_t, std::future<StatusOr<uint64_t>>> hashes;
  for (size_t i = 0; i < plan.files.size(); ++i) {
    if (plan.entries[i] != Entry::kWholeHash) continue;
    const InputFile f = plan.files[i];
    hashes[i] = std::async(std::launch::async, [f] { return HashWholeFile(f.path, f.bytes); });
  }
  TokenFileSink sink(env, JoinPath(o.out_dir, kPartTokensFileName), m->shape.token_bytes);
  FT_RETURN_IF_ERROR(sink.Open());
  ProgressMeter progress("pack part " + m->part.Name(), plan.bytes, o.progress,
                         o.progress_interval_s);
  std::vector<InputEntry> read;
  std::vector<BadRecord> bad;
  Status s = TokenizeInputs(plan.files, plan.slices, o, tok, threads, &sink, &progress, &m->stats,
                            &read, &bad);
  progress.Update(plan.bytes, m->stats.text_bytes, m->stats.documents, /*force=*/true);
  progress.Finish();
  if (s.ok() && read.size() != plan.files.size()) {
    s = Status::Internal("the reader finished " + std::to_string(read.size()) + " of " +
                         std::to_string(plan.files.size()) + " files");
  }
  for (auto& [i, h] : hashes) {
    StatusOr<uint64_t> v = h.get();
    if (s.ok() && !v.ok()) s = v.status();
    if (s.ok()) read[i] = {plan.files[i].path, plan.files[i].bytes, *v};
  }
  FT_RETURN_IF_ERROR(s);
  for (size_t i = 0; i < read.size(); ++i) {
    if (plan.entries[i] != Entry::kDrop) m->inputs.push_back(read[i]);
  }
  FT_RETURN_IF_ERROR(sink.Commit());
  m->tokens = sink.tokens();
  m->tokens_xxh3 = sink.xxh3();
  if (!bad.empty()) {
    FT_RETURN_IF_ERROR(
        WriteFileAtomic(env, JoinPath(o.out_dir, kBadRecordsFileName), BadRecordsJsonl(bad)));
  }
  FT_RETURN_IF_ERROR(
      WriteFileAtomic(env, JoinPath(o.out_dir, m->shape.tokenizer_file), tok.model_bytes()));
  if (!m->shape.tokenizer_config_file.empty()) {
    FT_RETURN_IF_ERROR(WriteFileAtomic(env, JoinPath(o.out_dir, m->shape.tokenizer_config_file),
                                       tok.config_bytes()));
  }
  return WriteFileAtomic(env, JoinPath(o.out_dir, kPartFileName), m->ToJson());  // the commit
}

}  // namespace

StatusOr<PartResult> PackPart(const PackOptions& o, PartId part) {
  FT_RETURN_IF_ERROR(o.Validate());
  if (o.train_tokenizer) {
    return Status::InvalidArgument(
        "--part needs --tokenizer MODEL: every part must use the same tokenizer (train one "
        "first with a single `ftrain pack --train-tokenizer` on a sample of the inputs)");
  }
  auto t0 = std::chrono::steady_clock::now();
  FT_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::Load(o.tokenizer_path, o.env));
  InputScan scan;
  FT_RETURN_IF_ERROR(ScanInputs(o.inputs, &scan));
  LogInputs(scan);
  const int threads = ResolveThreads(o.threads);
  Env* env = o.env;
  PartManifest m;
  m.part = part;
  m.shape = PackShape(o, *tok, threads);
  m.plan = PlanHash(scan, m.shape, *tok, o, part.count);
  m.input_files = scan.files.size();
  m.input_bytes = scan.total_bytes;
  PartResult r;
  PartManifest done;
  FT_ASSIGN_OR_RETURN(r.skipped, FinishedPart(env, o.out_dir, m.plan, part, o.force, &done));
  if (r.skipped) {
    FT_LOG(Info) << "pack: part " << part.Name() << " is already finished in " << o.out_dir
                 << " (part.json and tokens.bin check out); not packing it again";
    m = std::move(done);
  } else {
    FT_RETURN_IF_ERROR(WritePart(env, o, scan, *tok, threads, &m, &r.input_bytes));
  }
  r.tokens = m.tokens;
  r.stats = m.stats;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

namespace {

// The parts' manifests and directories in part order; refuses mixed, repeated, missing or
// unfinished parts.
Status LoadParts(Env* env, const std::vector<std::string>& dirs, std::vector<PartManifest>* parts,
                 std::vector<std::string>* part_dirs) {
  if (dirs.empty()) return Status::InvalidArgument("no part directories given");
  std::vector<PartManifest> ms;
  for (const std::string& dir : dirs) {
    FT_ASSIGN_OR_RETURN(PartManifest m, LoadManifest(env, dir));
    const PartManifest& f = ms.empty() ? m : ms[0];
    auto differ = [&](const std::string& what) {
      return Status::FailedPrecondition(dir + " is part " + m.part.Name() +
                                        " of another pack than " + dirs[0] + " (" + what +
                                        " differ); merge the parts of one pack");
    };
    if (m.part.count != f.part.count) return differ("part counts");
    if (m.shape.seq_len != f.shape.seq_len) return differ("--seq-len values");
    if (m.shape.tokenizer_xxh3 != f.shape.tokenizer_xxh3) return differ("tokenizers");
    if (m.plan != f.plan) return differ("inputs or options");
    ms.push_back(std::move(m));
  }
  const uint32_t n = ms[0].part.count;
  parts->assign(n, PartManifest());
  part_dirs->assign(n, "");
  for (size_t i = 0; i < ms.size(); ++i) {
    const uint32_t k = ms[i].part.index;
    if (!(*part_dirs)[k].empty()) {
      return Status::FailedPrecondition("part " + ms[i].part.Name() +
                                        " is given twice: " + (*part_dirs)[k] + " and " + dirs[i]);
    }
    (*part_dirs)[k] = dirs[i];
    (*parts)[k] = std::move(ms[i]);
  }
  for (uint32_t k = 0; k < n; ++k) {
    if ((*part_dirs)[k].empty()) {
      return Status::FailedPrecondition("part " + std::to_string(k) + "/" + std::to_string(n) +
                                        " is missing: give all " + std::to_string(n) +
                                        " part directories");
    }
  }
  return Status::Ok();
}

// Feeds dir's tokens.bin to the cutter, checking it against part.json as it goes.
Status StreamPart(const std::string& dir, const PartManifest& m, ShardCutter* cutter) {
  const std::string path = JoinPath(dir, kPartTokensFileName);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FailedPrecondition("open " + path + ": " + std::strerror(errno));
  const uint32_t tb = m.shape.token_bytes;
  std::vector<uint8_t> buf(size_t(1 << 20) * tb);
  std::vector<uint32_t> tokens;
  Hash64Stream hash;
  uint64_t total = 0;
  size_t have = 0;
  Status s;
  for (;;) {
    ssize_t n = ::read(fd, buf.data() + have, buf.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) s = Status::IOError("read " + path + ": " + std::strerror(errno));
    if (n <= 0) break;
    hash.Update(buf.data() + have, size_t(n));
    have += size_t(n);
    const size_t whole = have / tb;
    tokens.resize(whole);
    for (size_t i = 0; i < whole; ++i) {
      uint32_t v = 0;
      for (uint32_t b = 0; b < tb; ++b) v |= uint32_t(buf[i * tb + b]) << (8 * b);
      tokens[i] = v;
    }
    total += whole;
    s = cutter->Add(tokens);
    if (!s.ok()) break;
    std::memmove(buf.data(), buf.data() + whole * tb, have - whole * tb);
    have -= whole * tb;
  }
  ::close(fd);
  FT_RETURN_IF_ERROR(s);
  if (have != 0 || total != m.tokens || hash.Digest() != m.tokens_xxh3) {
    return Status::Corruption(path + " does not match its " + kPartFileName + " (" +
                              std::to_string(total) + " tokens, " + std::to_string(m.tokens) +
                              " expected, or a checksum mismatch); rerun part " + m.part.Name() +
                              " (it is packed again)");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<PackResult> MergeParts(const MergeOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  Env* env = o.env;
  if (o.out_dir.empty()) return Status::InvalidArgument("the output directory is required");
  if (env == nullptr) return Status::InvalidArgument("MergeOptions.env is not set");
  std::vector<PartManifest> parts;
  std::vector<std::string> dir_of;
  FT_RETURN_IF_ERROR(LoadParts(env, o.parts, &parts, &dir_of));
  DatasetIndex x = parts[0].shape;
  DatasetOutputs out;
  out.input_files = parts[0].input_files;
  out.input_bytes = parts[0].input_bytes;
  const std::string& first = dir_of[0];
  FT_RETURN_IF_ERROR(env->ReadFile(JoinPath(first, x.tokenizer_file), &out.model_bytes));
  if (Hash64(out.model_bytes.data(), out.model_bytes.size()) != x.tokenizer_xxh3) {
    return Status::Corruption(JoinPath(first, x.tokenizer_file) +
                              ": not the tokenizer its part.json names (checksum differs)");
  }
  if (!x.tokenizer_config_file.empty()) {
    FT_RETURN_IF_ERROR(env->ReadFile(JoinPath(first, x.tokenizer_config_file), &out.config_bytes));
  }
  FT_RETURN_IF_ERROR(PrepareOutDir(env, o.out_dir, o.force));
  ShardCutter cutter(env, o.out_dir, x);
  size_t listed = 0;
  for (const PartManifest& m : parts) {
    const std::string& dir = dir_of[m.part.index];
    FT_RETURN_IF_ERROR(StreamPart(dir, m, &cutter));
    x.stats.documents += m.stats.documents;
    x.stats.text_bytes += m.stats.text_bytes;
    x.stats.stream_tokens += m.tokens;
    x.stats.skipped_empty_documents += m.stats.skipped_empty_documents;
    x.stats.skipped_invalid_lines += m.stats.skipped_invalid_lines;
    for (const auto& [reason, n] : m.stats.bad_records) x.stats.bad_records[reason] += n;
    x.inputs.insert(x.inputs.end(), m.inputs.begin(), m.inputs.end());
    if (!m.stats.bad_records.empty()) {
      std::string text;
      FT_RETURN_IF_ERROR(env->ReadFile(JoinPath(dir, kBadRecordsFileName), &text));
      // Keep the single pack's cap: the first kMaxListedBadRecords in input order.
      for (size_t pos = 0; pos < text.size() && listed < DocumentReader::kMaxListedBadRecords;
           ++listed) {
        size_t nl = text.find('\n', pos);
        nl = nl == std::string::npos ? text.size() : nl + 1;
        out.bad_records_jsonl.append(text, pos, nl - pos);
        pos = nl;
      }
    }
  }
  FT_RETURN_IF_ERROR(FinishDataset(env, o.out_dir, out, &cutter, &x));
  PackResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.input_bytes = out.input_bytes;
  LogPacked(x, o.out_dir, r.seconds);
  r.index = std::move(x);
  return r;
}

}  // namespace ftrain::data
