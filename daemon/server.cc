// ckptd server loop.
#include "daemon/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "daemon/peer_fetch.h"  // the peer members: complete types for ~Server
#include "daemon/peer_server.h"
#include "daemon/replica_store.h"
#include "daemon/replicator.h"

namespace ftrain::ckptd {

namespace proto = ckpt::proto;
using proto::MsgType;

Server::Server(ServerOptions options)
    : options_(std::move(options)), store_(options_.root, options_.env) {}

Server::~Server() {
  StopPeers();         // before the slots and the wake pipe go
  persister_.reset();  // drains the queue while the slots are still mapped
  for (auto& [fd, c] : conns_) ::close(fd);
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(socket_path_.c_str());  // ignored: best effort on the way out
  }
  ranks_.clear();  // unlinks every slot
  for (int fd : wake_) {
    if (fd >= 0) ::close(fd);
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Status Server::Start() {
  start_unix_ = UnixSeconds();
  const std::string dir = proto::SocketDir(options_.run_dir, options_.node);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::IOError("mkdir '" + dir + "': " + std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::FailedPrecondition("'" + dir + "' is not a directory; remove it");
  }
  if (st.st_uid != ::getuid()) {
    return Status::FailedPrecondition("'" + dir + "' belongs to uid " + std::to_string(st.st_uid) +
                                      ", not to this user; refusing to put the socket there");
  }
  if (::chmod(dir.c_str(), 0700) != 0)
    return Status::IOError("chmod 0700 '" + dir + "': " + std::strerror(errno));

  const std::string lock = JoinPath(dir, "lock");
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) return Status::IOError("open '" + lock + "': " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return Status::FailedPrecondition("another ckptd already serves node '" + options_.node +
                                      "' of run '" + options_.run_dir + "' (lock " + lock + ")");
  }
  // Under the lock: a refused second daemon must not overwrite the serving one's file.
  FT_RETURN_IF_ERROR(OpenPromFile());

  socket_path_ = proto::SocketPath(options_.run_dir, options_.node);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("socket path '" + socket_path_ + "' is longer than " +
                                   std::to_string(sizeof(addr.sun_path) - 1) +
                                   " bytes; use a shorter --run-dir");
  }
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  ::unlink(socket_path_.c_str());  // a stale socket of a dead daemon (we hold the lock)
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return Status::IOError(std::string("socket: ") + std::strerror(errno));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::chmod(socket_path_.c_str(), 0600) != 0 || ::listen(listen_fd_, 128) != 0) {
    return Status::IOError("bind/listen '" + socket_path_ + "': " + std::strerror(errno));
  }
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) return Status::IOError("pipe2 failed");

  UnlinkStaleSegments(proto::ShmPrefix(options_.run_dir, options_.node));
  FT_RETURN_IF_ERROR(CreateDirs(options_.env, options_.root));
  // Finishes a commit that a dead committer (a previous daemon) left half-done.
  Status s = store_.Recover();
  if (!s.ok()) FT_LOG(Warning) << "ckptd: recovery of '" << options_.root << "': " << s.ToString();
  auto latest = store_.Latest();
  if (latest.ok() && latest->has_value()) last_committed_step_ = (*latest)->step;

  persister_ = std::make_unique<Persister>(&store_, options_.persist, [this](PersistResult r) {
    {
      std::lock_guard<std::mutex> lock(results_mu_);
      results_.push_back(std::move(r));
    }
    char b = 1;
    // Ignored: a full pipe already guarantees a wake-up.
    [[maybe_unused]] ssize_t n = ::write(wake_[1], &b, 1);
  });
  StartPeers();
  FT_LOG(Info) << "ckptd: serving node '" << options_.node << "' on " << socket_path_ << " (root "
               << options_.root << ", threads " << options_.persist.threads << ", nice "
               << options_.persist.nice << ", zstd " << options_.persist.zstd_level << ", keep "
               << options_.persist.keep << ", memory " << options_.memory_gb << " GB)";
  return Status::Ok();
}

Status Server::Serve(int stop_fd) {
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({stop_fd, POLLIN, 0});
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& [fd, c] : conns_) fds.push_back({fd, POLLIN, 0});
    int n = ::poll(fds.data(), fds.size(), NextDeadlineMs(1000));
    if (n < 0 && errno != EINTR)
      return Status::IOError(std::string("poll: ") + std::strerror(errno));
    MaybeWritePromFile(false);
    MaybePublishAddress();
    ExpireFetches();
    if (n <= 0) continue;
    if (fds[0].revents) {
      FT_LOG(Info) << "ckptd: stopping; finishing "
                   << persister_->queued() + (persister_->busy() ? 1 : 0)
                   << " snapshot(s) in flight first";
      persister_.reset();
      DrainResults();
      MaybeWritePromFile(true);
      return Status::Ok();
    }
    if (fds[1].revents) {
      char buf[256];
      while (::read(wake_[0], buf, sizeof(buf)) > 0) {
      }
      DrainResults();
    }
    if (fds[2].revents) Accept();
    for (size_t i = 3; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (!OnReadable(fds[i].fd)) Disconnect(fds[i].fd, "");
    }
    ServeAcquires();
  }
}

void Server::Accept() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      FT_LOG(Warning) << "ckptd: SO_PEERCRED failed; refusing the connection";
      ::close(fd);
      continue;
    }
    if (cred.uid != options_.allowed_uid) {
      FT_LOG(Warning) << "ckptd: refused a connection from uid " << cred.uid << " (pid " << cred.pid
                      << "); only uid " << options_.allowed_uid << " may use this daemon";
      ::close(fd);
      continue;
    }
    Conn c;
    c.uid = cred.uid;
    c.pid = cred.pid;
    conns_[fd] = c;
  }
}

bool Server::OnReadable(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return true;
  Conn& c = it->second;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) return false;  // closed (a trainer that exited or died)
    c.in.append(buf, static_cast<size_t>(n));
    if (c.in.size() > proto::kMaxPayload + 2 * proto::kHeaderBytes) break;
  }
  while (c.in.size() >= proto::kHeaderBytes) {
    auto h = proto::DecodeHeader(reinterpret_cast<const uint8_t*>(c.in.data()));
    if (!h.ok()) {
      Disconnect(fd, h.status().message());
      return true;
    }
    if (c.in.size() < proto::kHeaderBytes + h->length) break;
    std::string payload = c.in.substr(proto::kHeaderBytes, h->length);
    c.in.erase(0, proto::kHeaderBytes + h->length);
    if (!Handle(fd, c, static_cast<MsgType>(h->type), payload)) return true;  // disconnected
  }
  return true;
}

void Server::Send(int fd, MsgType type, const std::string& payload) {
  const std::string msg = proto::Frame(type, payload);
  size_t done = 0;
  // Replies are small; a peer that does not read them within the socket buffer is dropped.
  while (done < msg.size()) {
    ssize_t n = ::send(fd, msg.data() + done, msg.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

void Server::Disconnect(int fd, const std::string& why) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  if (!why.empty()) {
    FT_LOG(Warning) << "ckptd: disconnecting pid " << it->second.pid << " (rank " << it->second.rank
                    << "): " << why;
  }
  if (it->second.rank >= 0) {
    auto& rs = ranks_[it->second.rank];
    if (rs.conn == fd) rs.conn = -1;
    // A slot taken but never submitted goes back; submitted ones keep persisting.
    for (auto& s : rs.slots) {
      if (s.state == SlotState::kHeld) s.state = SlotState::kFree;
    }
  }
  ::close(fd);
  conns_.erase(it);
}

bool Server::Idle() const {
  for (const auto& [r, rs] : ranks_) {
    if (rs.conn >= 0) return false;
    for (const auto& s : rs.slots) {
      if (s.state == SlotState::kPersisting || s.state == SlotState::kHeld ||
          s.state == SlotState::kFetching)
        return false;
    }
  }
  return true;
}

uint64_t Server::SlotBytesInUse() const {
  uint64_t n = 0;
  for (const auto& [r, rs] : ranks_) {
    for (const auto& s : rs.slots) n += s.seg ? s.seg->size() : 0;
  }
  return n;
}

// Answers ERROR (the client stays connected: true) and logs who asked.
bool Server::Refuse(int fd, const Conn& c, const std::string& why) {
  FT_LOG(Warning) << "ckptd: refused a request of pid " << c.pid << ": " << why;
  Send(fd, MsgType::kError, why);
  return true;
}

// HELLO: a rank connects; its slots are made (or reused) and their names returned.
bool Server::OnHello(int fd, Conn& c, const std::string& payload) {
  if (c.rank >= 0) return Disconnect(fd, "second HELLO on one connection"), false;
  auto h = proto::DecodeHello(payload);
  if (!h.ok()) return Disconnect(fd, h.status().message()), false;
  // A new trainer generation may run with another world size once the previous one is
  // gone and every snapshot it handed over is persisted.
  if (world_ != 0 && h->world != world_ && Idle()) {
    FT_LOG(Info) << "ckptd: world size changes from " << world_ << " to " << h->world
                 << "; dropping the previous generation's slots";
    ranks_.clear();
    world_ = 0;
  }
  if (world_ != 0 && h->world != world_) {
    return Disconnect(fd, "world size " + std::to_string(h->world) + " differs from the " +
                              std::to_string(world_) + " of the other ranks"),
           false;
  }
  RankSlots& rs = ranks_[h->rank];
  if (rs.conn >= 0) {
    Refuse(fd, c,
           "rank " + std::to_string(h->rank) + " is already connected (pid " +
               std::to_string(conns_[rs.conn].pid) + ")");
    return Disconnect(fd, ""), false;
  }
  const uint64_t want = (h->slot_bytes + 4095) & ~uint64_t{4095};
  bool fits = !rs.slots.empty() && rs.slots.front().seg->size() >= want;
  if (!fits) {
    for (const auto& s : rs.slots) {
      if (s.state == SlotState::kHeld || s.state == SlotState::kPersisting ||
          s.state == SlotState::kFetching) {
        Refuse(fd, c,
               "rank " + std::to_string(h->rank) +
                   " needs larger slots but a snapshot is still being written; retry");
        return Disconnect(fd, ""), false;
      }
    }
    uint64_t other = SlotBytesInUse();
    for (const auto& s : rs.slots) other -= s.seg->size();
    const uint64_t total = other + want * static_cast<uint64_t>(options_.slots_per_rank);
    if (static_cast<double>(total) > options_.memory_gb * (1u << 30)) {
      Refuse(fd, c,
             "slots for rank " + std::to_string(h->rank) + " (" +
                 std::to_string(options_.slots_per_rank) + " x " + std::to_string(want) +
                 " bytes) would exceed --memory-gb " + std::to_string(options_.memory_gb));
      return Disconnect(fd, ""), false;
    }
    rs.slots.clear();
    for (int i = 0; i < options_.slots_per_rank; ++i) {
      auto seg =
          ShmSegment::Create(proto::ShmName(options_.run_dir, options_.node, h->rank, i), want);
      if (!seg.ok()) {
        rs.slots.clear();
        Refuse(fd, c, seg.status().ToString());
        return Disconnect(fd, ""), false;
      }
      Slot s;
      s.seg = std::move(seg).value();
      rs.slots.push_back(std::move(s));
    }
  }
  world_ = h->world;
  // A restarted trainer resumes from the last committed step and may legitimately
  // re-submit a step number whose earlier save never committed.
  rs.last_step = -1;
  rs.last_persisted_step = -1;
  rs.last_failed_step = -1;
  c.rank = h->rank;
  rs.conn = fd;
  proto::HelloOk ok;
  ok.slot_bytes = rs.slots.front().seg->size();
  for (const auto& s : rs.slots) ok.shm_names.push_back(s.seg->name());
  FT_LOG(Info) << "ckptd: rank " << h->rank << "/" << h->world << " (pid " << c.pid
               << ") connected, " << rs.slots.size() << " slots of " << ok.slot_bytes << " bytes";
  Send(fd, MsgType::kHelloOk, proto::EncodeHelloOk(ok));
  return true;
}

// SUBMIT: a rank hands over the snapshot in one of its held slots; persisting is queued.
bool Server::OnSubmit(int fd, Conn& c, const std::string& payload) {
  if (c.rank < 0) return Disconnect(fd, "SUBMIT before HELLO"), false;
  RankSlots& rs = ranks_[c.rank];
  auto sub = proto::DecodeSubmit(payload, rs.slots.front().seg->size());
  if (!sub.ok()) return Disconnect(fd, sub.status().message()), false;
  if (sub->slot >= rs.slots.size() || rs.slots[sub->slot].state != SlotState::kHeld) {
    return Disconnect(fd, "SUBMIT names slot " + std::to_string(sub->slot) +
                              ", which this client does not hold"),
           false;
  }
  if (sub->meta.world_size != world_)
    return Disconnect(fd, "SUBMIT with another world size"), false;
  if (sub->step <= rs.last_step) {
    rs.slots[sub->slot].state = SlotState::kFree;
    return Refuse(fd, c,
                  "step " + std::to_string(sub->step) + " is not newer than step " +
                      std::to_string(rs.last_step) + " already submitted by rank " +
                      std::to_string(c.rank));
  }
  Slot& slot = rs.slots[sub->slot];
  slot.state = SlotState::kPersisting;
  slot.step = sub->step;
  slot.submit = *sub;  // a copy of the descriptor (small): RESTORE answers from it
  rs.last_step = sub->step;
  if (sub->memory_only) {
    FT_LOG(Debug) << "ckptd: memory snapshot step=" << sub->step << " rank=" << c.rank
                  << " slot=" << sub->slot << " queued";
  } else {
    FT_LOG(Info) << "ckptd: save step=" << sub->step << " rank=" << c.rank << " slot=" << sub->slot
                 << " stall_s=" << static_cast<double>(sub->stall_ns) * 1e-9 << " queued";
  }
  PersistJob job;
  job.rank = c.rank;
  job.slot = sub->slot;
  job.base = slot.seg->data();
  job.submit = std::move(sub).value();
  persister_->Enqueue(std::move(job));
  Send(fd, MsgType::kSubmitOk, "");
  return true;
}

// RESTORE: the rank's retained snapshot of the step asked for (or the newest one), if any.
bool Server::OnRestore(int fd, Conn& c, const std::string& payload) {
  if (c.rank < 0) return Disconnect(fd, "RESTORE before HELLO"), false;
  auto want = proto::DecodeRestore(payload);
  if (!want.ok()) return Disconnect(fd, want.status().message()), false;
  const Slot* best = nullptr;
  int64_t newest = -1;
  for (const auto& s : ranks_[c.rank].slots) {
    if (s.state != SlotState::kRetained) continue;
    newest = std::max(newest, s.step);
    if ((*want < 0 || s.step == *want) && (best == nullptr || s.step > best->step)) best = &s;
  }
  if (best != nullptr) {
    FT_LOG(Info) << "ckptd: rank " << c.rank << " restores step " << best->step << " from memory";
  } else if (*want >= 0) {
    FT_LOG(Info) << "ckptd: rank " << c.rank << " asks for step " << *want
                 << "; it is not in memory (newest held: " << newest << ")";
  }
  Send(fd, MsgType::kRestoreOk, proto::EncodeRestoreOk(best != nullptr ? &best->submit : nullptr));
  return true;
}

bool Server::Handle(int fd, Conn& c, MsgType type, const std::string& payload) {
  switch (type) {
    case MsgType::kStatus:
      Send(fd, MsgType::kStatusOk, StatusJson());
      return true;
    case MsgType::kHello:
      return OnHello(fd, c, payload);
    case MsgType::kAcquire:
      if (c.rank < 0) return Disconnect(fd, "ACQUIRE before HELLO"), false;
      if (!payload.empty()) return Disconnect(fd, "ACQUIRE with a payload"), false;
      c.waiting_acquire = true;
      return true;  // answered by ServeAcquires()
    case MsgType::kSubmit:
      return OnSubmit(fd, c, payload);
    case MsgType::kRestore:
      return OnRestore(fd, c, payload);
    case MsgType::kFetchPeer:
      return StartFetch(fd, c, payload);
    default:
      return Disconnect(fd, "unexpected message type " + std::to_string(static_cast<int>(type))),
             false;
  }
}

void Server::ServeAcquires() {
  for (auto& [fd, c] : conns_) {
    if (!c.waiting_acquire) continue;
    auto& rs = ranks_[c.rank];
    int pick = -1;
    for (uint32_t i = 0; i < rs.slots.size(); ++i) {
      if (rs.slots[i].state == SlotState::kFree) {
        pick = static_cast<int>(i);
        break;
      }
    }
    // No free slot: give up the oldest retained snapshot rather than wait, one not on its way
    // to the buddy first (else a send slower than the snapshots would never finish), any one
    // when every retained slot is being sent.
    for (int pass = 0; pass < 2 && pick < 0; ++pass) {
      for (uint32_t i = 0; i < rs.slots.size(); ++i) {
        const Slot& s = rs.slots[i];
        if (s.state != SlotState::kRetained) continue;
        if (pass == 0 && s.sending && s.sending->load()) continue;
        if (pick < 0 || s.step < rs.slots[pick].step) pick = static_cast<int>(i);
      }
    }
    if (pick >= 0) {
      MarkReused(rs.slots[pick]);
      rs.slots[pick].state = SlotState::kHeld;
      rs.slots[pick].step = -1;
      c.waiting_acquire = false;
      Send(fd, MsgType::kAcquireOk, proto::EncodeU32(static_cast<uint32_t>(pick)));
    }
  }
}

void Server::DrainResults() {
  std::vector<PersistResult> results;
  {
    std::lock_guard<std::mutex> lock(results_mu_);
    results.swap(results_);
  }
  for (auto& r : results) {
    if (r.memory_only) {
      OnMemorySnapshot(r);
      continue;
    }
    auto& rs = ranks_[r.rank];
    if (r.slot < rs.slots.size()) {
      // A persisted snapshot stays in memory as the rank's newest; the older retained one
      // stays too (until ACQUIRE needs its slot): this one may never commit (a rank of
      // another node died first) and a restart then resumes from the older. A retained
      // snapshot of this step or later is stale (the step is being redone after a restart).
      for (auto& s : rs.slots) {
        if (r.status.ok() && s.state == SlotState::kRetained && s.step >= r.step) {
          s.state = SlotState::kFree;
        }
      }
      rs.slots[r.slot].state = r.status.ok() ? SlotState::kRetained : SlotState::kFree;
      if (r.status.ok()) OfferReplica(r, rs.slots[r.slot]);
    }
    const double mbps = r.persist_s > 0 ? static_cast<double>(r.raw_bytes) / r.persist_s / 1e6 : 0;
    if (!r.status.ok()) {
      ++failures_;
      last_failed_step_ = std::max(last_failed_step_, r.step);
      rs.last_failed_step = std::max(rs.last_failed_step, r.step);
      last_error_ = r.status.ToString();
      FT_LOG(Error) << "ckptd: persist FAILED step=" << r.step << " rank=" << r.rank << ": "
                    << last_error_ << " (older checkpoints are untouched; the trainer's next "
                    << "checkpoint retries)";
      continue;
    }
    ++saves_;
    raw_bytes_ += r.raw_bytes;
    stored_bytes_ += r.stored_bytes;
    persist_s_ += r.persist_s;
    last_persisted_step_ = std::max(last_persisted_step_, r.step);
    rs.last_persisted_step = std::max(rs.last_persisted_step, r.step);
    if (r.committed) ++commits_;
    if (r.seen_committed) last_committed_step_ = std::max(last_committed_step_, r.step);
    FT_LOG(Info) << "ckptd: persisted step=" << r.step << " rank=" << r.rank
                 << " bytes=" << r.raw_bytes << " stored=" << r.stored_bytes
                 << " persist_s=" << r.persist_s << " MB/s=" << mbps
                 << (r.committed ? " committed=yes" : " committed=no");
  }
  DrainPeerResults();
}

void Server::OnMemorySnapshot(const PersistResult& r) {
  auto& rs = ranks_[r.rank];
  if (r.slot >= rs.slots.size()) return;
  // Like a persisted snapshot (DrainResults): the newest is retained, a retained one of this
  // step or later is stale; older ones stay until ACQUIRE needs their slot.
  for (auto& s : rs.slots) {
    if (s.state == SlotState::kRetained && s.step >= r.step) s.state = SlotState::kFree;
  }
  Slot& slot = rs.slots[r.slot];
  slot.state = SlotState::kRetained;
  slot.digest = r.digest;
  ++memory_snapshots_;
  FT_LOG(Debug) << "ckptd: memory snapshot step=" << r.step << " rank=" << r.rank
                << " bytes=" << r.raw_bytes << " hash_s=" << r.persist_s;
  OfferReplica(r, slot);
}

nlohmann::json Server::MemorySnapshotsJson(int rank, const RankSlots& rs) const {
  int64_t newest = -1, previous = -1;
  if (replicator_) {
    const auto stats = replicator_->Stats();
    const auto it = stats.find(rank);
    if (it != stats.end()) {
      newest = it->second.newest_step;
      previous = it->second.previous_step;
    }
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : rs.slots) {
    if (s.state != SlotState::kRetained || !s.submit.memory_only) continue;
    char digest[17];
    std::snprintf(digest, sizeof(digest), "%016llx", static_cast<unsigned long long>(s.digest));
    out.push_back({{"step", s.step},
                   {"digest", digest},
                   {"at_buddy", s.step == newest || s.step == previous}});
  }
  return out;
}

std::string Server::StatusJson() {
  int held = 0, persisting = 0;
  for (const auto& [r, rs] : ranks_) {
    for (const auto& s : rs.slots) {
      held += s.state == SlotState::kHeld;
      persisting += s.state == SlotState::kPersisting;
    }
  }
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& [r, rs] : ranks_) {
    int64_t in_flight = 0;
    std::vector<int64_t> steps;  // every retained snapshot a restart may ask for, oldest first
    for (const auto& s : rs.slots) {
      if (s.state == SlotState::kRetained) steps.push_back(s.step);
      in_flight += s.state == SlotState::kPersisting;
    }
    std::sort(steps.begin(), steps.end());
    ranks.push_back({{"rank", r},
                     {"connected", rs.conn >= 0},
                     {"last_submitted_step", rs.last_step},
                     {"in_flight", in_flight},
                     {"last_persisted_step", rs.last_persisted_step},
                     {"last_failed_step", rs.last_failed_step},
                     {"in_memory_step", steps.empty() ? int64_t{-1} : steps.back()},
                     {"in_memory_steps", steps},
                     {"memory_snapshots", MemorySnapshotsJson(r, rs)}});
  }
  nlohmann::json j = {
      {"node", options_.node},
      {"pid", static_cast<int>(::getpid())},
      {"root", options_.root},
      {"keep", options_.persist.keep},
      {"keep_every", options_.persist.keep_every},
      {"uptime_s", UnixSeconds() - start_unix_},
      {"world_size", world_},
      {"ranks", ranks},
      {"memory_snapshots_taken", memory_snapshots_},
      {"snapshots_in_flight", persisting},
      {"slots_held_by_trainers", held},
      {"queue_depth", persister_ ? persister_->queued() : 0},
      {"last_persisted_step", last_persisted_step_},
      {"last_committed_step", last_committed_step_},
      {"last_failed_step", last_failed_step_},
      {"saves", saves_},
      {"commits_won", commits_},
      {"failures", failures_},
      {"last_error", last_error_},
      {"raw_bytes", raw_bytes_},
      {"stored_bytes", stored_bytes_},
      {"persist_seconds", persist_s_},
      {"throughput_mb_s",
       persist_s_ > 0 ? static_cast<double>(raw_bytes_) / persist_s_ / 1e6 : 0.0},
      {"compression_ratio",
       stored_bytes_ > 0 ? static_cast<double>(raw_bytes_) / static_cast<double>(stored_bytes_)
                         : 0.0},
      {"shm_bytes", SlotBytesInUse()},
      {"replication", ReplicationJson()},
  };
  return j.dump();
}

}  // namespace ftrain::ckptd
