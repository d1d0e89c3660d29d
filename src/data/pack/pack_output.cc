// PrepareOutDir and ShardCutter.
#include "data/pack/pack_output.h"

#include "core/log.h"
#include "data/format/format.h"

namespace ftrain::data {

Status PrepareOutDir(Env* env, const std::string& dir, bool force) {
  FT_RETURN_IF_ERROR(CreateDirs(env, dir));
  const std::string index = JoinPath(dir, kIndexFileName);
  if (env->FileExists(index)) {
    if (!force) {
      return Status::FailedPrecondition(dir + " already holds a packed dataset (" + index +
                                        "); pass --force to replace it");
    }
    FT_RETURN_IF_ERROR(env->RemoveFile(index));
  }
  FT_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(dir));
  size_t removed = 0;
  for (const auto& name : names) {
    uint64_t idx;
    bool partial = name.size() > 8 && name.compare(name.size() - 8, 8, ".partial") == 0;
    if (ParseShardFileName(name, &idx) || partial || name == kTokenizerFileName ||
        name == kHfTokenizerFileName || name == kHfTokenizerConfigFileName ||
        name == kBadRecordsFileName) {
      FT_RETURN_IF_ERROR(env->RemoveFile(JoinPath(dir, name)));
      ++removed;
    }
  }
  if (removed > 0) {
    FT_LOG(Info) << "pack: removed " << removed << " files of an earlier pack from " << dir;
  }
  return Status::Ok();
}

ShardCutter::ShardCutter(Env* env, const std::string& dir, const DatasetIndex& shape)
    : env_(env), dir_(dir), x_(shape) {
  buf_.reserve(x_.rows_per_shard * x_.row_bytes());
}

Status ShardCutter::Add(const std::vector<uint32_t>& tokens) {
  pending_.insert(pending_.end(), tokens.begin(), tokens.end());
  const uint64_t l = x_.seq_len;
  while (pending_.size() - head_ >= l + 1) {
    for (uint64_t t = 0; t <= l; ++t) {
      uint32_t v = pending_[head_ + t];
      for (uint32_t b = 0; b < x_.token_bytes; ++b) buf_.push_back(uint8_t(v >> (8 * b)));
    }
    head_ += l;
    if (++rows_in_shard_ == x_.rows_per_shard) FT_RETURN_IF_ERROR(Flush());
  }
  if (head_ > (1u << 20)) {
    pending_.erase(pending_.begin(), pending_.begin() + long(head_));
    head_ = 0;
  }
  return Status::Ok();
}

Status ShardCutter::Finish() { return rows_in_shard_ > 0 ? Flush() : Status::Ok(); }

Status ShardCutter::Flush() {
  ShardHeader h;
  h.token_bytes = x_.token_bytes;
  h.seq_len = x_.seq_len;
  h.chunk_rows = x_.chunk_rows;
  h.num_rows = rows_in_shard_;
  ShardEntry e;
  e.name = ShardFileName(shards_.size());
  e.rows = rows_in_shard_;
  ShardFileInfo info;
  FT_RETURN_IF_ERROR(WriteShardFile(env_, JoinPath(dir_, e.name), h, buf_.data(), &info));
  e.bytes = info.bytes;
  e.xxh3 = info.xxh3;
  shards_.push_back(e);
  buf_.clear();
  rows_in_shard_ = 0;
  return Status::Ok();
}

}  // namespace ftrain::data
