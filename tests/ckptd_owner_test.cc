// The trainer's side of ckptd's socket (ckpt/ckptd_client.h) refuses a daemon that runs as
// another user (hole 8: the run directory is shared, a socket can be planted in it): a child
// process of another uid listens where the daemon's socket would be. Needs root to become
// another user (skipped otherwise); one forked process.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "ckpt/ckptd_client.h"
#include "test_util.h"

namespace ftrain::ckpt {
namespace {

// Forks a listener on `path` running as `uid`; returns its pid once the socket exists.
pid_t ListenAs(const std::string& path, uid_t uid) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (uid != geteuid() && (setgid(uid) != 0 || setuid(uid) != 0)) _exit(3);
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 4) != 0)
      _exit(4);
    sleep(30);
    _exit(0);
  }
  for (int i = 0; i < 200 && access(path.c_str(), F_OK) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pid;
}

TEST(CkptdSocket, ADaemonOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to listen as another user";
  ftrain::testing::TempDir tmp;
  ASSERT_EQ(chmod(tmp.path().c_str(), 0777), 0);
  const std::string path = tmp.path() + "/sock";
  const pid_t other = ListenAs(path, 65534);
  auto c = CkptdClient::ConnectRaw(path);
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("runs as uid 65534, not as this user (0)"), std::string::npos)
      << c.status().message();
  // This user's own listener is accepted.
  unlink(path.c_str());
  const pid_t mine = ListenAs(path, geteuid());
  auto ok = CkptdClient::ConnectRaw(path);
  kill(mine, SIGKILL);
  waitpid(mine, nullptr, 0);
  EXPECT_TRUE(ok.ok()) << ok.status().message();
}

}  // namespace
}  // namespace ftrain::ckpt
