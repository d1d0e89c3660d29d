// `ckptctl` on s3:// checkpoint roots (list, latest, verify, prune) and the two commands that
// move checkpoints between the tiers (mirror, restore). Work in ckpt/s3_store.h; exit codes as
// the rest of ckptctl: 0 ok, 1 the checked thing is bad, 2 usage or environment error.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

namespace ftrain::cli {

// A checkpoint for the commands that read its shard files (inspect, diff, export): a
// file-system PATH as given, or an s3:// one (s3://B/P: its newest committed step;
// s3://B/P/step-00000120: that step) copied into a private directory under $TMPDIR, which the
// destructor removes. The copy is whole: an HDF5 shard's index (superblock, B-trees, chunk
// table) is found only by reading the file, so Range GETs cannot fetch "just the metadata";
// each file is still fetched by parallel Range GETs and checked against the manifest's XXH3.
class LocalCheckpoint {
 public:
  static StatusOr<std::unique_ptr<LocalCheckpoint>> Open(const std::string& path);
  ~LocalCheckpoint();
  const std::string& dir() const { return dir_; }

 private:
  LocalCheckpoint(std::string dir, std::string tmp) : dir_(std::move(dir)), tmp_(std::move(tmp)) {}
  std::string dir_;  // the checkpoint directory to read
  std::string tmp_;  // the private copy's directory ("" for a file-system PATH)
};

int S3List(const std::string& root, bool json);
int S3Latest(const std::string& root);
int S3Verify(const std::string& root, bool all, bool json, int threads);
int S3Prune(const std::string& root, int keep, bool abandoned, bool dry_run);
// ckptctl mirror DIR S3ROOT / restore S3ROOT FSROOT (argv[0] = the subcommand).
int Mirror(int argc, char** argv);
int Restore(int argc, char** argv);

}  // namespace ftrain::cli
