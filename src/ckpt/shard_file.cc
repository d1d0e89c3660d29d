// HDF5 shard file writing (parallel chunk compression + direct chunk writes) and reading.
#include "ckpt/shard_file.h"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "ckpt/h5zstd.h"

namespace ftrain::ckpt {

uint64_t Xxh3(const void* data, size_t n) { return XXH3_64bits(data, n); }

Status HashFile(const std::string& path, uint64_t* size, uint64_t* hash) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError("open '" + path + "': " + std::strerror(errno));
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  // A buffer that stays in L2: each block is copied out of the page cache and hashed while
  // still in cache (an 8 MiB buffer made that two trips through memory).
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint; ignoring failure is fine
  std::vector<char> buf(256u << 10);
  uint64_t total = 0;
  Status status;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = Status::IOError("read '" + path + "': " + std::strerror(errno));
      break;
    }
    if (n == 0) break;
    XXH3_64bits_update(state, buf.data(), static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  ::close(fd);
  *hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  *size = total;
  return status;
}

namespace {

// ---- HDF5 plumbing ---------------------------------------------------------------------------

void QuietHdf5() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

herr_t CollectError(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (err->desc != nullptr && *err->desc != '\0') {
    if (!out->empty()) *out += "; ";
    *out += err->desc;
  }
  return n < 3 ? 0 : 1;  // the outermost few entries say enough
}

std::string H5ErrorText() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, CollectError, &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? "unknown HDF5 error" : text;
}

Status H5Fail(const std::string& op, const std::string& path, const std::string& dataset = "") {
  std::string msg = "HDF5 " + op + " '" + path + "'";
  if (!dataset.empty()) msg += " dataset " + dataset;
  return Status::IOError(msg + ": " + H5ErrorText());
}

// Closes an HDF5 handle of any kind at scope exit.
class H5Handle {
 public:
  explicit H5Handle(hid_t id = -1) : id_(id) {}
  ~H5Handle() { reset(); }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  void reset(hid_t id = -1) {
    if (id_ >= 0) {
      // Close failures at cleanup have no one to report to; the data path checked already.
      switch (H5Iget_type(id_)) {
        case H5I_FILE:
          H5Fclose(id_);
          break;
        case H5I_DATASET:
          H5Dclose(id_);
          break;
        case H5I_DATASPACE:
          H5Sclose(id_);
          break;
        case H5I_DATATYPE:
          H5Tclose(id_);
          break;
        case H5I_ATTR:
          H5Aclose(id_);
          break;
        case H5I_GENPROP_LST:
          H5Pclose(id_);
          break;
        case H5I_GROUP:
          H5Gclose(id_);
          break;
        default:
          break;
      }
    }
    id_ = id;
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  hid_t release() {
    hid_t id = id_;
    id_ = -1;
    return id;
  }

 private:
  hid_t id_;
};

hid_t FileType(DType d) {
  switch (d) {
    case DType::kBFloat16:
    case DType::kFloat16:
      return H5T_STD_U16LE;  // raw bits; the dtype attribute says which
    case DType::kFloat32:
      return H5T_IEEE_F32LE;
    case DType::kFloat64:
      return H5T_IEEE_F64LE;
    case DType::kInt32:
      return H5T_STD_I32LE;
    case DType::kInt64:
      return H5T_STD_I64LE;
    case DType::kUInt8:
      return H5T_STD_U8LE;
  }
  return H5T_STD_U8LE;
}

hid_t MemType(DType d) {
  switch (d) {
    case DType::kBFloat16:
    case DType::kFloat16:
      return H5T_NATIVE_UINT16;
    case DType::kFloat32:
      return H5T_NATIVE_FLOAT;
    case DType::kFloat64:
      return H5T_NATIVE_DOUBLE;
    case DType::kInt32:
      return H5T_NATIVE_INT32;
    case DType::kInt64:
      return H5T_NATIVE_INT64;
    case DType::kUInt8:
      return H5T_NATIVE_UINT8;
  }
  return H5T_NATIVE_UINT8;
}

bool WriteStringAttr(hid_t obj, const char* name, const std::string& value) {
  H5Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), std::max<size_t>(1, value.size()));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Handle space(H5Screate(H5S_SCALAR));
  H5Handle attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  return attr.ok() && H5Awrite(attr.get(), type.get(), value.c_str()) >= 0;
}

bool WriteI64Attr(hid_t obj, const char* name, const std::vector<int64_t>& values, bool scalar) {
  hsize_t n = values.size();
  H5Handle space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr));
  H5Handle attr(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (values.empty()) return attr.ok();
  return attr.ok() && H5Awrite(attr.get(), H5T_NATIVE_INT64, values.data()) >= 0;
}

bool WriteU64Attr(hid_t obj, const char* name, uint64_t value) {
  H5Handle space(H5Screate(H5S_SCALAR));
  H5Handle attr(H5Acreate2(obj, name, H5T_STD_U64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  return attr.ok() && H5Awrite(attr.get(), H5T_NATIVE_UINT64, &value) >= 0;
}

bool ReadStringAttr(hid_t obj, const char* name, std::string* out) {
  if (H5Aexists(obj, name) <= 0) return false;
  H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT));
  H5Handle type(H5Aget_type(attr.get()));
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0) return false;
  size_t size = H5Tget_size(type.get());
  if (size == 0 || size > (1u << 20)) return false;  // a damaged header, not a 4 GB string
  std::string buf(size, '\0');
  H5Handle mem(H5Tcopy(H5T_C_S1));
  H5Tset_size(mem.get(), size);
  H5Tset_strpad(mem.get(), H5T_STR_NULLPAD);
  if (H5Aread(attr.get(), mem.get(), &buf[0]) < 0) return false;
  buf.resize(strnlen(buf.c_str(), size));
  *out = buf;
  return true;
}

bool ReadI64Attr(hid_t obj, const char* name, std::vector<int64_t>* out) {
  if (H5Aexists(obj, name) <= 0) return false;
  H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT));
  H5Handle space(H5Aget_space(attr.get()));
  hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0 || n > (1 << 20)) return false;
  out->assign(static_cast<size_t>(n), 0);
  if (n == 0) return true;
  return H5Aread(attr.get(), H5T_NATIVE_INT64, out->data()) >= 0;
}

bool ReadU64Attr(hid_t obj, const char* name, uint64_t* out) {
  if (H5Aexists(obj, name) <= 0) return false;
  H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT));
  return H5Aread(attr.get(), H5T_NATIVE_UINT64, out) >= 0;
}

// ---- byte shuffle (the exact layout of HDF5's shuffle filter) --------------------------------

// Blocked transposes: 64 elements at a time keep both sides in cache lines; the fixed-size
// inner loops let the compiler unroll them (the generic strided loop is several times slower).
template <size_t kElem>
void ShuffleFixed(const uint8_t* in, uint8_t* out, size_t n) {
  constexpr size_t kBlock = 64;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t b = 0; b < kElem; ++b) {
      uint8_t* dst = out + b * n + i;
      const uint8_t* src = in + i * kElem + b;
      for (size_t j = 0; j < kBlock; ++j) dst[j] = src[j * kElem];
    }
  }
  for (; i < n; ++i) {
    for (size_t b = 0; b < kElem; ++b) out[b * n + i] = in[i * kElem + b];
  }
}

template <size_t kElem>
void UnshuffleFixed(const uint8_t* in, uint8_t* out, size_t n) {
  constexpr size_t kBlock = 64;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t b = 0; b < kElem; ++b) {
      const uint8_t* src = in + b * n + i;
      uint8_t* dst = out + i * kElem + b;
      for (size_t j = 0; j < kBlock; ++j) dst[j * kElem] = src[j];
    }
  }
  for (; i < n; ++i) {
    for (size_t b = 0; b < kElem; ++b) out[i * kElem + b] = in[b * n + i];
  }
}

// The exact layout of HDF5's shuffle filter: byte b of every element, then byte b+1...
void Shuffle(const uint8_t* in, uint8_t* out, size_t n_elems, size_t elem) {
  switch (elem) {
    case 1:
      std::memcpy(out, in, n_elems);
      return;
    case 2:
      ShuffleFixed<2>(in, out, n_elems);
      return;
    case 4:
      ShuffleFixed<4>(in, out, n_elems);
      return;
    case 8:
      ShuffleFixed<8>(in, out, n_elems);
      return;
  }
  for (size_t b = 0; b < elem; ++b) {
    for (size_t i = 0; i < n_elems; ++i) out[b * n_elems + i] = in[i * elem + b];
  }
}

void Unshuffle(const uint8_t* in, uint8_t* out, size_t n_elems, size_t elem) {
  switch (elem) {
    case 1:
      std::memcpy(out, in, n_elems);
      return;
    case 2:
      UnshuffleFixed<2>(in, out, n_elems);
      return;
    case 4:
      UnshuffleFixed<4>(in, out, n_elems);
      return;
    case 8:
      UnshuffleFixed<8>(in, out, n_elems);
      return;
  }
  for (size_t b = 0; b < elem; ++b) {
    for (size_t i = 0; i < n_elems; ++i) out[i * elem + b] = in[b * n_elems + i];
  }
}

// ---- a small fixed thread pool -----------------------------------------------------------------

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  template <typename F>
  std::future<Status> Submit(F fn) {
    auto task = std::make_shared<std::packaged_task<Status()>>(std::move(fn));
    auto fut = task->get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return fut;
  }
  size_t size() const { return workers_.size(); }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
    }
  }
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
};

int ResolveThreads(int threads) {
  if (threads > 0) return threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

struct CompressedChunk {
  std::vector<uint8_t> bytes;
};

// Compresses chunk `index` of `data` (padding the last one with zeros to a full chunk, as
// HDF5 stores edge chunks full-size).
Status CompressChunk(const uint8_t* data, size_t total_bytes, size_t chunk_bytes, size_t elem,
                     size_t index, bool shuffle, int level, CompressedChunk* out) {
  thread_local std::vector<uint8_t> staging, shuffled;
  // Freed when the thread ends (compression threads live for one shard write; a raw pointer
  // here leaked one context per thread per checkpoint in a long-running ckptd).
  thread_local std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> ctx(ZSTD_createCCtx(),
                                                                      &ZSTD_freeCCtx);
  ZSTD_CCtx* cctx = ctx.get();
  const size_t begin = index * chunk_bytes;
  const size_t n = std::min(chunk_bytes, total_bytes - begin);
  const uint8_t* src = data + begin;
  if (n < chunk_bytes) {
    staging.assign(chunk_bytes, 0);
    std::memcpy(staging.data(), src, n);
    src = staging.data();
  }
  if (shuffle && elem > 1) {
    shuffled.resize(chunk_bytes);
    Shuffle(src, shuffled.data(), chunk_bytes / elem, elem);
    src = shuffled.data();
  }
  out->bytes.resize(ZSTD_compressBound(chunk_bytes));
  // Every frame carries zstd's own content checksum (4 bytes), checked by every decoder, ours
  // and hdf5plugin's alike: a damaged chunk fails to decode even before the XXH3 comparison.
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  size_t got = ZSTD_compress2(cctx, out->bytes.data(), out->bytes.size(), src, chunk_bytes);
  if (ZSTD_isError(got)) {
    return Status::Internal(std::string("zstd compression failed: ") + ZSTD_getErrorName(got));
  }
  out->bytes.resize(got);
  return Status::Ok();
}

Status DecompressChunk(const std::vector<uint8_t>& raw, bool shuffle, bool zstd, size_t elem,
                       size_t chunk_bytes, uint8_t* dst, size_t dst_bytes) {
  thread_local std::vector<uint8_t> plain, unshuffled;
  const uint8_t* src = raw.data();
  size_t size = raw.size();
  if (zstd) {
    plain.resize(chunk_bytes);
    size_t got = ZSTD_decompress(plain.data(), chunk_bytes, raw.data(), raw.size());
    if (ZSTD_isError(got) || got != chunk_bytes) {
      return Status::Corruption(std::string("zstd frame does not decode to a full chunk: ") +
                                (ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong size"));
    }
    src = plain.data();
    size = got;
  }
  if (size != chunk_bytes) return Status::Corruption("chunk has the wrong size");
  if (shuffle && elem > 1) {
    unshuffled.resize(chunk_bytes);
    Unshuffle(src, unshuffled.data(), chunk_bytes / elem, elem);
    src = unshuffled.data();
  }
  std::memcpy(dst, src, dst_bytes);
  return Status::Ok();
}

// Writes one dataset: contiguous when uncompressed, else parallel-compressed direct chunks.
// Starts the kernel's write-back of what HDF5 has written so far, every 64 MiB, so that the
// final fsync of the shard overlaps compression instead of following it.
// Also paces the write (WriteOptions::max_mb_per_s): after each chunk it sleeps until the
// state bytes done so far are not ahead of the allowed rate; the bounded compression window
// then throttles the compression threads too.
struct Writeback {
  int fd = -1;
  uint64_t pending = 0;
  double max_bytes_per_s = 0;
  uint64_t done = 0;  // state bytes (uncompressed) written so far
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  void Wrote(uint64_t bytes, uint64_t raw_bytes) {
    pending += bytes;
    if (fd >= 0 && pending >= (64u << 20)) {
      (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);  // advisory; fsync follows
      pending = 0;
    }
    done += raw_bytes;
    if (max_bytes_per_s > 0) {
      const auto due = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double>(done / max_bytes_per_s));
      std::this_thread::sleep_until(due);
    }
  }
};

// Computes rec->xxh3 on the calling thread while the pool compresses (the hash is sequential
// by nature; it overlaps the parallel compression instead of preceding it).
Status WriteDataset(hid_t file, hid_t lcpl, const std::string& path, DatasetRecord* rec_out,
                    const void* data, const WriteOptions& options, Pool* pool, uint64_t* stored,
                    Writeback* writeback) {
  DatasetRecord& rec = *rec_out;
  const size_t elem = DTypeSize(rec.dtype);
  const hsize_t length = static_cast<hsize_t>(rec.length);
  const size_t total = static_cast<size_t>(rec.length) * elem;
  const bool compressed = options.zstd_level > 0 && rec.length > 0;
  H5Handle space(H5Screate_simple(1, &length, nullptr));
  H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  hsize_t chunk_elems = 0;
  if (compressed) {
    chunk_elems = std::max<hsize_t>(1, std::min<hsize_t>(length, options.chunk_bytes / elem));
    H5Pset_chunk(dcpl.get(), 1, &chunk_elems);
    if (options.shuffle && elem > 1) H5Pset_shuffle(dcpl.get());
    const unsigned cd = static_cast<unsigned>(options.zstd_level);
    if (H5Pset_filter(dcpl.get(), kZstdFilterId, H5Z_FLAG_MANDATORY, 1, &cd) < 0) {
      return H5Fail("set zstd filter", path, rec.H5Path());
    }
  }
  const std::string h5path = rec.H5Path();
  H5Handle ds(H5Dcreate2(file, h5path.c_str(), FileType(rec.dtype), space.get(), lcpl, dcpl.get(),
                         H5P_DEFAULT));
  if (!ds.ok()) return H5Fail("create", path, h5path);
  if (!compressed) {
    rec.xxh3 = Xxh3(data, total);
    if (rec.length > 0 &&
        H5Dwrite(ds.get(), MemType(rec.dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
      return H5Fail("write", path, h5path);
    }
    writeback->Wrote(total, total);
  } else {
    const size_t chunk_bytes = static_cast<size_t>(chunk_elems) * elem;
    const size_t nchunks = (total + chunk_bytes - 1) / chunk_bytes;
    const size_t window = 2 * pool->size();
    std::deque<std::pair<std::future<Status>, std::unique_ptr<CompressedChunk>>> inflight;
    size_t next_submit = 0, next_write = 0;
    const auto* bytes = static_cast<const uint8_t*>(data);
    XXH3_state_t* hash = XXH3_createState();
    XXH3_64bits_reset(hash);
    size_t hashed_chunks = 0;
    while (next_write < nchunks) {
      while (next_submit < nchunks && inflight.size() < window) {
        auto chunk = std::make_unique<CompressedChunk>();
        CompressedChunk* raw = chunk.get();
        const size_t idx = next_submit++;
        const bool shuffle = options.shuffle && elem > 1;
        const int level = options.zstd_level;
        auto fut = pool->Submit([=] {
          return CompressChunk(bytes, total, chunk_bytes, elem, idx, shuffle, level, raw);
        });
        inflight.emplace_back(std::move(fut), std::move(chunk));
      }
      if (hashed_chunks < next_submit) {  // hash while the workers compress
        const size_t b = hashed_chunks * chunk_bytes;
        XXH3_64bits_update(hash, bytes + b, std::min(chunk_bytes, total - b));
        ++hashed_chunks;
        continue;
      }
      auto& front = inflight.front();
      Status s = front.first.get();
      if (!s.ok()) {
        XXH3_freeState(hash);
        return s.Annotate(path + " dataset " + h5path);
      }
      hsize_t offset = static_cast<hsize_t>(next_write) * chunk_elems;
      const auto& cbytes = front.second->bytes;
      if (H5Dwrite_chunk(ds.get(), H5P_DEFAULT, 0, &offset, cbytes.size(), cbytes.data()) < 0) {
        XXH3_freeState(hash);
        return H5Fail("direct chunk write", path, h5path);
      }
      writeback->Wrote(cbytes.size(), std::min(chunk_bytes, total - next_write * chunk_bytes));
      inflight.pop_front();
      ++next_write;
    }
    rec.xxh3 = XXH3_64bits_digest(hash);
    XXH3_freeState(hash);
  }
  bool ok = WriteU64Attr(ds.get(), "xxh3", rec.xxh3) &&
            WriteStringAttr(ds.get(), "dtype", DTypeName(rec.dtype));
  if (rec.is_blob) {
    ok = ok && WriteStringAttr(ds.get(), "policy", rec.policy);
  } else {
    ok = ok && WriteI64Attr(ds.get(), "shape", rec.shape, false) &&
         WriteI64Attr(ds.get(), "offset", {rec.offset}, true);
  }
  if (!ok) return H5Fail("write attributes of", path, h5path);
  *stored = H5Dget_storage_size(ds.get());
  return Status::Ok();
}

}  // namespace

StatusOr<ShardFileInfo> WriteShardFile(const std::string& path, int64_t step, int rank,
                                       int world_size, const ShardContents& contents,
                                       const WriteOptions& options) {
  QuietHdf5();
  FT_RETURN_IF_ERROR(RegisterZstdFilter());
  if (options.zstd_level < 0 || options.zstd_level > 22) {
    return Status::InvalidArgument("zstd level must be in [0, 22], got " +
                                   std::to_string(options.zstd_level));
  }
  H5Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  if (!file.ok()) return H5Fail("create file", path);
  if (!WriteStringAttr(file.get(), "magic", kMagic) ||
      !WriteI64Attr(file.get(), "format_version", {kFormatVersion}, true) ||
      !WriteI64Attr(file.get(), "step", {step}, true) ||
      !WriteI64Attr(file.get(), "rank", {rank}, true) ||
      !WriteI64Attr(file.get(), "world_size", {world_size}, true)) {
    return H5Fail("write root attributes of", path);
  }
  H5Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Pool pool(ResolveThreads(options.threads));
  Writeback writeback;
  writeback.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // -1: no early write-back
  writeback.max_bytes_per_s = options.max_mb_per_s * 1e6;
  struct CloseFd {
    int fd;
    ~CloseFd() {
      if (fd >= 0) ::close(fd);
    }
  } close_fd{writeback.fd};
  ShardFileInfo info;
  info.step = step;
  info.rank = rank;
  info.world_size = world_size;
  for (const auto& t : contents.tensors) {
    DatasetRecord rec;
    rec.kind = t.kind;
    rec.name = t.name;
    rec.dtype = t.dtype;
    rec.shape = t.shape;
    rec.offset = t.offset;
    rec.length = t.length;
    const size_t bytes = static_cast<size_t>(t.length) * DTypeSize(t.dtype);
    FT_RETURN_IF_ERROR(WriteDataset(file.get(), lcpl.get(), path, &rec, t.data, options, &pool,
                                    &rec.stored_bytes, &writeback));
    info.raw_bytes += bytes;
    info.stored_bytes += rec.stored_bytes;
    info.datasets.push_back(std::move(rec));
  }
  for (const auto& b : contents.blobs) {
    DatasetRecord rec;
    rec.is_blob = true;
    rec.kind = b.group;
    rec.name = b.name;
    rec.dtype = DType::kUInt8;
    rec.length = static_cast<int64_t>(b.bytes.size());
    rec.policy = b.policy;
    WriteOptions blob_opts = options;
    blob_opts.zstd_level = 0;  // small; compression would not pay
    FT_RETURN_IF_ERROR(WriteDataset(file.get(), lcpl.get(), path, &rec, b.bytes.data(), blob_opts,
                                    &pool, &rec.stored_bytes, &writeback));
    info.raw_bytes += b.bytes.size();
    info.stored_bytes += rec.stored_bytes;
    info.datasets.push_back(std::move(rec));
  }
  // Closing flushes HDF5's metadata: a failure here (ENOSPC) means the file is incomplete.
  if (H5Fclose(file.release()) < 0) return H5Fail("close (flush) file", path);
  return info;
}

// ---- reading -----------------------------------------------------------------------------------

ShardFileReader::~ShardFileReader() {
  if (file_id_ >= 0) H5Fclose(static_cast<hid_t>(file_id_));  // read-only: nothing to lose
}

StatusOr<std::unique_ptr<ShardFileReader>> ShardFileReader::Open(const std::string& path) {
  QuietHdf5();
  FT_RETURN_IF_ERROR(RegisterZstdFilter());
  std::unique_ptr<ShardFileReader> r(new ShardFileReader());
  r->path_ = path;
  htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return Status::Corruption("'" + path +
                              "' is not a readable HDF5 file (truncated, overwritten or missing "
                              "its superblock)");
  }
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    return Status::Corruption("HDF5 cannot open '" + path + "': " + H5ErrorText() +
                              " (truncated or damaged file)");
  }
  r->file_id_ = f;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) r->file_size_ = static_cast<uint64_t>(st.st_size);
  std::string magic;
  std::vector<int64_t> version, step, rank, world;
  if (!ReadStringAttr(f, "magic", &magic) || magic != kMagic) {
    return Status::Corruption("'" + path + "' has no ftrain checkpoint magic (found '" + magic +
                              "'): not an ftrain checkpoint shard");
  }
  if (!ReadI64Attr(f, "format_version", &version) || version.size() != 1 ||
      version[0] != kFormatVersion) {
    return Status::Corruption("'" + path + "' has format version " +
                              (version.empty() ? std::string("?") : std::to_string(version[0])) +
                              "; this ftrain reads version " + std::to_string(kFormatVersion));
  }
  if (!ReadI64Attr(f, "step", &step) || !ReadI64Attr(f, "rank", &rank) ||
      !ReadI64Attr(f, "world_size", &world) || step.size() != 1 || rank.size() != 1 ||
      world.size() != 1) {
    return Status::Corruption("'" + path + "' lacks its step/rank/world_size attributes");
  }
  r->step_ = step[0];
  r->rank_ = static_cast<int>(rank[0]);
  r->world_size_ = static_cast<int>(world[0]);
  return r;
}

namespace {

struct ListCtx {
  std::vector<std::string> paths;
};

herr_t VisitObject(hid_t, const char* name, const H5O_info_t* info, void* data) {
  if (info->type == H5O_TYPE_DATASET) static_cast<ListCtx*>(data)->paths.push_back(name);
  return 0;
}

}  // namespace

StatusOr<std::vector<DatasetRecord>> ShardFileReader::ListDatasets() {
  hid_t f = static_cast<hid_t>(file_id_);
  ListCtx ctx;
  if (H5Ovisit(f, H5_INDEX_NAME, H5_ITER_INC, VisitObject, &ctx) < 0) {
    return Status::Corruption("cannot list the datasets of '" + path_ + "': " + H5ErrorText());
  }
  std::vector<DatasetRecord> out;
  for (const auto& p : ctx.paths) {
    DatasetRecord rec;
    size_t slash = p.find_last_of('/');
    if (slash == std::string::npos) {
      return Status::Corruption("'" + path_ + "' has a dataset '/" + p + "' outside any group");
    }
    rec.kind = p.substr(0, slash);
    rec.name = p.substr(slash + 1);
    H5Handle ds(H5Dopen2(f, ("/" + p).c_str(), H5P_DEFAULT));
    if (!ds.ok()) return Status::Corruption("cannot open dataset /" + p + " in '" + path_ + "'");
    std::string dtype;
    if (!ReadStringAttr(ds.get(), "dtype", &dtype) || !ReadU64Attr(ds.get(), "xxh3", &rec.xxh3)) {
      return Status::Corruption("dataset /" + p + " in '" + path_ +
                                "' lacks its dtype/xxh3 attributes");
    }
    FT_ASSIGN_OR_RETURN(rec.dtype, DTypeFromName(dtype));
    H5Handle space(H5Dget_space(ds.get()));
    rec.length = H5Sget_simple_extent_npoints(space.get());
    rec.stored_bytes = H5Dget_storage_size(ds.get());
    if (ReadStringAttr(ds.get(), "policy", &rec.policy)) {
      rec.is_blob = true;
    } else {
      std::vector<int64_t> off;
      if (!ReadI64Attr(ds.get(), "shape", &rec.shape) || !ReadI64Attr(ds.get(), "offset", &off) ||
          off.size() != 1) {
        return Status::Corruption("dataset /" + p + " in '" + path_ +
                                  "' lacks its shape/offset attributes");
      }
      rec.offset = off[0];
    }
    out.push_back(std::move(rec));
  }
  return out;
}

namespace {

// Reads every element of an open dataset into dst (`total` bytes of `elem`-byte elements):
// chunked datasets compressed by ftrain's filters are read chunk by chunk and decompressed in
// parallel; anything else goes through H5Dread.
Status ReadDatasetInto(hid_t ds, const std::string& path, const std::string& h5path, size_t elem,
                       size_t total, uint8_t* dst_base, int threads) {
  if (total == 0) return Status::Ok();
  H5Handle dcpl(H5Dget_create_plist(ds));
  H5Handle type(H5Dget_type(ds));
  bool shuffle = false, zstd = false, other = false;
  const int nfilters = H5Pget_nfilters(dcpl.get());
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags, cd[8];
    size_t ncd = 8;
    H5Z_filter_t id =
        H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &ncd, cd, 0, nullptr, nullptr);
    if (id == H5Z_FILTER_SHUFFLE)
      shuffle = true;
    else if (id == kZstdFilterId)
      zstd = true;
    else
      other = true;
  }
  if (H5Pget_layout(dcpl.get()) == H5D_CHUNKED && !other) {
    hsize_t chunk_elems = 0;
    if (H5Pget_chunk(dcpl.get(), 1, &chunk_elems) != 1 || chunk_elems == 0) {
      return Status::Corruption("dataset " + h5path + " in '" + path + "' has a bad chunk layout");
    }
    const size_t chunk_bytes = static_cast<size_t>(chunk_elems) * elem;
    const size_t nchunks = (total + chunk_bytes - 1) / chunk_bytes;
    Pool pool(static_cast<int>(std::min(static_cast<size_t>(ResolveThreads(threads)), nchunks)));
    std::deque<std::pair<std::future<Status>, std::shared_ptr<std::vector<uint8_t>>>> inflight;
    // Tasks write into dst_base: never return while one is still running.
    auto drain = [&inflight] {
      for (auto& f : inflight) f.first.wait();
    };
    size_t next = 0, done = 0;
    while (done < nchunks) {
      while (next < nchunks && inflight.size() < 2 * pool.size()) {
        hsize_t offset = static_cast<hsize_t>(next) * chunk_elems;
        hsize_t csize = 0;
        // A stored chunk is never much larger than its raw bytes (zstd's worst case is a few
        // hundred bytes over); a larger size is a damaged index, refused before allocating.
        if (H5Dget_chunk_storage_size(ds, &offset, &csize) < 0 ||
            csize > chunk_bytes + chunk_bytes / 64 + 4096) {
          drain();
          return Status::Corruption("chunk " + std::to_string(next) + " of dataset " + h5path +
                                    " in '" + path +
                                    "' is missing or has an impossible size: " + H5ErrorText());
        }
        auto raw = std::make_shared<std::vector<uint8_t>>(csize);
        uint32_t mask = 0;
        if (H5Dread_chunk(ds, H5P_DEFAULT, &offset, &mask, raw->data()) < 0) {
          drain();
          return Status::Corruption("reading chunk " + std::to_string(next) + " of dataset " +
                                    h5path + " in '" + path + "' failed: " + H5ErrorText() +
                                    " (truncated file?)");
        }
        const bool use_shuffle = shuffle && !(mask & 1u);
        const bool use_zstd = zstd && !(mask & (shuffle ? 2u : 1u));
        const size_t begin = next * chunk_bytes;
        const size_t len = std::min(chunk_bytes, total - begin);
        uint8_t* dst = dst_base + begin;
        auto fut = pool.Submit([raw, use_shuffle, use_zstd, elem, chunk_bytes, dst, len] {
          return DecompressChunk(*raw, use_shuffle, use_zstd, elem, chunk_bytes, dst, len);
        });
        inflight.emplace_back(std::move(fut), raw);
        ++next;
      }
      Status s = inflight.front().first.get();
      inflight.pop_front();
      if (!s.ok()) {
        drain();
        return Status::Corruption("dataset " + h5path + " in '" + path + "', chunk " +
                                  std::to_string(done) + ": " + s.message());
      }
      ++done;
    }
    return Status::Ok();
  }
  H5Handle mem_type(H5Tget_native_type(type.get(), H5T_DIR_ASCEND));
  if (H5Dread(ds, mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, dst_base) < 0) {
    return Status::Corruption("reading dataset " + h5path + " of '" + path +
                              "' failed: " + H5ErrorText() + " (damaged or truncated data)");
  }
  return Status::Ok();
}

// An open dataset of a shard with its element count and stored type.
struct OpenDataset {
  H5Handle ds, type;
  hssize_t n = -1;
};

Status OpenDatasetIn(int64_t file_id, const std::string& path, const std::string& h5path,
                     OpenDataset* out) {
  out->ds.reset(H5Dopen2(static_cast<hid_t>(file_id), h5path.c_str(), H5P_DEFAULT));
  if (!out->ds.ok()) return Status::Corruption("'" + path + "' has no dataset " + h5path);
  H5Handle space(H5Dget_space(out->ds.get()));
  out->n = H5Sget_simple_extent_npoints(space.get());
  out->type.reset(H5Dget_type(out->ds.get()));
  return Status::Ok();
}

}  // namespace

Status ShardFileReader::ReadAll(const std::string& h5path, std::vector<uint8_t>* out, bool verify,
                                int threads) {
  OpenDataset d;
  FT_RETURN_IF_ERROR(OpenDatasetIn(file_id_, path_, h5path, &d));
  const H5Handle& ds = d.ds;
  const hssize_t n = d.n;
  const size_t elem = H5Tget_size(d.type.get());
  // zstd cannot expand data by more than ~2000x: a bigger claim is a damaged header, refused
  // before allocating.
  if (n < 0 || elem == 0 || elem > 8 ||
      static_cast<uint64_t>(n) * elem > file_size_ * 2048 + (uint64_t{1} << 20)) {
    return Status::Corruption("dataset " + h5path + " in '" + path_ +
                              "' claims an impossible size (damaged header)");
  }
  const size_t total = static_cast<size_t>(n) * elem;
  out->resize(total);
  uint64_t want = 0;
  if (verify && !ReadU64Attr(ds.get(), "xxh3", &want)) {
    return Status::Corruption("dataset " + h5path + " in '" + path_ + "' lacks its xxh3 attribute");
  }
  FT_RETURN_IF_ERROR(ReadDatasetInto(ds.get(), path_, h5path, elem, total, out->data(), threads));
  if (verify) {
    const uint64_t got = Xxh3(out->data(), out->size());
    if (got != want) {
      return Status::Corruption("checksum mismatch in '" + path_ + "' dataset " + h5path +
                                ": stored xxh3 " + Hex64(want) + ", computed " + Hex64(got));
    }
  }
  return Status::Ok();
}

Status ShardFileReader::ReadAllInto(const std::string& h5path, DType dtype, int64_t elems,
                                    void* dst, int threads, uint64_t* xxh3) {
  OpenDataset d;
  FT_RETURN_IF_ERROR(OpenDatasetIn(file_id_, path_, h5path, &d));
  const H5Handle& ds = d.ds;
  const H5Handle& type = d.type;
  const hssize_t n = d.n;
  // The element type first: an F64 dataset where the manifest says float32 would overflow a
  // buffer sized from the manifest.
  if (H5Tequal(type.get(), FileType(dtype)) <= 0) {
    return Status::Corruption("dataset " + h5path + " in '" + path_ + "' is not stored as " +
                              DTypeName(dtype) + " as the manifest says (damaged or foreign file)");
  }
  if (n != elems) {
    return Status::Corruption("dataset " + h5path + " in '" + path_ + "' has " + std::to_string(n) +
                              " elements; the manifest says " + std::to_string(elems));
  }
  const size_t total = static_cast<size_t>(elems) * DTypeSize(dtype);
  FT_RETURN_IF_ERROR(ReadDatasetInto(ds.get(), path_, h5path, DTypeSize(dtype), total,
                                     static_cast<uint8_t*>(dst), threads));
  if (xxh3 != nullptr) *xxh3 = Xxh3(dst, total);
  return Status::Ok();
}

}  // namespace ftrain::ckpt
