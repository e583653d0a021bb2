// The agent's reading of heartbeat replies: the documented shape read back
// exactly, and anything else left out, never thrown on. (The other
// direction, what the agent sends read by the server's strict decoders, is
// in src/api/codec_test.cc.)
#include "wire/node_wire.h"

#include <gtest/gtest.h>

namespace hf::wire {
namespace {

TEST(HeartbeatReplyTest, ReadsBackWhatTheServerWrites) {
  HeartbeatReply reply;
  reply.quotas = {{7, 70, 4096}, {8, 80, std::nullopt}};
  EXPECT_EQ(ReadHeartbeatReply(ToJson(reply)), reply);
  reply.newer_applied = ReportNumber{3, 41};
  const json j = ToJson(reply);
  EXPECT_EQ(j["applied"], false);
  EXPECT_EQ(ReadHeartbeatReply(j), reply);
}

TEST(HeartbeatReplyTest, LeavesOutWhatIsNotOfTheDocumentedShape) {
  for (const char* text :
       {"[]", "null", "\"ok\"", "{\"quotas\": 5}", "{\"quotas\": [1, null]}",
        "{\"quotas\": [{\"task_id\": \"7\", \"slice_id\": 70,"
        " \"memory_mb\": 1}]}",
        "{\"quotas\": [{\"task_id\": 7, \"slice_id\": 70}]}",
        "{\"quotas\": [{\"task_id\": 7, \"slice_id\": 70,"
        " \"memory_mb\": -1}]}",
        "{\"quotas\": [{\"task_id\": 7, \"slice_id\": 70,"
        " \"memory_mb\": 1.5}]}",
        "{\"quotas\": [{\"task_id\": 18446744073709551615, \"slice_id\": 1,"
        " \"memory_mb\": 1}]}"}) {
    const json j = json::parse(text);
    EXPECT_TRUE(ReadHeartbeatReply(j).quotas.empty()) << text;
    EXPECT_FALSE(ReadHeartbeatReply(j).newer_applied) << text;
  }
  // Not applied, though the newer number cannot be read: still not applied.
  const HeartbeatReply odd =
      ReadHeartbeatReply(json::parse(R"({"newer_report": "yes"})"));
  ASSERT_TRUE(odd.newer_applied);
  EXPECT_EQ(*odd.newer_applied, ReportNumber{});
}

TEST(HookReportTest, ReadsBackWhatToJsonWrites) {
  HookReport h;
  h.attached = true;
  h.attaches = 3;
  h.processes = 2;
  h.used_bytes = 240 << 20;
  h.peak_bytes = 250 << 20;
  h.quota_bytes = std::int64_t{256} << 20;
  h.quota_ooms = 1;
  h.physical_ooms = 2;
  h.driver_bytes = 1 << 20;
  h.share_achieved_percent = 47.5;
  h.interference = 1.37;
  h.interference_samples = 812;
  h.unhooked_pids = {4242};
  h.unhooked_reason = "process 4242 runs without the hook";
  EXPECT_EQ(ReadHookReport(ToJson(h)), h);
  EXPECT_EQ(ReadHookReport(ToJson(HookReport{})), HookReport{});
  EXPECT_EQ(ReadHookReport(json::array()), HookReport{});
  EXPECT_EQ(ReadHookReport(json{{"used_bytes", "many"}}).used_bytes, 0);
  EXPECT_FALSE(ReadHookReport(json{{"attached", 1}}).attached);
}

TEST(NodeReportTest, AHeartbeatBodyLeavesTheNameToThePath) {
  NodeReport r;
  r.name = "n1";
  EXPECT_EQ(ToJson(r, true)["node_id"], "n1");
  EXPECT_FALSE(ToJson(r, false).contains("node_id"));
  EXPECT_FALSE(ToJson(r, false).contains("report_epoch"));
  r.number = ReportNumber{2, 9};
  EXPECT_EQ(ToJson(r, false)["report_epoch"], 2);
  EXPECT_EQ(ToJson(r, false)["report_seq"], 9);
}

}  // namespace
}  // namespace hf::wire
