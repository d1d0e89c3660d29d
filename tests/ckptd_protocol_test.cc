// Unit tests of the ckptd wire protocol's decoders (src/ckpt/ckptd_protocol.*), no sockets:
// every message round-trips through its encoder, and truncated, oversized or out-of-range
// frames are refused with an InvalidArgument that says what was wrong. The daemon end to end
// is ckptd_test (multiproc); random damage is tests/fuzz.
#include "ckpt/ckptd_protocol.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "ckpt/wire_codec.h"
#include "test_util.h"

namespace ftrain::ckpt::proto {
namespace {

using ::ftrain::testing::Contains;

constexpr uint64_t kSlot = 1 << 20;

// Expects `s` to be a protocol refusal whose message contains `what`.
template <typename T>
void ExpectRefused(const StatusOr<T>& s, const std::string& what) {
  ASSERT_FALSE(s.ok()) << "accepted; wanted '" << what << "'";
  EXPECT_TRUE(s.status().IsInvalidArgument()) << s.status().ToString();
  EXPECT_TRUE(Contains(s.status().message(), "ckptd protocol: ")) << s.status().message();
  EXPECT_TRUE(Contains(s.status().message(), what)) << s.status().message();
}

Submit ASubmit() {
  Submit m;
  m.step = 42;
  m.slot = 1;
  m.stall_ns = 12345;
  m.meta.step = 42;
  m.meta.world_size = 4;
  m.meta.config_hash = "0123456789abcdef";
  m.meta.code_version = "v1";
  m.meta.data_version = "data-abc";
  m.meta.layout_json = "{\"dp\":4}";
  m.meta.generation = "gen-7";
  PieceDesc t;
  t.kind = "model";
  t.name = "model.layers.0.mlp.up_proj.weight";
  t.dtype = DType::kBFloat16;
  t.shape = {8, 16};
  t.offset = 32;
  t.length = 32;
  t.slot_offset = 0;
  m.pieces.push_back(t);
  PieceDesc b;
  b.is_blob = true;
  b.kind = "rng";
  b.name = "cpu";
  b.policy = "per_rank";
  b.length = 100;
  b.slot_offset = 64;
  m.pieces.push_back(b);
  return m;
}

void ExpectSameSubmit(const Submit& a, const Submit& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.slot, b.slot);
  EXPECT_EQ(a.stall_ns, b.stall_ns);
  EXPECT_EQ(a.meta.step, b.meta.step);
  EXPECT_EQ(a.meta.world_size, b.meta.world_size);
  EXPECT_EQ(a.meta.config_hash, b.meta.config_hash);
  EXPECT_EQ(a.meta.code_version, b.meta.code_version);
  EXPECT_EQ(a.meta.data_version, b.meta.data_version);
  EXPECT_EQ(a.meta.layout_json, b.meta.layout_json);
  EXPECT_EQ(a.meta.generation, b.meta.generation);
  ASSERT_EQ(a.pieces.size(), b.pieces.size());
  for (size_t i = 0; i < a.pieces.size(); ++i) {
    const PieceDesc &p = a.pieces[i], &q = b.pieces[i];
    EXPECT_EQ(p.is_blob, q.is_blob) << i;
    EXPECT_EQ(p.kind, q.kind) << i;
    EXPECT_EQ(p.name, q.name) << i;
    EXPECT_EQ(p.policy, q.policy) << i;
    EXPECT_EQ(p.dtype, q.dtype) << i;
    EXPECT_EQ(p.shape, q.shape) << i;
    EXPECT_EQ(p.offset, q.offset) << i;
    EXPECT_EQ(p.length, q.length) << i;
    EXPECT_EQ(p.slot_offset, q.slot_offset) << i;
  }
}

TEST(CkptdHeader, RoundTripAndFrame) {
  const std::string h = EncodeHeader(MsgType::kSubmit, 1234);
  ASSERT_EQ(h.size(), kHeaderBytes);
  auto d = DecodeHeader(reinterpret_cast<const uint8_t*>(h.data()));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->magic, kMagic);
  EXPECT_EQ(d->version, kVersion);
  EXPECT_EQ(d->type, static_cast<uint16_t>(MsgType::kSubmit));
  EXPECT_EQ(d->length, 1234u);
  const std::string f = Frame(MsgType::kStatus, "abc");
  EXPECT_EQ(f, EncodeHeader(MsgType::kStatus, 3) + "abc");
}

TEST(CkptdHeader, RefusesBadMagicVersionTypeAndLength) {
  auto patched = [](size_t at, const void* v, size_t n) {
    std::string h = EncodeHeader(MsgType::kHello, 16);
    std::memcpy(&h[at], v, n);
    return DecodeHeader(reinterpret_cast<const uint8_t*>(h.data()));
  };
  const uint32_t magic = 0x12345678;
  ExpectRefused(patched(0, &magic, 4), "bad magic");
  const uint16_t version = kVersion + 1;
  ExpectRefused(patched(4, &version, 2), "version 2 (this daemon speaks 1)");
  for (uint16_t type : {uint16_t{0}, uint16_t{14}, uint16_t{0xffff}}) {
    ExpectRefused(patched(6, &type, 2), "unknown message type " + std::to_string(type));
  }
  const uint32_t too_long = kMaxPayload + 1;
  ExpectRefused(patched(8, &too_long, 4), "too large");
  const uint32_t max_ok = kMaxPayload;
  EXPECT_TRUE(patched(8, &max_ok, 4).ok());
}

TEST(CkptdHello, RoundTripAndRanges) {
  Hello h{3, 8, 999, 4096};
  auto d = DecodeHello(EncodeHello(h));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->rank, 3);
  EXPECT_EQ(d->world, 8);
  EXPECT_EQ(d->pid, 999);
  EXPECT_EQ(d->slot_bytes, 4096u);

  const std::string full = EncodeHello(h);
  for (size_t n = 0; n < full.size(); ++n) {
    ExpectRefused(DecodeHello(full.substr(0, n)), "malformed HELLO");  // every truncation
  }
  ExpectRefused(DecodeHello(full + "x"), "malformed HELLO");  // trailing byte
  ExpectRefused(DecodeHello(EncodeHello({0, 0, 1, 4096})), "world size 0 out of range");
  ExpectRefused(DecodeHello(EncodeHello({8, 8, 1, 4096})), "rank 8 out of range for world 8");
  ExpectRefused(DecodeHello(EncodeHello({-1, 8, 1, 4096})), "rank -1 out of range");
  ExpectRefused(DecodeHello(EncodeHello({0, 1, 1, 0})), "slot size out of range");
  ExpectRefused(DecodeHello(EncodeHello({0, 1, 1, (uint64_t{1} << 40) + 1})),
                "slot size out of range");
}

TEST(CkptdHelloOk, RoundTripTruncationAndLimits) {
  HelloOk m;
  m.slot_bytes = 1 << 20;
  m.shm_names = {"/ftrain-ckptd-abc-r0-s0", "/ftrain-ckptd-abc-r0-s1"};
  const std::string full = EncodeHelloOk(m);
  auto d = DecodeHelloOk(full);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->slot_bytes, m.slot_bytes);
  EXPECT_EQ(d->shm_names, m.shm_names);
  for (size_t n = 0; n < full.size(); ++n) {
    ExpectRefused(DecodeHelloOk(full.substr(0, n)), "malformed HELLO_OK");
  }
  ExpectRefused(DecodeHelloOk(full + "x"), "malformed HELLO_OK");
  HelloOk many;
  many.shm_names.assign(65, "n");  // more slots than any rank has
  ExpectRefused(DecodeHelloOk(EncodeHelloOk(many)), "malformed HELLO_OK");
  HelloOk long_name;
  long_name.shm_names = {std::string(256, 'a')};
  ExpectRefused(DecodeHelloOk(EncodeHelloOk(long_name)), "malformed HELLO_OK");
}

TEST(CkptdU32, RoundTripAndExactLength) {
  auto d = DecodeU32(EncodeU32(0xdeadbeef));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, 0xdeadbeefu);
  ExpectRefused(DecodeU32("abc"), "expected one u32");
  ExpectRefused(DecodeU32(EncodeU32(1) + "x"), "expected one u32");
}

TEST(CkptdSubmit, RoundTrip) {
  const Submit m = ASubmit();
  auto d = DecodeSubmit(EncodeSubmit(m), kSlot);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ExpectSameSubmit(*d, m);
}

TEST(CkptdSubmit, WithoutTheGenerationTrailerStillDecodes) {
  // Writers from before fencing sent no generation; the trailer is optional.
  Submit m = ASubmit();
  m.meta.generation.clear();
  std::string bytes = EncodeSubmit(m);
  bytes.resize(bytes.size() - 4);  // drop the empty generation string (its u32 length)
  auto d = DecodeSubmit(bytes, kSlot);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->meta.generation, "");
}

TEST(CkptdSubmit, EveryTruncationIsRefused) {
  const std::string full = EncodeSubmit(ASubmit());
  const size_t no_trailer = full.size() - 4 - ASubmit().meta.generation.size();
  for (size_t n = 0; n < full.size(); ++n) {
    if (n == no_trailer) continue;  // a whole message without the optional trailer
    auto d = DecodeSubmit(full.substr(0, n), kSlot);
    EXPECT_FALSE(d.ok()) << "a SUBMIT cut at " << n << " of " << full.size() << " was accepted";
    if (!d.ok()) {
      EXPECT_TRUE(d.status().IsInvalidArgument()) << d.status().ToString();
    }
  }
  ExpectRefused(DecodeSubmit(full + "x", kSlot), "trailing bytes in SUBMIT");
}

TEST(CkptdSubmit, RangesNamesAndSlotBounds) {
  auto refused = [](void (*mutate)(Submit*), const std::string& what) {
    Submit m = ASubmit();
    mutate(&m);
    ExpectRefused(DecodeSubmit(EncodeSubmit(m), kSlot), what);
  };
  refused([](Submit* m) { m->step = -1; }, "step -1 out of range");
  refused([](Submit* m) { m->meta.world_size = 0; }, "world size 0 out of range");
  refused([](Submit* m) { m->pieces[0].name = "../escape"; }, "piece 0 has an unsafe name");
  refused([](Submit* m) { m->pieces[1].kind = "/abs"; }, "piece 1 has an unsafe name");
  refused([](Submit* m) { m->pieces[1].policy = "sometimes"; }, "bad blob policy");
  refused([](Submit* m) { m->pieces[0].offset = -1; }, "negative offset or length");
  refused([](Submit* m) { m->pieces[0].shape = {-1, 4}; }, "bad shape");
  refused([](Submit* m) { m->pieces[0].length = 200; }, "slice outside the tensor");
  refused([](Submit* m) { m->pieces[0].slot_offset = kSlot - 2; }, "piece 0 lies outside the slot");
  refused([](Submit* m) { m->pieces[1].length = kSlot + 1; }, "piece 1 lies outside the slot");
  refused([](Submit* m) { m->pieces[0].dtype = static_cast<DType>(200); },
          "bad piece kind or dtype");
  refused([](Submit* m) { m->pieces[0].shape.assign(9, 1); }, "malformed piece 0");
  refused([](Submit* m) { m->meta.config_hash.assign(kMaxMetaBytes + 1, 'h'); },
          "malformed SUBMIT");
  refused([](Submit* m) { m->pieces[0].name.assign(kMaxNameBytes + 1, 'n'); }, "malformed piece 0");
}

TEST(CkptdRestore, NewestOrANamedStep) {
  EXPECT_EQ(EncodeRestore(-1), "");
  auto newest = DecodeRestore("");
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(*newest, -1);
  auto named = DecodeRestore(EncodeRestore(25));
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(*named, 25);
  ExpectRefused(DecodeRestore("x"), "malformed RESTORE");
  ExpectRefused(DecodeRestore(EncodeRestore(25) + "x"), "malformed RESTORE");
  WireWriter w;
  w.Put(int64_t{-3});
  ExpectRefused(DecodeRestore(w.Take()), "negative step");
}

TEST(CkptdRestoreOk, FoundNotFoundAndDamage) {
  auto none = DecodeRestoreOk(EncodeRestoreOk(nullptr), kSlot);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());
  const Submit m = ASubmit();
  auto some = DecodeRestoreOk(EncodeRestoreOk(&m), kSlot);
  ASSERT_TRUE(some.ok()) << some.status().ToString();
  ASSERT_TRUE(some->has_value());
  ExpectSameSubmit(**some, m);
  ExpectRefused(DecodeRestoreOk("", kSlot), "without a valid 'found' byte");
  ExpectRefused(DecodeRestoreOk("\x02", kSlot), "without a valid 'found' byte");
  ExpectRefused(DecodeRestoreOk(std::string("\0x", 2), kSlot), "'not found' with trailing bytes");
  ExpectRefused(DecodeRestoreOk("\x01", kSlot), "malformed SUBMIT");
  // A retained snapshot that no longer fits the slot this client mapped.
  ExpectRefused(DecodeRestoreOk(EncodeRestoreOk(&m), 100), "lies outside the slot");
}

TEST(CkptdContentsOf, TensorsPointIntoTheSlotBlobsAreCopied) {
  std::string slot(256, '\0');
  for (size_t i = 0; i < slot.size(); ++i) slot[i] = static_cast<char>(i);
  const Submit m = ASubmit();
  const auto* base = reinterpret_cast<const uint8_t*>(slot.data());
  const ShardContents c = ContentsOf(m, base);
  ASSERT_EQ(c.tensors.size(), 1u);
  ASSERT_EQ(c.blobs.size(), 1u);
  EXPECT_EQ(c.tensors[0].data, base);
  EXPECT_EQ(c.tensors[0].name, m.pieces[0].name);
  EXPECT_EQ(c.tensors[0].shape, m.pieces[0].shape);
  EXPECT_EQ(c.blobs[0].bytes, slot.substr(64, 100));
}

TEST(CkptdNames, SafeNamesAndNodeIds) {
  for (const char* ok : {"model", "a/b", "model.layers.0.w", "x-y_z"}) {
    EXPECT_TRUE(IsSafeDatasetName(ok)) << ok;
  }
  for (const char* bad : {"", "/a", "a/", "a//b", "a/../b", "..", "a b", "a\\b"}) {
    EXPECT_FALSE(IsSafeDatasetName(bad)) << bad;
  }
  EXPECT_TRUE(IsSafeNodeId("node-01.cluster_a"));
  for (const std::string& bad :
       {std::string(""), std::string(".hidden"), std::string("a/b"), std::string(65, 'n')}) {
    EXPECT_FALSE(IsSafeNodeId(bad)) << bad;
  }
  EXPECT_EQ(SocketPath("/run", "n0"), "/run/ckptd-n0/sock");
  EXPECT_EQ(ShmName("/run", "n0", 3, 1).rfind("/" + ShmPrefix("/run", "n0"), 0), 0u);
  EXPECT_NE(ShmPrefix("/run", "n0"), ShmPrefix("/run", "n1"));
}

}  // namespace
}  // namespace ftrain::ckpt::proto
