// ShardFileReader: opens a shard (magic, format version, step/rank/world attributes), lists
// its datasets and reads them whole; compressed chunks are read on the calling thread and
// decompressed on a thread pool. Checking bytes against the manifest is the caller's job
// (reader.cc, verify.cc); a dataset's own xxh3 attribute is checked here when asked.
#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <deque>
#include <future>
#include <memory>

#include "ckpt/chunk_codec.h"
#include "ckpt/h5_util.h"
#include "ckpt/h5zstd.h"
#include "ckpt/shard_file.h"
#include "core/thread_pool.h"

namespace ftrain::ckpt {

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
    ThreadPool pool(
        static_cast<int>(std::min(static_cast<size_t>(ResolveThreads(threads)), nchunks)));
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
