// Test helper: the CPU's answer to the CUDA caching allocator's statistics. Wraps LibTorch's
// CPU allocator and counts the bytes of every tensor storage alive (current and peak), so a
// CPU test can hold what the autograd graph, the gathered units and the gradient buffers
// really occupy against `ftrain plan`, as gpu-check does with the CUDA allocator's peak.
// Memory that LibTorch's kernels take outside the allocator (oneDNN scratch, Gloo's buffers) is
// not counted; on a GPU cuBLAS' and NCCL's workspaces are outside the plan too.
#pragma once

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace ftrain::testing {

class CountingCpuAllocator final : public c10::Allocator {
 public:
  // Installs one counting allocator over the current CPU allocator (idempotent). Call it
  // before any tensor exists: storages allocated earlier are never counted.
  static CountingCpuAllocator& Install() {
    static CountingCpuAllocator* instance = [] {
      auto* a = new CountingCpuAllocator(c10::GetCPUAllocator());
      c10::SetCPUAllocator(a, /*priority=*/100);
      return a;
    }();
    return *instance;
  }

  int64_t current() const { return current_.load(); }
  int64_t peak() const { return peak_.load(); }
  void ResetPeak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_.store(current_.load());
    peak_where_ = where_ ? where_() : std::string();
  }
  // Where the peak was reached: what `where` (called on the allocating thread) answered then.
  void set_where(std::string (*where)()) { where_ = where; }
  std::string peak_where() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_where_;
  }

  // The data pointer is the context (raw_allocate requires it); the wrapped allocation waits
  // in a table until its storage dies.
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      blocks_.emplace(data, Block{std::move(inner), static_cast<int64_t>(n)});
      Add(static_cast<int64_t>(n));
    }
    return {data, data, &Free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  struct Block {
    c10::DataPtr inner;  // the wrapped allocation, freed with the block
    int64_t bytes = 0;
  };
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}
  static void Free(void* data) {
    if (data == nullptr) return;
    CountingCpuAllocator& self = Install();
    Block b;
    {
      std::lock_guard<std::mutex> lock(self.mu_);
      auto it = self.blocks_.find(data);
      if (it == self.blocks_.end()) return;
      b = std::move(it->second);
      self.blocks_.erase(it);
    }
    self.current_.fetch_sub(b.bytes);  // b.inner frees the memory when b goes
  }
  void Add(int64_t n) {  // under mu_
    const int64_t now = current_.fetch_add(n) + n;
    if (now > peak_.load()) {
      peak_.store(now);
      if (where_) peak_where_ = where_();
    }
  }

  c10::Allocator* base_;
  std::mutex mu_;
  std::string (*where_)() = nullptr;
  std::string peak_where_;
  std::unordered_map<void*, Block> blocks_;
  std::atomic<int64_t> current_{0}, peak_{0};
};

}  // namespace ftrain::testing
