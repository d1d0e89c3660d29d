// WireWriter / WireReader: the little-endian framing both ckptd protocols use (the trainer's
// unix-socket protocol, ckptd_protocol.cc, and the daemons' peer protocol, daemon/peer_wire.cc):
// fixed-size values and u32-length-prefixed strings. The reader never reads past its input
// (every bound is checked without overflow) and never allocates more than a string's bound.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace ftrain::ckpt {

class WireWriter {
 public:
  template <typename T>
  void Put(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));  // little-endian hosts only
  }
  void Str(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  void Raw(const std::string& s) { out_ += s; }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class WireReader {
 public:
  explicit WireReader(const std::string& in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (in_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  // A u32 length (at most `max`) and that many bytes.
  bool Str(std::string* s, size_t max) {
    uint32_t n = 0;
    if (!Get(&n) || n > max || in_.size() - pos_ < n) return false;
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool Raw(std::string* s, size_t n) {
    if (in_.size() - pos_ < n) return false;
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  std::string Rest() { return in_.substr(pos_); }
  bool Done() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

// The 16-byte frame header both protocols use: magic, version, type, payload length, reserved.
inline std::string EncodeFrameHeader16(uint32_t magic, uint16_t version, uint16_t type,
                                       uint32_t length) {
  WireWriter w;
  w.Put<uint32_t>(magic);
  w.Put<uint16_t>(version);
  w.Put<uint16_t>(type);
  w.Put<uint32_t>(length);
  w.Put<uint32_t>(0);
  return w.Take();
}

}  // namespace ftrain::ckpt
