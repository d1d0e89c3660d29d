// records/exit_codes.h - every process exit code of ftrain's programs that another part reads:
// the trainer's codes that the job controller acts on, and the generic 0/1/2 of every main.
// One definition: the trainer, the controller (orch/job_policy.h), the CLI helpers and the
// docs use these (tests/orch_docs_test.cc checks docs/operations.md's exit-code table against
// kTrainerExitCodes). Header only, no dependencies.
#pragma once

namespace ftrain {

constexpr int kExitOk = 0;
constexpr int kExitBad = 1;    // the checked thing is bad; a failed rank; a failed job
constexpr int kExitUsage = 2;  // usage, configuration or input error: a restart cannot fix it
constexpr int kExitConfig = kExitUsage;

// ftrain train: the checkpoint storage could not be read at resume (I/O errors, files that
// went missing) for ckpt.resume_retry_s; nothing was moved aside: retry later (EX_IOERR).
// The job controller restarts in place after a back-off until FTRAIN_STORAGE_OUTAGE_S.
constexpr int kExitStorage = 74;
// ftrain train: checkpointed on request (USR1/TERM); requeue me (EX_TEMPFAIL).
constexpr int kExitRequeue = 75;
// ftrain train: this node cannot run its ranks (no usable GPU, fewer GPUs than its ranks, the
// CUDA driver failed to start, the data path unreadable here); RUN/node_faults.jsonl names
// the host. The job controller gives its ranks to a spare or requeues excluding it; the same
// fault on every training node is a configuration error (it fails the job with exit 2).
constexpr int kExitNodeFault = 76;
// ftrain train: replicas disagreed (silent data corruption); RUN/quarantine.jsonl names nodes.
constexpr int kExitSdc = 77;
// ftrain train: a rank hung; RUN/hangs.jsonl names it.
constexpr int kExitHang = 78;
// ftrain train: guard.policy = rollback rolled the run back; RUN/rollbacks.jsonl has the step.
constexpr int kExitRollback = 79;

// The trainer's own codes beyond 0/1/2, as docs/operations.md's exit-code table lists them.
struct ExitCodeInfo {
  int code;
  const char* meaning;
};
constexpr ExitCodeInfo kTrainerExitCodes[] = {
    {kExitStorage, "the checkpoint storage could not be read at resume"},
    {kExitRequeue, "checkpointed on USR1/TERM, requeue me"},
    {kExitNodeFault, "this node cannot run its ranks (RUN/node_faults.jsonl)"},
    {kExitSdc, "replicas disagreed"},
    {kExitHang, "a rank hung"},
    {kExitRollback, "guard.policy = rollback rolled the run back"},
};

}  // namespace ftrain
