// The address a daemon's peer listener publishes in RUN/ckptd-<node>/peer-addr, and that
// file's format: which start of the job it belongs to, and the interface or host name that
// --peer-advertise names. No sockets are opened here.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace ftrain::ckptd {

// Where to publish the listener: --peer-advertise HOST or IFACE ("" = the bound address, or
// the host name for a wildcard listen address); job_nodes > 1 refuses a loopback literal.
struct AdvertiseOptions {
  std::string advertise;
  int job_nodes = 1;
};

// "IFACE" -> its IPv4 address (else its first non-link-local IPv6 one); NotFound when no
// interface has that name.
StatusOr<std::string> InterfaceAddress(const std::string& iface);
// 127.0.0.0/8, ::1 or "localhost".
bool IsLoopbackHost(const std::string& host);

// RUN/ckptd-<node>/peer-addr: how other daemons find this one. Line 1 "HOST:PORT", line 2
// "start=ID since=STEP": the start it belongs to (peer::StartIdOf) and the newest step
// committed when that start's first daemon came up (no replica of it or of an older step
// can exist in this start: a requeued start's fetches are skipped).
struct PeerAddress {
  std::string address;
  std::string start;  // "" = unknown (a file without line 2)
  int64_t since = -1;
};
// temp, fsync, rename.
Status WriteAddressFile(const std::string& path, const PeerAddress& a);
// NotFound while it does not exist; line 1 validated as HOST:PORT.
StatusOr<PeerAddress> ReadPeerAddressFile(const std::string& path);
// The address in `path`; NotFound while absent or while it belongs to another start than
// `start` ("" = any).
StatusOr<std::string> ReadAddressFile(const std::string& path, const std::string& start = "");

}  // namespace ftrain::ckptd
