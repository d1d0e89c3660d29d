// The packer: a reader thread (files -> pieces -> ~1 MB work items), N tokenizer threads, and
// the calling thread putting results back in order and cutting rows and shards.
#include "data/pack/pack.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/log.h"
#include "core/thread_pool.h"
#include "data/format/format.h"
#include "data/pack/input_files.h"
#include "data/pack/pack_output.h"
#include "data/pack/pack_steps.h"

namespace ftrain::data {
namespace {

constexpr size_t kWorkItemBytes = 1 << 20;

struct WorkItem {
  uint64_t seq = 0;
  std::vector<Piece> pieces;
  uint64_t raw_done = 0;  // stored input bytes consumed when the item was cut
  uint64_t text_bytes = 0;
  uint64_t docs = 0;
};

struct Encoded {
  std::vector<uint32_t> tokens;
  uint64_t raw_done = 0, text_bytes = 0, docs = 0;
};

// The threads and queues between them.
class Pipeline {
 public:
  Pipeline(const std::vector<InputFile>& files, const std::vector<FileSlice>& slices,
           const PackOptions& o, const Tokenizer& tok, int threads)
      : files_(files), slices_(slices), o_(o), tok_(tok), threads_(threads) {}

  Status Run(TokenSink* cutter, ProgressMeter* progress, PackStats* stats,
             std::vector<InputEntry>* inputs, std::vector<BadRecord>* bad) {
    std::thread reader([this] { ReadLoop(); });
    std::vector<std::thread> workers;
    for (int i = 0; i < threads_; ++i) workers.emplace_back([this] { EncodeLoop(); });
    Status s = WriteLoop(cutter, progress, stats);
    {
      std::lock_guard<std::mutex> lock(mu_);
      abort_ = true;
    }
    cv_.notify_all();
    reader.join();
    for (auto& w : workers) w.join();
    if (s.ok()) s = error_;
    if (s.ok()) {
      const uint64_t stream_tokens = stats->stream_tokens;  // counted by WriteLoop
      *stats = reader_stats_;
      stats->stream_tokens = stream_tokens;
      *inputs = inputs_;
      *bad = std::move(bad_);
    }
    return s;
  }

 private:
  void Fail(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = s;
    abort_ = true;
    cv_.notify_all();
  }

  void ReadLoop() {
    DocumentReader docs(files_, o_.docs, slices_);
    WorkItem item;
    uint64_t seq = 0, docs_before = 0, text_before = 0;
    auto push = [&]() -> bool {
      item.seq = seq++;
      item.raw_done = docs.raw_bytes_done();
      item.docs = docs.stats().documents - docs_before;
      item.text_bytes = docs.stats().text_bytes - text_before;
      docs_before = docs.stats().documents;
      text_before = docs.stats().text_bytes;
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return abort_ || item.seq - written_ < uint64_t(4 * threads_ + 4); });
      if (abort_) return false;
      work_.push_back(std::move(item));
      item = WorkItem();
      cv_.notify_all();
      return true;
    };
    uint64_t bytes = 0;
    for (;;) {
      Piece piece;
      StatusOr<bool> more = docs.Next(&piece);
      if (!more.ok()) return Fail(more.status());
      if (!*more) break;
      bytes += piece.text.size();
      item.pieces.push_back(std::move(piece));
      if (bytes >= kWorkItemBytes) {
        if (!push()) return;
        bytes = 0;
      }
    }
    if (!item.pieces.empty() && !push()) return;
    std::lock_guard<std::mutex> lock(mu_);
    reader_done_ = true;
    total_items_ = seq;
    reader_stats_ = docs.stats();
    inputs_ = docs.finished_inputs();
    bad_ = docs.bad_records();
    cv_.notify_all();
  }

  void EncodeLoop() {
    std::vector<int> ids;
    const int bos = tok_.bos_id(), eos = tok_.eos_id(), vocab = tok_.vocab_size();
    for (;;) {
      WorkItem item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return abort_ || !work_.empty() || reader_done_; });
        if (abort_) return;
        if (work_.empty()) return;  // reader_done_ and nothing left
        item = std::move(work_.front());
        work_.pop_front();
      }
      Encoded out;
      out.raw_done = item.raw_done;
      out.text_bytes = item.text_bytes;
      out.docs = item.docs;
      for (const Piece& p : item.pieces) {
        if (p.bos && bos >= 0) out.tokens.push_back(uint32_t(bos));
        Status s = tok_.Encode(p.text, &ids);
        if (!s.ok()) return Fail(s);
        for (int id : ids) {
          if (id < 0 || id >= vocab) {
            return Fail(Status::Internal("tokenizer returned id " + std::to_string(id) +
                                         " outside its vocabulary of " + std::to_string(vocab)));
          }
          out.tokens.push_back(uint32_t(id));
        }
        if (p.eos && eos >= 0) out.tokens.push_back(uint32_t(eos));
      }
      std::lock_guard<std::mutex> lock(mu_);
      done_[item.seq] = std::move(out);
      cv_.notify_all();
    }
  }

  Status WriteLoop(TokenSink* cutter, ProgressMeter* progress, PackStats* stats) {
    uint64_t text = 0, docs = 0;
    for (uint64_t seq = 0;; ++seq) {
      Encoded e;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] {
          return abort_ || done_.count(seq) > 0 || (reader_done_ && seq >= total_items_);
        });
        if (abort_) return error_;
        if (done_.count(seq) == 0) break;  // everything written
        e = std::move(done_[seq]);
        done_.erase(seq);
        written_ = seq + 1;
        cv_.notify_all();
      }
      stats->stream_tokens += e.tokens.size();
      Status s = cutter->Add(e.tokens);
      if (!s.ok()) {
        Fail(s);
        return s;
      }
      text += e.text_bytes;
      docs += e.docs;
      progress->Update(e.raw_done, text, docs);
    }
    return Status::Ok();
  }

  const std::vector<InputFile>& files_;
  const std::vector<FileSlice>& slices_;
  const PackOptions& o_;
  const Tokenizer& tok_;
  const int threads_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<WorkItem> work_;         // guarded by mu_: reader -> workers
  std::map<uint64_t, Encoded> done_;  // guarded by mu_: workers -> writer, by seq
  uint64_t written_ = 0;              // guarded by mu_: items the writer has taken
  bool reader_done_ = false;          // guarded by mu_
  uint64_t total_items_ = 0;          // guarded by mu_: valid once reader_done_
  bool abort_ = false;                // guarded by mu_
  Status error_;                      // guarded by mu_: the first failure
  PackStats reader_stats_;            // guarded by mu_: valid once reader_done_
  std::vector<InputEntry> inputs_;    // guarded by mu_: valid once reader_done_
  std::vector<BadRecord> bad_;        // guarded by mu_: valid once reader_done_
};

}  // namespace

std::string BadRecordsJsonl(const std::vector<BadRecord>& bad) {
  std::string out;
  for (const BadRecord& b : bad) {
    nlohmann::json j = {{"file", b.file}, {"line", b.line}, {"reason", b.reason}};
    if (!b.detail.empty()) j["detail"] = b.detail;
    out += j.dump() + "\n";
  }
  return out;
}

std::string BadRecordSummary(const PackStats& stats) {
  uint64_t total = 0;
  std::string by;
  for (const auto& [reason, n] : stats.bad_records) {
    total += n;
    by += (by.empty() ? "" : ", ") + reason + " " + std::to_string(n);
  }
  return total == 0 ? std::string() : std::to_string(total) + " bad records skipped (" + by + ")";
}

Status PackOptions::Validate() const {
  auto bad = [](const std::string& m) { return Status::InvalidArgument(m); };
  if (inputs.empty()) return bad("no inputs: give text or JSON Lines files or directories");
  if (out_dir.empty()) return bad("--out is required");
  if (env == nullptr) return bad("PackOptions.env is not set");
  if (seq_len == 0) return bad("--seq-len must be > 0");
  if (seq_len > (1u << 24)) return bad("--seq-len must be <= 16777216");
  if (train_tokenizer == !tokenizer_path.empty()) {
    return bad("give exactly one of --tokenizer MODEL and --train-tokenizer");
  }
  if (train_tokenizer && (train.vocab_size < 8 || train.vocab_size > (1 << 30))) {
    return bad("--vocab-size must be in [8, 2^30]");
  }
  if (train_tokenizer && train.model_type != "unigram" && train.model_type != "bpe") {
    return bad("--tokenizer-type must be unigram or bpe");
  }
  if (shard_rows == 0 && !(shard_mb > 0)) return bad("--shard-mb must be > 0");
  if (chunk_rows == 0 && !(chunk_kb > 0)) return bad("--chunk-kb must be > 0");
  if (threads < 0 || threads > 1024) return bad("--threads must be in [0, 1024]");
  return Status::Ok();
}

void LogInputs(const InputScan& scan) {
  std::vector<std::pair<uint64_t, std::string>> by_count;
  uint64_t skipped_files = 0;
  for (const auto& [ext, n] : scan.skipped) {
    by_count.push_back({n, ext});
    skipped_files += n;
  }
  std::sort(by_count.rbegin(), by_count.rend());
  std::string skipped;
  for (size_t i = 0; i < by_count.size() && i < 8; ++i) {
    skipped += " " + by_count[i].second + ":" + std::to_string(by_count[i].first);
  }
  if (by_count.size() > 8) skipped += " ...";
  FT_LOG(Info) << "pack: " << scan.files.size() << " input files, " << scan.total_bytes / 1e6
               << " MB"
               << (skipped_files == 0 ? std::string()
                                      : "; skipped " + std::to_string(skipped_files) +
                                            " files under directories by name:" + skipped);
}

DatasetIndex PackShape(const PackOptions& o, const Tokenizer& tok, int threads) {
  if (tok.bos_id() < 0 && tok.eos_id() < 0) {
    FT_LOG(Warning) << "pack: " << o.tokenizer_path
                    << " defines neither a BOS nor an EOS token: documents follow each other "
                       "without a separator (for tokenizer.json, put a tokenizer_config.json "
                       "with bos_token/eos_token next to it)";
  }
  DatasetIndex x;
  x.seq_len = o.seq_len;
  x.token_bytes = tok.vocab_size() <= 65536 ? 2 : 4;
  const uint64_t row_bytes = x.row_bytes();
  x.chunk_rows =
      uint32_t(o.chunk_rows > 0 ? o.chunk_rows
                                : std::max<uint64_t>(1, uint64_t(o.chunk_kb * 1024) / row_bytes));
  uint64_t shard_rows =
      o.shard_rows > 0 ? o.shard_rows : uint64_t(o.shard_mb * 1048576.0) / row_bytes;
  x.rows_per_shard =
      std::max<uint64_t>(1, (shard_rows + x.chunk_rows - 1) / x.chunk_rows) * x.chunk_rows;
  x.tokenizer_type = tok.type();
  x.tokenizer_file = tok.file_name();
  x.tokenizer_xxh3 = tok.xxh3();
  if (!tok.config_bytes().empty()) x.tokenizer_config_file = kHfTokenizerConfigFileName;
  x.vocab_size = uint32_t(tok.vocab_size());
  x.bos_id = tok.bos_id();
  x.eos_id = tok.eos_id();
  FT_LOG(Info) << "pack: rows of " << x.row_tokens() << " " << x.dtype_name() << " tokens ("
               << row_bytes << " bytes), " << x.chunk_rows << " rows per chunk, "
               << x.rows_per_shard << " rows per shard; " << threads << " tokenizer threads";
  return x;
}

Status TokenizeInputs(const std::vector<InputFile>& files, const std::vector<FileSlice>& slices,
                      const PackOptions& o, const Tokenizer& tok, int threads, TokenSink* sink,
                      ProgressMeter* progress, PackStats* stats, std::vector<InputEntry>* inputs,
                      std::vector<BadRecord>* bad) {
  Pipeline pipeline(files, slices, o, tok, threads);
  return pipeline.Run(sink, progress, stats, inputs, bad);
}

Status FinishDataset(Env* env, const std::string& dir, const DatasetOutputs& out,
                     ShardCutter* cutter, DatasetIndex* x) {
  FT_RETURN_IF_ERROR(cutter->Finish());
  x->shards = std::move(cutter->shards());
  x->num_rows = 0;
  for (const auto& e : x->shards) x->num_rows += e.rows;
  if (x->stats.documents == 0) {
    return Status::NotFound(
        "no text in the inputs (" + std::to_string(out.input_files) + " files, " +
        std::to_string(out.input_bytes) + " bytes" +
        (x->stats.skipped_empty_documents > 0
             ? ", " + std::to_string(x->stats.skipped_empty_documents) + " empty documents"
             : std::string()) +
        ")");
  }
  if (x->num_rows == 0) {
    return Status::NotFound(
        "the inputs hold " + std::to_string(x->stats.stream_tokens) +
        " tokens, fewer than one row of --seq-len + 1 = " + std::to_string(x->row_tokens()));
  }
  x->stats.dropped_tail_tokens = x->stats.stream_tokens - (x->num_rows * x->seq_len + 1);
  x->data_version = x->ComputeDataVersion();
  if (!out.bad_records_jsonl.empty()) {
    FT_RETURN_IF_ERROR(
        WriteFileAtomic(env, JoinPath(dir, kBadRecordsFileName), out.bad_records_jsonl));
  }
  FT_RETURN_IF_ERROR(WriteFileAtomic(env, JoinPath(dir, x->tokenizer_file), out.model_bytes));
  if (!x->tokenizer_config_file.empty()) {
    FT_RETURN_IF_ERROR(
        WriteFileAtomic(env, JoinPath(dir, x->tokenizer_config_file), out.config_bytes));
  }
  return WriteFileAtomic(env, JoinPath(dir, kIndexFileName), x->ToJson());  // the commit
}

void LogPacked(const DatasetIndex& x, const std::string& dir, double seconds) {
  FT_LOG(Info) << "pack: wrote " << x.shards.size() << " shards, " << x.num_rows << " rows, "
               << x.stats.stream_tokens << " tokens from " << x.stats.documents << " documents ("
               << x.stats.text_bytes / 1e6 << " MB of text) in " << seconds
               << " s: " << x.stats.text_bytes / 1e6 / seconds << " MB/s; data version "
               << x.data_version;
  if (!x.stats.bad_records.empty()) {
    FT_LOG(Warning) << "pack: " << BadRecordSummary(x.stats) << "; listed in "
                    << JoinPath(dir, kBadRecordsFileName);
  }
}

StatusOr<PackResult> Pack(const PackOptions& o) {
  FT_RETURN_IF_ERROR(o.Validate());
  auto t0 = std::chrono::steady_clock::now();
  // A given tokenizer is read first: a bad one is the only message, and it may live in the
  // output directory that PrepareOutDir clears.
  std::unique_ptr<Tokenizer> tok;
  if (!o.train_tokenizer) {
    FT_ASSIGN_OR_RETURN(tok, Tokenizer::Load(o.tokenizer_path, o.env));
  }
  InputScan scan;
  FT_RETURN_IF_ERROR(ScanInputs(o.inputs, &scan));
  LogInputs(scan);
  const int threads = ResolveThreads(o.threads);
  Env* env = o.env;
  FT_RETURN_IF_ERROR(PrepareOutDir(env, o.out_dir, o.force));
  if (o.train_tokenizer) {
    TrainTokenizerOptions t = o.train;
    t.threads = threads;
    t.docs = o.docs;
    t.docs.log_skipped = false;  // the packing pass logs them
    auto t_train = std::chrono::steady_clock::now();
    FT_ASSIGN_OR_RETURN(std::string model, TrainTokenizer(scan, t));
    FT_LOG(Info)
        << "pack: tokenizer trained in "
        << std::chrono::duration<double>(std::chrono::steady_clock::now() - t_train).count()
        << " s";
    FT_ASSIGN_OR_RETURN(tok, Tokenizer::FromBytes(std::move(model), "the trained tokenizer"));
  }
  DatasetIndex x = PackShape(o, *tok, threads);
  ShardCutter cutter(env, o.out_dir, x);
  ProgressMeter progress("pack", scan.total_bytes, o.progress, o.progress_interval_s);
  std::vector<BadRecord> bad;
  Status s = TokenizeInputs(scan.files, {}, o, *tok, threads, &cutter, &progress, &x.stats,
                            &x.inputs, &bad);
  progress.Update(scan.total_bytes, x.stats.text_bytes, x.stats.documents, /*force=*/true);
  progress.Finish();
  FT_RETURN_IF_ERROR(s);
  DatasetOutputs out{BadRecordsJsonl(bad), tok->model_bytes(), tok->config_bytes(),
                     scan.files.size(), scan.total_bytes};
  FT_RETURN_IF_ERROR(FinishDataset(env, o.out_dir, out, &cutter, &x));

  PackResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.input_bytes = scan.total_bytes;
  r.threads = threads;
  LogPacked(x, o.out_dir, r.seconds);
  r.index = std::move(x);
  return r;
}

}  // namespace ftrain::data
