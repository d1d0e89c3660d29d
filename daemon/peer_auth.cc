// Secret loading and the peer handshake (OpenSSL libcrypto: RAND_bytes, HMAC, CRYPTO_memcmp).
#include "daemon/peer_auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ftrain::ckptd::peer {
namespace {

Status CheckLength(std::string* s, const std::string& where) {
  if (!s->empty() && s->back() == '\n') s->pop_back();
  if (s->size() < kMinSecretBytes || s->size() > kMaxSecretBytes) {
    return Status::InvalidArgument(
        where + " holds " + std::to_string(s->size()) + " bytes; a job secret must have " +
        std::to_string(kMinSecretBytes) + ".." + std::to_string(kMaxSecretBytes) +
        " (e.g. `head -c 32 /dev/urandom | base64`)");
  }
  return Status::Ok();
}

StatusOr<std::string> Nonce() {
  std::string n(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1)
    return Status::Internal("RAND_bytes failed: no random nonce for the peer handshake");
  return n;
}

bool SameMac(const std::string& a, const std::string& b) {
  return a.size() == kMacBytes && b.size() == kMacBytes &&
         CRYPTO_memcmp(a.data(), b.data(), kMacBytes) == 0;
}

}  // namespace

StatusOr<std::string> ReadSecretFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return Status::InvalidArgument("--job-secret-file '" + path + "': " + std::strerror(errno) +
                                   (errno == ELOOP ? " (a symlink; give the file itself)" : ""));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument("--job-secret-file '" + path + "' is not a regular file");
  }
  auto refuse = [&](const std::string& why) {
    ::close(fd);
    return Status::InvalidArgument("--job-secret-file '" + path + "' " + why);
  };
  if (st.st_uid != ::getuid()) {
    return refuse("belongs to uid " + std::to_string(st.st_uid) + ", not to this user (" +
                  std::to_string(::getuid()) + "); refusing a secret others control");
  }
  if ((st.st_mode & 0077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return refuse(std::string("has mode ") + mode +
                  ": group or others may read it; `chmod 600` it (and make a new secret)");
  }
  if (st.st_size > static_cast<off_t>(kMaxSecretBytes + 1))
    return refuse("is larger than " + std::to_string(kMaxSecretBytes) + " bytes");
  std::string s(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < s.size()) {
    ssize_t n = ::read(fd, s.data() + got, s.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return refuse(std::string("could not be read: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  FT_RETURN_IF_ERROR(CheckLength(&s, "--job-secret-file '" + path + "'"));
  return s;
}

StatusOr<std::string> SecretFromEnvValue(const char* e) {
  if (e == nullptr || *e == '\0') return Status::NotFound("FTRAIN_JOB_SECRET is not set");
  std::string s = e;
  FT_RETURN_IF_ERROR(CheckLength(&s, "FTRAIN_JOB_SECRET"));
  return s;
}

std::string ProofOf(const std::string& secret, const std::string& role, const std::string& nonce_c,
                    const std::string& nonce_s, const std::string& job) {
  std::string msg = "ftrain-ckptd-peer-v1 " + role + '\0' + nonce_c + nonce_s;
  const uint32_t n = static_cast<uint32_t>(job.size());
  msg.append(reinterpret_cast<const char*>(&n), 4);
  msg += job;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len) == nullptr ||
      len != kMacBytes) {
    return std::string();  // never equal to a 32-byte proof: the handshake fails
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string StartIdOf(const std::string& secret, const std::string& job) {
  const std::string mac = ProofOf(secret, "start", "", "", job);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < 8 && i < mac.size(); ++i) {
    out += kHex[static_cast<uint8_t>(mac[i]) >> 4];
    out += kHex[static_cast<uint8_t>(mac[i]) & 15];
  }
  return out;
}

Status AuthenticateAsClient(PeerConn* conn, const std::string& secret, const std::string& job) {
  FT_ASSIGN_OR_RETURN(std::string nonce_c, Nonce());
  FT_RETURN_IF_ERROR(conn->Send(PeerMsg::kHello, EncodeHello({nonce_c, job})));
  std::string payload;
  FT_RETURN_IF_ERROR(conn->Expect(PeerMsg::kChallenge, &payload));
  FT_ASSIGN_OR_RETURN(Challenge ch, DecodeChallenge(payload));
  if (!SameMac(ch.mac, ProofOf(secret, "server", nonce_c, ch.nonce, job))) {
    return Status::FailedPrecondition("peer " + conn->peer() +
                                      " could not prove the job secret of job " + job);
  }
  FT_RETURN_IF_ERROR(conn->Send(PeerMsg::kAuth, ProofOf(secret, "client", nonce_c, ch.nonce, job)));
  return conn->Expect(PeerMsg::kAuthOk, &payload);
}

Status AuthenticateAsServer(PeerConn* conn, const std::string& secret, const std::string& job) {
  std::string payload;
  FT_ASSIGN_OR_RETURN(PeerMsg type, conn->Receive(&payload));
  if (type != PeerMsg::kHello)
    return Status::InvalidArgument(std::string("sent ") + PeerMsgName(type) + " before HELLO");
  FT_ASSIGN_OR_RETURN(Hello h, DecodeHello(payload));
  if (h.job != job) {
    return Status::FailedPrecondition("is a peer of job '" + h.job + "', not of this job '" + job +
                                      "'");
  }
  FT_ASSIGN_OR_RETURN(std::string nonce_s, Nonce());
  FT_RETURN_IF_ERROR(
      conn->Send(PeerMsg::kChallenge,
                 EncodeChallenge({nonce_s, ProofOf(secret, "server", h.nonce, nonce_s, job)})));
  FT_ASSIGN_OR_RETURN(type, conn->Receive(&payload));
  if (type != PeerMsg::kAuth)
    return Status::InvalidArgument(std::string("sent ") + PeerMsgName(type) + " instead of AUTH");
  if (!SameMac(payload, ProofOf(secret, "client", h.nonce, nonce_s, job)))
    return Status::FailedPrecondition("failed the challenge (wrong job secret)");
  return conn->Send(PeerMsg::kAuthOk, "");
}

}  // namespace ftrain::ckptd::peer
