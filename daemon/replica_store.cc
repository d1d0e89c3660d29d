// Replica memory and its budget.
#include "daemon/replica_store.h"

#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/log.h"

namespace ftrain::ckptd {

StatusOr<std::unique_ptr<AnonBuffer>> AnonBuffer::Create(uint64_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::IOError("mmap of " + std::to_string(bytes) +
                           " bytes for a replica: " + std::strerror(errno));
  }
  std::unique_ptr<AnonBuffer> b(new AnonBuffer());
  b->data_ = static_cast<uint8_t*>(p);
  b->size_ = bytes;
  return b;
}

AnonBuffer::~AnonBuffer() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

void ReplicaStore::DropLocked(std::shared_ptr<const Replica>* r) {
  if (*r == nullptr) return;
  held_bytes_ -= (*r)->image->size();
  r->reset();  // the memory returns once no FETCH still reads it
}

void ReplicaStore::MakeRoomLocked(const std::pair<std::string, int>& key, uint64_t bytes) {
  auto it = held_.find(key);
  if (it != held_.end() && held_bytes_ + reserved_bytes_ + bytes > budget_) {
    DropLocked(&it->second.previous);
  }
  while (held_bytes_ + reserved_bytes_ + bytes > budget_) {
    Entry* oldest = nullptr;
    for (auto& [k, e] : held_) {
      if (e.previous != nullptr &&
          (oldest == nullptr || e.previous->header.step < oldest->previous->header.step)) {
        oldest = &e;
      }
    }
    if (oldest == nullptr) return;
    DropLocked(&oldest->previous);
  }
}

StatusOr<std::unique_ptr<ReplicaStore::Reservation>> ReplicaStore::Reserve(
    const peer::ReplicaHeader& header) {
  const uint64_t bytes = header.extent;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::pair<std::string, int> key{header.job, header.rank};
    auto it = held_.find(key);
    if (it != held_.end() && it->second.newest != nullptr &&
        it->second.newest->header.step > header.step) {
      return Status::FailedPrecondition("a newer replica of rank " + std::to_string(header.rank) +
                                        " (step " + std::to_string(it->second.newest->header.step) +
                                        ") is held; step " + std::to_string(header.step) +
                                        " is not kept");
    }
    MakeRoomLocked(key, bytes);
    const uint64_t used = held_bytes_ + reserved_bytes_;
    if (used + bytes > budget_) {
      const std::string msg = "the replica of rank " + std::to_string(header.rank) + " step " +
                              std::to_string(header.step) + " (" + std::to_string(bytes) +
                              " bytes) does not fit the replica budget of " +
                              std::to_string(budget_) + " bytes (" + std::to_string(used) +
                              " in use, incl. the older replica kept until the new one is " +
                              "whole): short by " + std::to_string(used + bytes - budget_) +
                              " bytes; raise --replica-memory-gb";
      if (!overflow_logged_[header.rank]) {
        overflow_logged_[header.rank] = true;
        FT_LOG(Warning) << "ckptd: " << msg << " (logged once per rank)";
      }
      return Status::FailedPrecondition(msg);
    }
    overflow_logged_[header.rank] = false;
    reserved_bytes_ += bytes;
  }
  auto r = std::unique_ptr<Reservation>(new Reservation());
  r->store_ = this;
  r->bytes_ = bytes;  // the destructor returns it, also when the mmap below fails
  auto buf = AnonBuffer::Create(bytes);
  if (!buf.ok()) return buf.status();
  r->replica_ = std::make_unique<Replica>();
  r->replica_->header = header;
  r->replica_->image = std::move(buf).value();
  return r;
}

ReplicaStore::Reservation::~Reservation() {
  if (store_ == nullptr) return;
  std::lock_guard<std::mutex> lock(store_->mu_);
  store_->reserved_bytes_ -= bytes_;
}

void ReplicaStore::Commit(std::unique_ptr<Reservation> r, std::string from) {
  std::shared_ptr<Replica> rep = std::move(r->replica_);
  rep->from = std::move(from);
  rep->received_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<std::shared_ptr<const Replica>> replaced;  // freed after the lock
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = held_[{rep->header.job, rep->header.rank}];
  // The previous becomes the newest one held that is older than this one (if any).
  std::shared_ptr<const Replica> keep;
  for (const auto* p : {&e.newest, &e.previous}) {
    if (*p != nullptr && (*p)->header.step < rep->header.step &&
        (keep == nullptr || (*p)->header.step > keep->header.step)) {
      keep = *p;
    }
  }
  for (auto* p : {&e.newest, &e.previous}) {
    replaced.push_back(*p);
    DropLocked(p);
  }
  if (keep != nullptr) {
    held_bytes_ += keep->image->size();
    e.previous = std::move(keep);
  }
  held_bytes_ += rep->image->size();
  e.newest = std::move(rep);
  // The reservation's bytes are now held bytes: its destructor must not return them twice.
  reserved_bytes_ -= r->bytes_;
  r->store_ = nullptr;
}

std::shared_ptr<const Replica> ReplicaStore::Find(const std::string& job, int rank, int64_t step,
                                                  int64_t* newest) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (newest != nullptr) *newest = -1;
  auto it = held_.find({job, rank});
  if (it == held_.end() || it->second.newest == nullptr) return nullptr;
  if (newest != nullptr) *newest = it->second.newest->header.step;
  for (const auto* p : {&it->second.newest, &it->second.previous}) {
    if (*p != nullptr && (*p)->header.step == step) return *p;
  }
  return nullptr;
}

std::vector<ReplicaStore::Held> ReplicaStore::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Held> out;
  for (const auto& [key, e] : held_) {
    for (const auto* p : {&e.newest, &e.previous}) {
      if (*p == nullptr) continue;
      out.push_back({key.first, key.second, (*p)->header.step, (*p)->image->size(), (*p)->from});
    }
  }
  return out;
}

uint64_t ReplicaStore::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_bytes_ + reserved_bytes_;
}

}  // namespace ftrain::ckptd
