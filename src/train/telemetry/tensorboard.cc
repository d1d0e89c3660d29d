// TensorBoard event file writing. Plain stdio, not Env, like metrics.jsonl: event files are
// not crash-sensitive state, and counting their writes would move the crash tests' crash
// points (FTRAIN_CRASH_AT).
#include "train/telemetry/tensorboard.h"

#include <unistd.h>

#include <boost/crc.hpp>
#include <cerrno>
#include <cstring>

#include "core/prom_textfile.h"
#include "tensorboard_event.pb.h"

namespace ftrain::train {
namespace {

constexpr char kFileVersion[] = "brain.Event:2";

void PutLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t MaskedCrc32c(const void* data, size_t n) {
  // CRC-32C: polynomial 0x1EDC6F41, reflected, initial and final XOR 0xFFFFFFFF.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, n);
  const uint32_t c = crc.checksum();
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;  // TFRecord's mask
}

std::string FrameTfRecord(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  PutLittleEndian(data.size(), 8, &out);
  PutLittleEndian(MaskedCrc32c(out.data(), 8), 4, &out);
  out += data;
  PutLittleEndian(MaskedCrc32c(data.data(), data.size()), 4, &out);
  return out;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);  // ignored: every record was flushed already
}

StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(const std::string& dir,
                                                                     int64_t first_step,
                                                                     double unix_time) {
  Status s = MakeMetricsDirs(dir);
  if (!s.ok()) return s.Annotate("TensorBoard directory (metrics.tensorboard)");
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter());
  w->path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(unix_time)) + "." +
             PromSafeName(host) + "." + std::to_string(::getpid());
  w->file_ = std::fopen(w->path_.c_str(), "wb");
  if (w->file_ == nullptr) {
    return Status::IOError("cannot create TensorBoard event file '" + w->path_ +
                           "': " + std::strerror(errno) +
                           " (set metrics.tensorboard = false to run without it)");
  }
  tensorboard::Event version;
  version.set_wall_time(unix_time);
  version.set_file_version(kFileVersion);
  FT_RETURN_IF_ERROR(w->WriteRecord(version.SerializeAsString()));
  // TensorBoard purges every event at or past this step seen so far (earlier files of this
  // run): what a crashed process wrote after the checkpoint this one resumed from.
  tensorboard::Event start;
  start.set_wall_time(unix_time);
  start.set_step(first_step);
  start.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  FT_RETURN_IF_ERROR(w->WriteRecord(start.SerializeAsString()));
  return w;
}

Status TensorBoardWriter::WriteScalars(int64_t step, double wall_time,
                                       const std::vector<std::pair<std::string, float>>& scalars) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  tensorboard::Summary* summary = e.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(value);
  }
  return WriteRecord(e.SerializeAsString());
}

Status TensorBoardWriter::WriteRecord(const std::string& event_bytes) {
  const std::string record = FrameTfRecord(event_bytes);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return Status::IOError("writing TensorBoard event file '" + path_ +
                           "': " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace ftrain::train
