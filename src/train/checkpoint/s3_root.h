// ckpt.root = s3://BUCKET/PREFIX at a start (ckpt/s3_staging.h). Rank 0 checks the store
// (credentials, bucket, If-None-Match honoured: exit 2 with what to set, before step 1),
// claims its FENCE, marks the staging root and reconciles it with S3 (staged steps S3 never
// committed are removed, abandoned multipart uploads aborted). With train.resume = auto, every
// rank then downloads its own ranks' shards of S3's newest committed step into the staging
// root (parallel Range GETs, each file checked against the manifest's XXH3) and the ordinary
// resume reads them there. A damaged step is set aside and the previous committed one tried;
// an outage (timeouts, 5xx, throttling after the client's retries) is retried for up to
// ckpt.resume_retry_s and then ends the start with Unavailable, never taken for damage.
#pragma once

#include <string>

#include "comm/context.h"
#include "core/env.h"
#include "core/status.h"
#include "train/config/train_config.h"

namespace ftrain::train {

// Every rank calls it once, after the checkpoint sink started (no writer of this job alive)
// and before the resume. A no-op unless cfg.ckpt.s3_root is set.
Status OpenS3Root(comm::DistContext& ctx, const TrainConfig& cfg, const std::string& generation,
                  Env* env);

}  // namespace ftrain::train
