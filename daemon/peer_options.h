// ckptd's buddy-replication settings (ckptd_main.cc fills them; see docs/ckptd.md).
// Replication is off unless listen or buddy is set; then job and secret are required.
#pragma once

#include <string>

namespace ftrain::ckptd {

struct PeerOptions {
  std::string listen;      // --peer-listen HOST:PORT ("" = no peer listener)
  std::string buddy;       // --buddy HOST:PORT
  std::string buddy_file;  // --buddy-file PATH (re-read before every connection)
  std::string advertise;   // --peer-advertise HOST|IFACE ("" = from the listen address)
  int job_nodes = 1;       // $SLURM_JOB_NUM_NODES: > 1 refuses a loopback literal
  std::string job;         // --job-id / $SLURM_JOB_ID
  std::string secret;      // --job-secret-file / $FTRAIN_JOB_SECRET (never logged)
  double replica_memory_gb = 8;
  double timeout_s = 10;  // --peer-timeout-s: per frame, connect and handshake
  // --replication-mbps: the sender's cap in MB/s (token bucket, daemon/token_bucket.h) so that
  // replication leaves the network to the training's collectives; 0 = unlimited.
  double replication_mbps = 0;
  bool enabled() const { return !listen.empty() || !buddy.empty() || !buddy_file.empty(); }
};

}  // namespace ftrain::ckptd
