// Cursor blob encoding: "key=value" fields after a magic and version, XXH3-64 last.
#include "data/read/cursor.h"

#include <map>
#include <sstream>

#include "core/config.h"
#include "data/format/hash.h"

namespace ftrain::data {
namespace {

constexpr char kMagic[] = "ftrain-data-cursor";

std::string Body(const Cursor& c) {
  std::ostringstream o;
  o << kMagic << ' ' << kCursorVersion << " data=" << c.data_version << " seed=" << c.seed
    << " rows=" << c.num_rows << " chunk=" << c.chunk_rows << " window=" << c.window_chunks
    << " pos=" << c.position << " epoch=" << c.epoch() << " rank=" << c.dp_rank
    << " world=" << c.dp_size << " mb=" << c.micro_batch;
  return o.str();
}

Status Bad(const std::string& why) {
  return Status::Corruption("data cursor is invalid: " + why +
                            " (the checkpoint's data cursor is damaged or from another version)");
}

Status GetU64(const std::map<std::string, std::string>& f, const char* key, uint64_t* out) {
  auto it = f.find(key);
  if (it == f.end()) return Bad(std::string("field '") + key + "' is missing");
  int64_t v = 0;
  if (!ParseInt64(it->second, &v) || v < 0) {
    return Bad(std::string("field '") + key + "' = '" + it->second + "' is not a number >= 0");
  }
  *out = static_cast<uint64_t>(v);
  return Status::Ok();
}

}  // namespace

std::string Cursor::Encode() const {
  std::string body = Body(*this);
  return body + " sum=" + Hex64(Hash64(body.data(), body.size()));
}

StatusOr<Cursor> Cursor::Decode(const std::string& blob) {
  if (blob.size() > 1024) return Bad("it is " + std::to_string(blob.size()) + " bytes long");
  if (blob.rfind(std::string(kMagic) + " ", 0) != 0) {
    return Bad("it does not start with '" + std::string(kMagic) + "'");
  }
  size_t sum_at = blob.rfind(" sum=");
  if (sum_at == std::string::npos) return Bad("the checksum field 'sum' is missing");
  uint64_t want = 0;
  if (!ParseHex64(blob.substr(sum_at + 5), &want)) return Bad("'sum' is not 16 hex digits");
  std::string body = blob.substr(0, sum_at);
  if (Hash64(body.data(), body.size()) != want) return Bad("checksum mismatch");

  std::istringstream in(body);
  std::string magic, version;
  in >> magic >> version;
  if (version != std::to_string(kCursorVersion)) {
    return Bad("version " + version + " is not supported (this build reads version " +
               std::to_string(kCursorVersion) + ")");
  }
  std::map<std::string, std::string> f;
  std::string tok;
  while (in >> tok) {
    size_t eq = tok.find('=');
    if (eq == std::string::npos) return Bad("token '" + tok + "' is not key=value");
    f[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  Cursor c;
  uint64_t v = 0, chunk = 0, window = 0, rank = 0, world = 0, mb = 0, epoch = 0;
  c.data_version = f["data"];
  if (!ParseHex64(c.data_version, &v)) return Bad("'data' is not 16 hex digits");
  FT_RETURN_IF_ERROR(GetU64(f, "seed", &c.seed));
  FT_RETURN_IF_ERROR(GetU64(f, "rows", &c.num_rows));
  FT_RETURN_IF_ERROR(GetU64(f, "chunk", &chunk));
  FT_RETURN_IF_ERROR(GetU64(f, "window", &window));
  FT_RETURN_IF_ERROR(GetU64(f, "pos", &c.position));
  FT_RETURN_IF_ERROR(GetU64(f, "epoch", &epoch));
  FT_RETURN_IF_ERROR(GetU64(f, "rank", &rank));
  FT_RETURN_IF_ERROR(GetU64(f, "world", &world));
  FT_RETURN_IF_ERROR(GetU64(f, "mb", &mb));
  if (c.num_rows == 0 || chunk == 0 || window == 0 || world == 0 || rank >= world || mb == 0 ||
      chunk > UINT32_MAX || window > UINT32_MAX || world > INT32_MAX || mb > INT32_MAX) {
    return Bad("a field is out of range");
  }
  c.chunk_rows = static_cast<uint32_t>(chunk);
  c.window_chunks = static_cast<uint32_t>(window);
  c.dp_rank = static_cast<int>(rank);
  c.dp_size = static_cast<int>(world);
  c.micro_batch = static_cast<int>(mb);
  if (epoch != c.epoch()) return Bad("'epoch' does not match pos/rows");
  return c;
}

}  // namespace ftrain::data
