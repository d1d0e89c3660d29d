// What a resume does when loading a checkpoint fails on some rank: fall back past it (its
// content was read and is wrong: a verified mismatch), wait and read it again (the storage did
// not answer: an I/O error, a file not found; an outage is never damage), or stop (the
// configuration refuses it). And how long and how often it retries an outage before the start
// gives up with exit 74. Pure rules, no I/O: resume.cc feeds them what each rank saw.
#pragma once

#include <string>

#include "core/status.h"

namespace ftrain::train {

// One rank's load of one checkpoint.
enum class LoadOutcome {
  kLoaded,
  kDamaged,     // read in full, and wrong: a checksum, a structure, a size (verified)
  kUnreadable,  // the storage failed to deliver it: retry, never set it aside
  kRefused,     // the configuration refuses it (another config hash, model): a usage error
};

// `load` is what loading returned; `rereads` is whether the files it read can be read again
// in full right now (asked only when `load` is a Corruption: an I/O error inside HDF5 also
// surfaces as one). A Corruption is damage only when everything reads back.
LoadOutcome ClassifyLoad(const Status& load, bool rereads);

enum class ResumeStep {
  kResume,    // every rank loaded it
  kFallBack,  // damage and nothing unreadable: set it aside, try the next older checkpoint
  kRetry,     // some rank could not read it: wait, then choose and load again
  kGiveUp,    // unreadable for longer than ckpt.resume_retry_s: exit 74
  kFail,      // refused by the configuration, or damage in an explicit train.resume path
};

// The world's outcome from each kind's "did any rank see it" and whether any rank's retry
// time is spent. An outage anywhere wins over damage elsewhere: a rank that could not read
// cannot tell whether its part is damaged too, and setting a checkpoint aside is not undone.
ResumeStep DecideResume(bool any_damaged, bool any_unreadable, bool any_refused, bool expired,
                        bool explicit_path);

// The wait before retry number `tries` (1, 2, ...): 1 s doubling up to 15 s, never past the
// end of the retry time (`left_s`, >= 0).
double RetryWaitSeconds(int tries, double left_s);

// The message of a start that gave up (exit 74): what could not be read, for how long, and
// what to do.
std::string GiveUpMessage(const std::string& what, double waited_s, double retry_s);

}  // namespace ftrain::train
