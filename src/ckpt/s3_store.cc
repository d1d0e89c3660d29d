// S3CheckpointStore: upload + conditional commit, fencing, listing, download with checks,
// verify, prune; and the restore into a file-system root at a start. See s3_store.h for the
// promises and docs/checkpoint-format.md "Checkpoints on S3" for the protocol.
#include "ckpt/s3_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "ckpt/filename.h"
#include "ckpt/s3_layout.h"
#include "ckpt/shard_file.h"
#include "ckpt/store.h"
#include "core/log.h"
#include "core/thread_pool.h"

namespace ftrain::ckpt {

bool IsS3Root(const std::string& root) { return data::IsS3Url(root); }

S3CheckpointStore::S3CheckpointStore(std::string root, data::S3Url url,
                                     std::unique_ptr<data::S3Client> client, S3StoreOptions options)
    : root_(std::move(root)), url_(std::move(url)), client_(std::move(client)), options_(options) {}

StatusOr<std::unique_ptr<S3CheckpointStore>> S3CheckpointStore::Open(const std::string& root,
                                                                     S3StoreOptions options) {
  FT_ASSIGN_OR_RETURN(data::S3Url url, data::S3Url::Parse(root));
  while (!url.key.empty() && url.key.back() == '/') url.key.pop_back();
  FT_ASSIGN_OR_RETURN(data::S3Config config, data::S3Config::FromEnvironment());
  auto client = std::make_unique<data::S3Client>(std::move(config), options.http);
  std::string name = url.ToString();
  return std::unique_ptr<S3CheckpointStore>(
      new S3CheckpointStore(std::move(name), std::move(url), std::move(client), options));
}

Status S3CheckpointStore::CheckReadable() {
  if (client_->config().access_key.empty()) {
    return Status::FailedPrecondition(
        root_ +
        ": no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
        "or AWS_PROFILE (a profile of ~/.aws/credentials), and AWS_ENDPOINT_URL for a "
        "store other than AWS");
  }
  Status s = client_->HeadBucket(url_.bucket);
  if (!s.ok()) return Status::FailedPrecondition(root_ + ": " + s.message());
  return Status::Ok();
}

Status S3CheckpointStore::CheckUsable() {
  FT_RETURN_IF_ERROR(CheckReadable());
  std::random_device rd;
  const std::string nonce = std::to_string(::getpid()) + "-" + std::to_string(rd());
  const data::S3Url probe = Url(S3ProbeKey(url_.key, nonce));
  auto first = client_->Put(probe, "probe\n", /*if_none_match=*/true);
  if (!first.ok()) return Status::FailedPrecondition(root_ + ": " + first.status().message());
  auto second = client_->Put(probe, "probe\n", /*if_none_match=*/true);
  Status d = client_->Delete(probe);
  if (!d.ok()) FT_LOG(Warning) << "s3 checkpoints: could not delete " << probe.ToString();
  if (!second.ok()) return Status::FailedPrecondition(root_ + ": " + second.status().message());
  if (!*first || *second) {
    return Status::FailedPrecondition(
        root_ +
        ": the store does not honour 'If-None-Match: *' on PutObject (a second "
        "conditional put of " +
        probe.ToString() +
        " was accepted); checkpoint commits and fencing need it: use a store that supports "
        "conditional writes (AWS S3, MinIO >= 2024, Ceph RGW >= 18) or a file-system ckpt.root");
  }
  return Status::Ok();
}

StatusOr<std::string> S3CheckpointStore::ReadFence() {
  std::string text;
  Status s = client_->Get(Url(S3Key(url_.key, kS3FenceName)), &text);
  if (s.IsNotFound()) return std::string();
  FT_RETURN_IF_ERROR(s);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

Status S3CheckpointStore::ClaimFence(const std::string& generation) {
  FT_ASSIGN_OR_RETURN(std::string fence, ReadFence());
  if (fence > generation) {  // generations order by their text (store.h NewGeneration)
    return Status::FailedPrecondition(root_ + "/" + kS3FenceName + " holds generation " + fence +
                                      ", newer than this job's " + generation +
                                      ": a newer job owns this checkpoint root");
  }
  if (fence == generation) return Status::Ok();
  FT_ASSIGN_OR_RETURN(bool written,
                      client_->Put(Url(S3Key(url_.key, kS3FenceName)), generation + "\n"));
  (void)written;  // unconditional: always true
  return Status::Ok();
}

StatusOr<MirrorOutcome> S3CheckpointStore::Upload(const std::string& dir,
                                                  const std::string& generation, Env* env) {
  std::string text;
  FT_RETURN_IF_ERROR(env->ReadFile(JoinPath(dir, kManifestName), &text));
  FT_ASSIGN_OR_RETURN(Manifest m, Manifest::FromJson(text, JoinPath(dir, kManifestName)));
  const int64_t step = m.meta.step;
  auto head = client_->Head(Url(S3ManifestKey(url_.key, step)));
  if (head.ok()) return MirrorOutcome::kAlreadyCommitted;
  if (!head.status().IsNotFound()) return head.status();
  FT_ASSIGN_OR_RETURN(std::optional<int64_t> newest, Latest());
  if (newest && *newest > step) {
    return Status::FailedPrecondition(root_ + ": step " + std::to_string(step) +
                                      " is older than the newest committed step " +
                                      std::to_string(*newest) + " (superseded)");
  }
  for (const ManifestFile& f : m.files) {
    if (!IsSafeRelativeName(f.path)) {
      return Status::Corruption(dir + "/manifest.json: unsafe file name '" + f.path + "'");
    }
    const std::string path = JoinPath(dir, f.path);
    uint64_t size = 0, hash = 0;
    FT_RETURN_IF_ERROR(HashFile(path, &size, &hash));
    if (size != f.size || hash != f.xxh3) {
      return Status::Corruption(path +
                                ": size or XXH3 differs from the manifest; not uploading "
                                "a damaged checkpoint");
    }
    // Parts are read with pread as they are sent: a shard is never held in memory whole. (A
    // read-only path outside Env: nothing here needs crash-safety, the commit is remote.)
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::IOError(path + ": open for the upload: " + std::strerror(errno));
    auto read = [&](uint64_t off, uint64_t n, uint8_t* out) -> Status {
      for (uint64_t got = 0; got < n;) {
        const ssize_t k = ::pread(fd, out + got, n - got, static_cast<off_t>(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
          return Status::IOError(
              path + ": pread at " + std::to_string(off + got) + ": " +
              (k == 0 ? std::string("unexpected end of file") : std::strerror(errno)));
        }
        got += static_cast<uint64_t>(k);
      }
      return Status::Ok();
    };
    const data::S3Url obj = Url(S3FileKey(url_.key, step, m.meta.generation, f.path));
    auto up = client_->Upload(obj, f.size, read, options_.upload);
    ::close(fd);
    FT_RETURN_IF_ERROR(up.status());
    FT_ASSIGN_OR_RETURN(uint64_t stored, client_->Head(obj));
    if (stored != f.size) {
      return Status::Corruption(obj.ToString() + ": the store holds " + std::to_string(stored) +
                                " bytes after the upload, expected " + std::to_string(f.size));
    }
  }
  // Fencing: a job newer than `generation` claimed the root meanwhile; see
  // docs/checkpoint-format.md for the window between this read and the commit.
  FT_ASSIGN_OR_RETURN(std::string fence, ReadFence());
  if (fence > generation) {
    return Status::FailedPrecondition(root_ + ": not committing step " + std::to_string(step) +
                                      ": " + kS3FenceName + " holds generation " + fence +
                                      ", newer than this writer's " + generation + " (fenced)");
  }
  FT_ASSIGN_OR_RETURN(bool committed, client_->Put(Url(S3ManifestKey(url_.key, step)), text,
                                                   /*if_none_match=*/true));
  if (!committed) return MirrorOutcome::kAlreadyCommitted;
  FT_LOG(Info) << "s3 checkpoints: committed " << root_ << "/" << StepDirName(step) << " ("
               << m.files.size() << " files, " << m.stored_bytes << " bytes)";
  return MirrorOutcome::kCommitted;
}

StatusOr<std::vector<S3CheckpointInfo>> S3CheckpointStore::List() {
  FT_ASSIGN_OR_RETURN(auto objects, client_->List(Url(S3Key(url_.key, ""))));
  std::map<int64_t, S3CheckpointInfo, std::greater<int64_t>> steps;
  for (const auto& o : objects) {
    const S3KeyInfo k = ParseS3Key(url_.key, o.key);
    if (k.step < 0) continue;
    S3CheckpointInfo& i = steps[k.step];
    i.step = k.step;
    i.committed = i.committed || k.is_manifest;
    i.bytes += o.size;
    i.objects += 1;
  }
  std::vector<S3CheckpointInfo> out;
  for (auto& [step, info] : steps) out.push_back(info);
  return out;
}

StatusOr<std::optional<int64_t>> S3CheckpointStore::Latest() {
  FT_ASSIGN_OR_RETURN(auto list, List());
  for (const auto& i : list) {
    if (i.committed) return std::optional<int64_t>(i.step);
  }
  return std::optional<int64_t>();
}

StatusOr<Manifest> S3CheckpointStore::ReadManifest(int64_t step, std::string* text) {
  std::string bytes;
  const data::S3Url u = Url(S3ManifestKey(url_.key, step));
  FT_RETURN_IF_ERROR(client_->Get(u, &bytes));
  FT_ASSIGN_OR_RETURN(Manifest m, Manifest::FromJson(bytes, u.ToString()));
  if (m.meta.step != step) {
    return Status::Corruption(u.ToString() + ": records step " + std::to_string(m.meta.step));
  }
  if (text != nullptr) *text = std::move(bytes);
  return m;
}

}  // namespace ftrain::ckpt
