// `ckptctl` on s3:// checkpoint roots (list, latest, verify, prune) and the two commands that
// move checkpoints between the tiers (mirror, restore). Work in ckpt/s3_store.h; exit codes as
// the rest of ckptctl: 0 ok, 1 the checked thing is bad, 2 usage or environment error.
#pragma once

#include <string>

namespace ftrain::cli {

int S3List(const std::string& root, bool json);
int S3Latest(const std::string& root);
int S3Verify(const std::string& root, bool all, bool json, int threads);
int S3Prune(const std::string& root, int keep, bool abandoned, bool dry_run);
// ckptctl mirror DIR S3ROOT / restore S3ROOT FSROOT (argv[0] = the subcommand).
int Mirror(int argc, char** argv);
int Restore(int argc, char** argv);

}  // namespace ftrain::cli
