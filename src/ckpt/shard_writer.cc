// WriteShardFile: one rank's shard as an HDF5 file. Tensors are compressed chunk by chunk on
// a thread pool (chunk_codec.h) and stored with HDF5 direct chunk writes on the calling
// thread, in order; blobs are written contiguous. No fsync, rename or commit here (store.cc).
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <thread>

#include "ckpt/chunk_codec.h"
#include "ckpt/h5_util.h"
#include "ckpt/h5zstd.h"
#include "ckpt/shard_file.h"
#include "core/thread_pool.h"

namespace ftrain::ckpt {
namespace {

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
                    const void* data, const WriteOptions& options, ThreadPool* pool,
                    uint64_t* stored, Writeback* writeback) {
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
  ThreadPool pool(ResolveThreads(options.threads));
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

}  // namespace ftrain::ckpt
