// ftrain's multipart upload (data::S3Client::Upload, what the checkpoint mirror sends each
// shard with) of one local file to s3://BUCKET/KEY, timed: prints "ftrain MB/s X". Driven by
// bench/s3_ckpt_bench.sh next to boto3's upload_file with the same part size and concurrency.
// usage: s3_upload_bench FILE s3://BUCKET/KEY PART_MB THREADS ROUNDS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "data/source/s3.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: s3_upload_bench FILE s3://BUCKET/KEY PART_MB THREADS ROUNDS\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    std::fprintf(stderr, "s3_upload_bench: cannot read %s\n", argv[1]);
    return 2;
  }
  auto url = ftrain::data::S3Url::Parse(argv[2]);
  auto config = ftrain::data::S3Config::FromEnvironment();
  if (!url.ok() || !config.ok()) {
    std::fprintf(stderr, "s3_upload_bench: bad URL or AWS_* settings\n");
    return 2;
  }
  ftrain::data::S3Client client(*config, ftrain::data::HttpOptions());
  ftrain::data::UploadOptions o;
  o.part_bytes = std::strtoull(argv[3], nullptr, 10) << 20;
  o.threads = std::atoi(argv[4]);
  for (int r = 0; r < std::atoi(argv[5]); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto s = client.Upload(*url, reinterpret_cast<const uint8_t*>(data.data()), data.size(), o);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) {
      std::fprintf(stderr, "s3_upload_bench: %s\n", s.status().ToString().c_str());
      return 1;
    }
    std::printf("ftrain MB/s %.1f\n", data.size() / sec / 1e6);
  }
  return 0;
}
