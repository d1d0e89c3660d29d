// The stop's lead from the job's real end (orch/stop_lead.h, issue 44 hole 15): EndTime near,
// a preemption's GraceTime, the user's FTRAIN_USR1_LEAD_S, and Slurm's time format. Pure.
#include <gtest/gtest.h>

#include <ctime>

#include "orch/stop_lead.h"

namespace ftrain::orch {
namespace {

TEST(StopLead, EndTimeNearIsTheLead) {
  JobEnd e;
  e.end_wall = 1000;
  EXPECT_EQ(DeriveStopLead(120, false, e, 880).lead_s, 120);
  EXPECT_EQ(DeriveStopLead(120, false, e, 700).lead_s, 300);  // @300 in #SBATCH, lead left 120
  EXPECT_EQ(DeriveStopLead(120, false, e, 960).lead_s, 40);   // a USR1 late: what is left
  EXPECT_EQ(DeriveStopLead(120, false, e, 1100).lead_s, 0);   // past the end: nothing
  EXPECT_EQ(DeriveStopLead(120, false, e, 1000 - 900).lead_s, 900);  // 15 min: still near
  EXPECT_NE(DeriveStopLead(120, false, e, 880).source.find("EndTime is 120 s away"),
            std::string::npos);
}

TEST(StopLead, FarFromEndTimeItIsAPreemptionAndGraceTimeCounts) {
  JobEnd e;
  e.end_wall = 100000;
  e.grace_s = 60;
  const StopLead l = DeriveStopLead(120, false, e, 1000);
  EXPECT_EQ(l.lead_s, 60);
  EXPECT_NE(l.source.find("GraceTime is 60 s"), std::string::npos) << l.source;
  e.grace_s = -1;  // unknown: the configured lead
  EXPECT_EQ(DeriveStopLead(120, false, e, 1000).lead_s, 120);
  e.grace_s = 0;  // a partition without grace sends no USR1 first: a user's signal
  EXPECT_EQ(DeriveStopLead(120, false, e, 1000).lead_s, 120);
}

TEST(StopLead, UnknownEndTimeTakesTheSmallerOfLeadAndGrace) {
  JobEnd e;
  EXPECT_EQ(DeriveStopLead(120, false, e, 1000).lead_s, 120);
  e.grace_s = 45;
  EXPECT_EQ(DeriveStopLead(120, false, e, 1000).lead_s, 45);
  e.grace_s = 600;
  EXPECT_EQ(DeriveStopLead(120, false, e, 1000).lead_s, 120);
}

TEST(StopLead, TheUsersLeadOverridesSlurm) {
  JobEnd e;
  e.end_wall = 1000;
  e.grace_s = 30;
  const StopLead l = DeriveStopLead(200, true, e, 990);
  EXPECT_EQ(l.lead_s, 200);
  EXPECT_EQ(l.source, "FTRAIN_USR1_LEAD_S=200");
}

TEST(StopLead, SlurmTimesAreLocalTime) {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 11;
  tm.tm_mday = 7;
  tm.tm_hour = 12;
  tm.tm_min = 34;
  tm.tm_sec = 56;
  tm.tm_isdst = -1;
  const double want = static_cast<double>(std::mktime(&tm));
  auto t = ParseSlurmTime("2026-12-07T12:34:56");
  ASSERT_TRUE(t);
  EXPECT_EQ(*t, want);
  EXPECT_FALSE(ParseSlurmTime("Unknown"));
  EXPECT_FALSE(ParseSlurmTime(""));
  EXPECT_FALSE(ParseSlurmTime("2026-12-07T12:34:56junk"));
}

}  // namespace
}  // namespace ftrain::orch
