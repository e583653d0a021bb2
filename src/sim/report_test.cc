// hf-sim's result documents: what ToJson writes FromJson reads back, and a
// hand-edited or damaged document is an InvalidArgument, never undefined
// behaviour or a drawing that never ends.
#include "sim/report.h"

#include <gtest/gtest.h>

#include <string>

namespace hf::sim {
namespace {

ExperimentResult Sample() {
  ExperimentResult r;
  r.policy = "best-fit";
  r.seeds = {42, 43};
  for (int x : {0, 50, 100}) {
    Point p;
    p.x = x;
    p.unallocated_pct = {100.0 - x, 99.0 - x, 101.0 - x};
    r.points.push_back(p);
  }
  return r;
}

// A document with one point whose x is `x` (JSON text).
std::string WithX(const std::string& x) {
  const std::string stat = R"({"median":1,"p25":1,"p75":1})";
  return R"({"policy":"p","seeds":[1],"points":[{"x":)" + x +
         R"(,"unallocated_pct":)" + stat + R"(,"frag_amount_pct":)" + stat +
         R"(,"frag_ratio_pct":)" + stat + "}]}";
}

TEST(ReportTest, FromJsonReadsWhatToJsonWrites) {
  auto back = FromJson(ToJson(Sample()), "r.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->policy, "best-fit");
  ASSERT_EQ(back->points.size(), 3u);
  EXPECT_EQ(back->points[1].x, 50);
  EXPECT_EQ(back->points[2].unallocated_pct.p75, 1.0);
  EXPECT_FALSE(ToSvg(*back).empty());
}

// Found with trace_fuzz: x = 1e300 was converted to int (undefined
// behaviour), and x = 2^31 - 1 made ToSvg's axis loop overflow and allocate
// without end.
TEST(ReportTest, PointsOutsideTheAxisAreRejected) {
  EXPECT_TRUE(FromJson(WithX("130"), "r.json").ok());
  for (const char* x : {"1e300", "2147483647", "-1", "1001", "2.5", "\"7\""}) {
    const auto r = FromJson(WithX(x), "r.json");
    ASSERT_FALSE(r.ok()) << x;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << x;
    EXPECT_NE(r.status().message().find("r.json"), std::string::npos);
  }
}

TEST(ReportTest, BrokenDocumentsAreInvalidArgument) {
  for (const std::string& text :
       {std::string("{"), std::string("[]"), std::string(R"({"policy":1})"),
        std::string(R"({"policy":"p","policy":"q","seeds":[],"points":[]})"),
        WithX("1").replace(WithX("1").find("\"median\":1"), 10,
                           "\"median\":1e400")}) {
    const auto r = FromJson(text, "r.json");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
  }
}

}  // namespace
}  // namespace hf::sim
