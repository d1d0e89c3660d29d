// A byte range of one uncompressed input file, for `ftrain pack --part I/N` (pack_parts.h):
// reading it as an InputStream, finding the line boundaries a range is cut at, counting the
// lines before it (so messages and bad-records.jsonl name the file's own line numbers) and
// hashing a whole file (index.json records every input's hash, whichever part read it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "data/pack/input_files.h"

namespace ftrain::data {

// Stored bytes [begin, end) of an uncompressed file whose first line is line lines_before + 1.
// The default is the whole file, read the usual way (InputStream::Open).
struct FileSlice {
  uint64_t begin = 0;
  uint64_t end = UINT64_MAX;
  uint64_t lines_before = 0;
  bool whole() const { return begin == 0 && end == UINT64_MAX; }
};

// Reads [slice.begin, slice.end) of `file` with pread; raw_bytes() counts the slice's bytes.
StatusOr<std::unique_ptr<InputStream>> OpenFileSlice(const InputFile& file, const FileSlice& slice);

// The first line start at or after `pos` in a file of `size` bytes: 0 for 0, else one past the
// first '\n' at or after pos - 1, or `size` when there is none.
StatusOr<uint64_t> LineStartAtOrAfter(const std::string& path, uint64_t pos, uint64_t size);

// The number of '\n' bytes in [0, end) of the file.
StatusOr<uint64_t> CountNewlines(const std::string& path, uint64_t end);

// XXH3-64 of the whole file, checking it still holds `size` bytes.
StatusOr<uint64_t> HashWholeFile(const std::string& path, uint64_t size);

}  // namespace ftrain::data
