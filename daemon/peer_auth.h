// The per-job secret and the mutual challenge-response handshake of ckptd peers. The
// secret never goes on the wire: each side sends a fresh 32-byte nonce (RAND_bytes) and
// proves knowledge with HMAC-SHA256(secret, role || nonce_c || nonce_s || job id), compared
// in constant time (CRYPTO_memcmp). The job id is bound into both MACs, so a peer of another
// job (another secret, or the same secret reused with another id) is refused. Authenticates
// peers; it does not encrypt or MAC the replica bytes (see docs/ckptd.md, security model).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "daemon/peer_wire.h"

namespace ftrain::ckptd::peer {

constexpr size_t kMinSecretBytes = 16;
constexpr size_t kMaxSecretBytes = 4096;

// Reads the secret from `path`: a regular file (no symlink) of this user with no group or
// other permission bits (0600 or 0400), 16..4096 bytes (one trailing newline is dropped).
// Errors say what to fix.
StatusOr<std::string> ReadSecretFile(const std::string& path);
// The secret given in FTRAIN_JOB_SECRET, `value` as ckptd's main read it (same length rules);
// NotFound when unset or empty.
StatusOr<std::string> SecretFromEnvValue(const char* value);

// HMAC-SHA256(secret, role || nonce_c || nonce_s || u32 len || job), role "server"/"client".
std::string ProofOf(const std::string& secret, const std::string& role, const std::string& nonce_c,
                    const std::string& nonce_s, const std::string& job);

// This start's id: the first 8 bytes of HMAC-SHA256(secret, "start" || job) in hex. Every
// start of a job gets a new secret (train.sh), so daemons of one start share the id and a
// peer-addr file left by a daemon of an earlier start is told apart without connecting.
// Reveals nothing usable about the secret.
std::string StartIdOf(const std::string& secret, const std::string& job);

// The connecting side: HELLO, check the server's proof, AUTH, AUTH_OK.
Status AuthenticateAsClient(PeerConn* conn, const std::string& secret, const std::string& job);
// The accepting side: the peer must say HELLO for `job` and prove the secret. Errors name
// what was wrong (for the log); the caller disconnects.
Status AuthenticateAsServer(PeerConn* conn, const std::string& secret, const std::string& job);

}  // namespace ftrain::ckptd::peer
