// The peer wire format against hostile input (every truncation, random bytes, lengths over
// each type's bound, images longer or shorter than announced, over a real socketpair), the
// handshake proofs, the job-secret file checks, and how long an unreachable peer is left out
// of fetches (on a fake clock). Label: unit.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "core/fake_clock_env.h"
#include "daemon/peer_auth.h"
#include "daemon/peer_fetch.h"
#include "daemon/peer_wire.h"
#include "test_util.h"

namespace ftrain::ckptd::peer {
namespace {

namespace proto = ckpt::proto;

ReplicaHeader SampleHeader() {
  ReplicaHeader h;
  h.job = "123";
  h.rank = 1;
  h.step = 7;
  h.extent = 128;
  h.submit.step = 7;
  h.submit.meta.step = 7;
  h.submit.meta.world_size = 2;
  proto::PieceDesc p;
  p.kind = "model";
  p.name = "w";
  p.dtype = ckpt::DType::kFloat32;
  p.shape = {16};
  p.length = 16;
  h.submit.pieces.push_back(p);
  h.xxh3 = {42};
  return h;
}

TEST(PeerWire, FrameHeaderRejectsHostileHeaders) {
  auto dec = [](const std::string& h) {
    return DecodeFrameHeader(reinterpret_cast<const uint8_t*>(h.data()));
  };
  EXPECT_TRUE(dec(EncodeFrameHeader(PeerMsg::kHello, 40)).ok());
  EXPECT_TRUE(dec(EncodeFrameHeader(PeerMsg::kData, kChunkBytes)).ok());
  EXPECT_FALSE(dec(EncodeFrameHeader(PeerMsg::kData, kChunkBytes + 1)).ok());
  EXPECT_FALSE(dec(EncodeFrameHeader(PeerMsg::kHello, 0xffffffffu)).ok());
  EXPECT_FALSE(dec(EncodeFrameHeader(PeerMsg::kAuthOk, 1)).ok());
  EXPECT_FALSE(dec(EncodeFrameHeader(PeerMsg::kChallenge, 65)).ok());
  EXPECT_FALSE(dec(EncodeFrameHeader(static_cast<PeerMsg>(0), 0)).ok());
  EXPECT_FALSE(dec(EncodeFrameHeader(static_cast<PeerMsg>(99), 0)).ok());
  std::string h = EncodeFrameHeader(PeerMsg::kHello, 4);
  h[0] ^= 1;
  EXPECT_NE(dec(h).status().message().find("bad magic"), std::string::npos);
  h = EncodeFrameHeader(PeerMsg::kHello, 4);
  h[4] = 9;
  EXPECT_FALSE(dec(h).ok());
  h = EncodeFrameHeader(PeerMsg::kHello, 4);
  h[12] = 1;
  EXPECT_FALSE(dec(h).ok());
  // Every type's bound is finite and below 16 MiB: nothing allocates more per frame.
  for (uint16_t t = 1; t <= static_cast<uint16_t>(PeerMsg::kAbort); ++t)
    EXPECT_LT(MaxPayload(static_cast<PeerMsg>(t)), 16u << 20) << t;
}

TEST(PeerWire, MessagesRoundTripAndEveryTruncationIsRefused) {
  const std::string hello = EncodeHello({std::string(kNonceBytes, 'a'), "job.1"});
  ASSERT_TRUE(DecodeHello(hello).ok());
  EXPECT_EQ(DecodeHello(hello)->job, "job.1");
  const std::string fetch = EncodeFetch({"job.1", 3, 9});
  ASSERT_TRUE(DecodeFetch(fetch).ok());
  const std::string rep = EncodeReplicaHeader(SampleHeader());
  auto back = DecodeReplicaHeader(rep, 1 << 20);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rank, 1);
  EXPECT_EQ(back->xxh3, std::vector<uint64_t>{42});
  for (size_t n = 0; n < hello.size(); ++n) EXPECT_FALSE(DecodeHello(hello.substr(0, n)).ok()) << n;
  for (size_t n = 0; n < fetch.size(); ++n) EXPECT_FALSE(DecodeFetch(fetch.substr(0, n)).ok()) << n;
  // (The descriptor's generation trailer is optional, as in SUBMIT: a cut right before it
  // is a valid older encoding.)
  const size_t trailer = rep.size() - 4;
  for (size_t n = 0; n < rep.size(); ++n) {
    if (n == trailer) continue;
    EXPECT_FALSE(DecodeReplicaHeader(rep.substr(0, n), 1 << 20).ok()) << n;
  }
  EXPECT_FALSE(DecodeHello(hello + "x").ok());
  EXPECT_FALSE(DecodeFetch(fetch + "x").ok());
  // Semantics: unsafe job ids, pieces outside the image, rank >= world, hash count.
  EXPECT_FALSE(DecodeHello(EncodeHello({std::string(kNonceBytes, 'a'), "../x"})).ok());
  EXPECT_FALSE(DecodeHello(EncodeHello({"short", "j"})).ok());
  auto h = SampleHeader();
  h.extent = 32;  // the 64-byte piece does not fit
  EXPECT_FALSE(DecodeReplicaHeader(EncodeReplicaHeader(h), 1 << 20).ok());
  h = SampleHeader();
  EXPECT_FALSE(DecodeReplicaHeader(EncodeReplicaHeader(h), 64).ok());  // over max_extent
  h.rank = 2;
  EXPECT_FALSE(DecodeReplicaHeader(EncodeReplicaHeader(h), 1 << 20).ok());
  h = SampleHeader();
  h.xxh3 = {};
  EXPECT_FALSE(DecodeReplicaHeader(EncodeReplicaHeader(h), 1 << 20).ok());
  h = SampleHeader();
  h.step = 8;
  EXPECT_FALSE(DecodeReplicaHeader(EncodeReplicaHeader(h), 1 << 20).ok());
}

TEST(PeerWire, RandomBytesNeverDecode) {
  std::mt19937 rng(7);
  int challenges = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 200, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    // No crash, no huge allocation, and nothing accepted: each format has a length prefix,
    // a magic or a range that random bytes miss. A CHALLENGE is two random strings by
    // design: any 64 bytes are one, and nothing else is.
    EXPECT_FALSE(DecodeHello(s).ok()) << "case " << i;
    EXPECT_FALSE(DecodeFetch(s).ok()) << "case " << i;
    EXPECT_EQ(DecodeChallenge(s).ok(), s.size() == kNonceBytes + kMacBytes) << "case " << i;
    challenges += s.size() == kNonceBytes + kMacBytes;
    EXPECT_FALSE(DecodeReplicaHeader(s, 1 << 20).ok()) << "case " << i;
    if (s.size() >= kHeaderBytes) {
      EXPECT_FALSE(DecodeFrameHeader(reinterpret_cast<const uint8_t*>(s.data())).ok())
          << "case " << i;
    }
  }
  EXPECT_GT(challenges, 0) << "the lengths never hit a challenge's: the check above ran empty";
}

// ReceiveImage over a socketpair: exact images pass; more data, an early END or another
// message type in the middle are errors, and nothing is written past the buffer.
TEST(PeerWire, ReceiveImageChecksItsLength) {
  auto run = [](const std::string& wire, uint64_t extent) {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    std::thread writer([&] {
      EXPECT_EQ(::write(sv[1], wire.data(), wire.size()), static_cast<ssize_t>(wire.size()));
      ::shutdown(sv[1], SHUT_WR);
    });
    PeerConn conn(sv[0], "test", 2, Env::Default());
    std::string buf(extent + 16, 'G');
    Status s = conn.ReceiveImage(reinterpret_cast<uint8_t*>(buf.data()), extent);
    writer.join();
    ::close(sv[1]);
    EXPECT_EQ(buf.substr(extent), std::string(16, 'G')) << "wrote past the image";
    return s;
  };
  auto data = [](const std::string& d) {
    return EncodeFrameHeader(PeerMsg::kData, static_cast<uint32_t>(d.size())) + d;
  };
  const std::string end = EncodeFrameHeader(PeerMsg::kEnd, 0);
  EXPECT_TRUE(run(data("abcd") + data("efgh") + end, 8).ok());
  EXPECT_FALSE(run(data("abcd") + end, 8).ok());                   // short
  EXPECT_FALSE(run(data("abcdefghij") + end, 8).ok());             // long
  EXPECT_FALSE(run(data("abcd") + data("efghij") + end, 8).ok());  // long in the second
  EXPECT_FALSE(run(data("abcd") + EncodeFrameHeader(PeerMsg::kStore, 0), 8).ok());
  EXPECT_FALSE(run(data("abcd"), 8).ok());  // truncated: connection closed
  EXPECT_EQ(run(data("ab") + EncodeFrameHeader(PeerMsg::kAbort, 0), 8).code(),
            Status::Code::kAborted);
}

// The trainer <-> daemon FETCH_PEER / FETCH_OK messages (ckpt/ckptd_protocol.h).
TEST(PeerWire, FetchPeerMessagesRoundTripAndRefuseTruncation) {
  const std::string req = proto::EncodeFetchPeer({12, "10.0.0.2:7000", 600});
  auto r = proto::DecodeFetchPeer(req);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->step, 12);
  EXPECT_EQ(r->address, "10.0.0.2:7000");
  EXPECT_EQ(r->timeout_s, 600);  // the daemon answers within half of it
  EXPECT_FALSE(proto::DecodeFetchPeer(proto::EncodeFetchPeer({-1, ""})).ok());
  EXPECT_FALSE(proto::DecodeFetchPeer(proto::EncodeFetchPeer({1, "", -1})).ok());
  proto::FetchPeerOk ok{true, 12, 4096, 0.5, "peer 10.0.0.2:7000", ""};
  const std::string rep = proto::EncodeFetchPeerOk(ok);
  auto back = proto::DecodeFetchPeerOk(rep);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->found);
  EXPECT_EQ(back->source, "peer 10.0.0.2:7000");
  EXPECT_EQ(back->bytes, 4096u);
  for (size_t n = 0; n < req.size(); ++n)
    EXPECT_FALSE(proto::DecodeFetchPeer(req.substr(0, n)).ok());
  for (size_t n = 0; n < rep.size(); ++n)
    EXPECT_FALSE(proto::DecodeFetchPeerOk(rep.substr(0, n)).ok());
  EXPECT_FALSE(proto::DecodeFetchPeerOk(rep + "x").ok());
}

TEST(PeerAuth, ProofsBindRoleNoncesAndJob) {
  const std::string s = "0123456789abcdef", a(32, 'a'), b(32, 'b');
  const std::string p = ProofOf(s, "client", a, b, "1");
  EXPECT_EQ(p.size(), kMacBytes);
  EXPECT_EQ(p, ProofOf(s, "client", a, b, "1"));
  EXPECT_NE(p, ProofOf(s, "server", a, b, "1"));
  EXPECT_NE(p, ProofOf(s, "client", b, a, "1"));
  EXPECT_NE(p, ProofOf(s, "client", a, b, "2"));
  EXPECT_NE(p, ProofOf(s + "x", "client", a, b, "1"));
}

TEST(PeerAuth, SecretFileMustBePrivateToThisUser) {
  testing::TempDir dir("peer-secret");
  const std::string f = dir / "secret";
  std::ofstream(f) << "0123456789abcdef0123\n";
  ::chmod(f.c_str(), 0600);
  auto ok = ReadSecretFile(f);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, "0123456789abcdef0123");  // the trailing newline is not part of it
  ::chmod(f.c_str(), 0400);
  EXPECT_TRUE(ReadSecretFile(f).ok());
  for (mode_t m : {0640, 0604, 0644, 0660, 0666}) {
    ::chmod(f.c_str(), m);
    auto bad = ReadSecretFile(f);
    EXPECT_FALSE(bad.ok()) << std::oct << m;
    EXPECT_NE(bad.status().message().find("chmod 600"), std::string::npos)
        << bad.status().message();
  }
  ::chmod(f.c_str(), 0600);
  const std::string link = dir / "link";
  ASSERT_EQ(::symlink(f.c_str(), link.c_str()), 0);
  EXPECT_FALSE(ReadSecretFile(link).ok());
  EXPECT_FALSE(ReadSecretFile(dir / "missing").ok());
  EXPECT_FALSE(ReadSecretFile(dir.path()).ok());  // a directory
  const std::string small = dir / "small";
  std::ofstream(small) << "short";
  ::chmod(small.c_str(), 0600);
  EXPECT_NE(ReadSecretFile(small).status().message().find("16..4096"), std::string::npos);
  // Another user's file: refused even with mode 0600 (root can make one).
  if (::getuid() == 0) {
    const std::string other = dir / "other";
    std::ofstream(other) << "0123456789abcdef0123";
    ::chmod(other.c_str(), 0600);
    ASSERT_EQ(::chown(other.c_str(), 65534, 65534), 0);
    auto r = ReadSecretFile(other);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("belongs to uid 65534"), std::string::npos);
  }
}

TEST(PeerWire, HostPortParsing) {
  std::string host;
  int port = 0;
  EXPECT_TRUE(ParseHostPort("127.0.0.1:0", true, &host, &port).ok());
  EXPECT_FALSE(ParseHostPort("127.0.0.1:0", false, &host, &port).ok());
  EXPECT_TRUE(ParseHostPort("[::1]:80", false, &host, &port).ok());
  EXPECT_EQ(host, "::1");
  for (const char* bad : {"", "host", ":80", "h:", "h:99999", "h:8x", "h:-1"})
    EXPECT_FALSE(ParseHostPort(bad, true, &host, &port).ok()) << bad;
}

// A peer that did not answer is skipped for a minute, then asked again; one that answers is
// asked at once.
TEST(UnreachablePeers, ADeadPeerIsSkippedForAMinuteThenAskedAgain) {
  FakeClockEnv env(Env::Default());
  UnreachablePeers dead(&env, 60);
  EXPECT_FALSE(dead.Skip("n1:7000", dead.Now()));
  dead.MarkDead("n1:7000", dead.Now());
  EXPECT_TRUE(dead.Skip("n1:7000", dead.Now()));
  EXPECT_FALSE(dead.Skip("n2:7000", dead.Now()));
  env.Advance(59.9);
  EXPECT_TRUE(dead.Skip("n1:7000", dead.Now()));
  env.Advance(0.2);
  EXPECT_FALSE(dead.Skip("n1:7000", dead.Now()));
  dead.MarkDead("n1:7000", dead.Now());
  dead.MarkAlive("n1:7000");  // it answered a later probe
  EXPECT_FALSE(dead.Skip("n1:7000", dead.Now()));
}

}  // namespace
}  // namespace ftrain::ckptd::peer
