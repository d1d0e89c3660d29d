// HeldOutLoss: open the held-out reader (vote), ceil(N / R) no-grad forwards, gather the
// per-batch losses in batch order, average.
#include "train/eval/eval_loop.h"

#include <torch/torch.h>

#include <chrono>
#include <vector>

#include "comm/context.h"
#include "core/log.h"
#include "data/read/reader.h"
#include "fsdp/engine.h"

namespace ftrain::train {
namespace {

using Clock = std::chrono::steady_clock;

// This rank's reader at the start of the held-out data, checked against the model.
StatusOr<std::unique_ptr<data::TokenReader>> OpenHeldOut(const HeldOutOptions& o,
                                                         const comm::WorldInfo& world) {
  data::ReaderOptions ro;
  ro.source = o.source;
  ro.env = o.env;
  ro.seed = o.seed;
  ro.dp_rank = world.rank;
  ro.dp_size = world.world_size;
  ro.micro_batch = static_cast<int>(o.micro_batch);
  ro.prefetch_depth = 2;
  auto reader = data::TokenReader::Open(ro, nullptr);
  if (!reader.ok()) {
    const Status& s = reader.status();
    if (s.IsNotFound() || s.IsInvalidArgument()) {
      return Status::InvalidArgument(o.what + ": " + s.message());
    }
    return s.Annotate(o.what);
  }
  const data::DatasetIndex& index = (*reader)->index();
  if (o.tokenizer_xxh3 != 0 && index.tokenizer_xxh3 != 0 &&
      index.tokenizer_xxh3 != o.tokenizer_xxh3) {
    return Status::InvalidArgument(
        o.what + " '" + o.source + "' was packed with another tokenizer than the training data (" +
        index.tokenizer_file +
        " differs from data.path's): pack the held-out text with `ftrain "
        "pack --tokenizer DATA/" +
        index.tokenizer_file + "`");
  }
  const int64_t seq_len = index.seq_len;
  if (seq_len > o.max_seq_len) {
    return Status::InvalidArgument(o.what + ": sequences have " + std::to_string(seq_len) +
                                   " tokens but model.max_seq_len is " +
                                   std::to_string(o.max_seq_len));
  }
  return reader;
}

// Every rank learns whether all ranks got `s` OK; the failing rank keeps its own message.
Status Agree(comm::DistContext& ctx, const Status& s, const std::string& what) {
  torch::Tensor vote = torch::tensor(
      {s.ok() ? 0.0 : 1.0, !s.ok() && !s.IsInvalidArgument() ? 1.0 : 0.0}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().AllReduce(vote, comm::ReduceOp::kMax)->Wait());
  if (!s.ok()) return s;
  if (vote[0].item<double>() == 0) return Status::Ok();
  const std::string why = "another rank could not open " + what + " (see its log)";
  return vote[1].item<double>() != 0 ? Status::IOError(why) : Status::InvalidArgument(why);
}

}  // namespace

StatusOr<HeldOutResult> HeldOutLoss(fsdp::FsdpEngine& engine, comm::DistContext& ctx,
                                    const HeldOutOptions& o) {
  if (o.batches <= 0 || o.micro_batch <= 0) {
    return Status::InvalidArgument("held-out batches and micro_batch must be > 0");
  }
  const auto t0 = Clock::now();
  const comm::WorldInfo& world = ctx.world();
  const int64_t R = world.world_size;
  auto reader = OpenHeldOut(o, world);
  FT_RETURN_IF_ERROR(Agree(ctx, reader.status(), o.what));
  HeldOutResult r;
  r.batches = o.batches;
  r.seq_len = (*reader)->index().seq_len;
  r.forwards = (o.batches + R - 1) / R;
  // Slot i: batch i's loss, written by the one rank that evaluated it (zero elsewhere), so
  // the sum over ranks is exact.
  torch::Tensor losses = torch::zeros({r.forwards * R}, torch::kFloat64);
  const torch::Device device = engine.config().device;
  for (int64_t k = 0; k < r.forwards; ++k) {
    FT_ASSIGN_OR_RETURN(data::Batch batch, (*reader)->Next());
    torch::Tensor tokens =
        torch::from_blob(batch.tokens.data(), {batch.rows, batch.row_tokens}, torch::kInt32)
            .to(torch::kInt64);
    if (device.is_cuda()) tokens = tokens.pin_memory().to(device, /*non_blocking=*/true);
    FT_ASSIGN_OR_RETURN(float loss, engine.Forward(tokens));
    const int64_t index = k * R + world.rank;
    if (index < o.batches) losses[index] = static_cast<double>(loss);
  }
  FT_RETURN_IF_ERROR(ctx.control().AllReduce(losses, comm::ReduceOp::kSum)->Wait());
  const double* v = losses.data_ptr<double>();
  double sum = 0;
  for (int64_t i = 0; i < o.batches; ++i) sum += v[i];  // batch order: as one rank adds
  r.loss = static_cast<float>(sum / static_cast<double>(o.batches));
  r.tokens = o.batches * o.micro_batch * (r.seq_len);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

namespace {
// [eval]'s rows: eval.path from its start in train.seed's order.
HeldOutOptions HeldOutFor(const TrainConfig& cfg, Env* env) {
  HeldOutOptions o;
  o.source = cfg.eval.path;
  o.env = env;
  o.seed = static_cast<uint64_t>(cfg.train.seed);
  o.batches = cfg.eval.batches;
  o.micro_batch = cfg.train.micro_batch;
  o.max_seq_len = cfg.model.max_seq_len;
  return o;
}
}  // namespace

Status CheckEvalData(const TrainConfig& cfg, comm::DistContext& ctx, Env* env) {
  if (cfg.eval.every_steps <= 0) return Status::Ok();
  HeldOutOptions o = HeldOutFor(cfg, env);
  data::ReaderOptions ro;  // the training data, for its tokenizer (reads index.json only)
  ro.source = cfg.data.path;
  ro.env = env;
  ro.prefetch_depth = 0;
  auto training = data::TokenReader::Open(ro, nullptr);
  if (training.ok()) o.tokenizer_xxh3 = (*training)->index().tokenizer_xxh3;
  return Agree(ctx, OpenHeldOut(o, ctx.world()).status(), "eval.path");
}

Status EvalAtBoundary(const TrainConfig& cfg, fsdp::FsdpEngine& engine, comm::DistContext& ctx,
                      int64_t step, bool stop, Env* env, records::StepMetrics* m) {
  const EvalSection& e = cfg.eval;
  if (e.every_steps <= 0 || stop) return Status::Ok();
  if (step % e.every_steps != 0 && step != cfg.train.steps) return Status::Ok();
  const HeldOutOptions o = HeldOutFor(cfg, env);
  HeldOutResult r;
  try {
    FT_ASSIGN_OR_RETURN(r, HeldOutLoss(engine, ctx, o));
  } catch (const StatusError& err) {
    return err.status().Annotate("eval.path");  // e.g. a token id >= vocab_size
  }
  m->eval_loss = static_cast<double>(r.loss);
  m->eval_s = r.seconds;
  if (ctx.world().rank == 0) {
    FT_LOG(Info) << "eval: step " << step << " held-out loss " << r.loss << " over " << r.batches
                 << " batches (" << r.tokens << " tokens, " << r.forwards << " per rank) in "
                 << r.seconds << " s";
  }
  return Status::Ok();
}

}  // namespace ftrain::train
