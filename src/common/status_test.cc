// Tests for Status and StatusOr: codes and their names, the field an error
// names, WithContext, ToString, equality and HF_RETURN_IF_ERROR.
#include "common/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

namespace hf {
namespace {

TEST(StatusTest, DefaultIsOkWithEmptyMessageAndField) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.field(), "");
  EXPECT_EQ(s, Status::Ok());
}

TEST(StatusTest, FactoriesSetTheirCodeAndMessage) {
  struct Case {
    Status status;
    StatusCode code;
  };
  const Case cases[] = {
      {Status::InvalidArgument("m1"), StatusCode::kInvalidArgument},
      {Status::NotFound("m2"), StatusCode::kNotFound},
      {Status::AlreadyExists("m3"), StatusCode::kAlreadyExists},
      {Status::FailedPrecondition("m4"), StatusCode::kFailedPrecondition},
      {Status::ResourceExhausted("m5"), StatusCode::kResourceExhausted},
      {Status::Unavailable("m6"), StatusCode::kUnavailable},
      {Status::Internal("m7"), StatusCode::kInternal},
  };
  int i = 1;
  for (const Case& c : cases) {
    EXPECT_FALSE(c.status.ok());
    EXPECT_EQ(c.status.code(), c.code);
    EXPECT_EQ(c.status.message(), "m" + std::to_string(i));
    EXPECT_EQ(c.status.field(), "");
    ++i;
  }
}

TEST(StatusTest, InvalidArgumentCarriesTheField) {
  Status s = Status::InvalidArgument("must be >= 32", "gpu_memory_mb");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "must be >= 32");
  EXPECT_EQ(s.field(), "gpu_memory_mb");
}

TEST(StatusTest, StatusCodeNameCoversEveryCode) {
  EXPECT_EQ(StatusCodeName(StatusCode::kOk), "OK");
  EXPECT_EQ(StatusCodeName(StatusCode::kInvalidArgument), "INVALID_ARGUMENT");
  EXPECT_EQ(StatusCodeName(StatusCode::kNotFound), "NOT_FOUND");
  EXPECT_EQ(StatusCodeName(StatusCode::kAlreadyExists), "ALREADY_EXISTS");
  EXPECT_EQ(StatusCodeName(StatusCode::kFailedPrecondition),
            "FAILED_PRECONDITION");
  EXPECT_EQ(StatusCodeName(StatusCode::kResourceExhausted),
            "RESOURCE_EXHAUSTED");
  EXPECT_EQ(StatusCodeName(StatusCode::kUnavailable), "UNAVAILABLE");
  EXPECT_EQ(StatusCodeName(StatusCode::kInternal), "INTERNAL");
}

TEST(StatusTest, WithContextPrefixesMessageAndKeepsCodeAndField) {
  const Status inner =
      Status::InvalidArgument("must be >= 32", "gpu_memory_mb");
  const Status outer = inner.WithContext("placing task 7");
  EXPECT_EQ(outer.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(outer.message(), "placing task 7: must be >= 32");
  EXPECT_EQ(outer.field(), "gpu_memory_mb");
  // The original is unchanged.
  EXPECT_EQ(inner.message(), "must be >= 32");
}

TEST(StatusTest, WithContextNestsOutermostFirst) {
  const Status s =
      Status::NotFound("slice 3").WithContext("release").WithContext("gc");
  EXPECT_EQ(s.message(), "gc: release: slice 3");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
}

TEST(StatusTest, WithContextOnOkStaysOkWithoutMessage) {
  const Status s = Status::Ok().WithContext("anything");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.message(), "");
}

TEST(StatusTest, ToStringFormats) {
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  EXPECT_EQ(Status::NotFound("slice 9").ToString(), "NOT_FOUND: slice 9");
  EXPECT_EQ(Status::InvalidArgument("must be > 0", "memory_mib").ToString(),
            "INVALID_ARGUMENT: must be > 0 (field: memory_mib)");
  EXPECT_EQ(Status::Internal("x").WithContext("ctx").ToString(),
            "INTERNAL: ctx: x");
}

TEST(StatusTest, EqualityComparesCodeMessageAndField) {
  EXPECT_EQ(Status::NotFound("a"), Status::NotFound("a"));
  EXPECT_NE(Status::NotFound("a"), Status::NotFound("b"));
  EXPECT_NE(Status::NotFound("a"), Status::Internal("a"));
  EXPECT_NE(Status::InvalidArgument("a", "f"),
            Status::InvalidArgument("a", "g"));
  EXPECT_NE(Status::InvalidArgument("a", "f"), Status::InvalidArgument("a"));
}

TEST(StatusOrTest, HoldsAValue) {
  StatusOr<int> v = 42;
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v.status().ok());
  EXPECT_EQ(v.value(), 42);
  EXPECT_EQ(*v, 42);
  *v = 43;
  EXPECT_EQ(v.value(), 43);
}

TEST(StatusOrTest, HoldsAnError) {
  StatusOr<int> v = Status::NotFound("gone");
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(v.status().message(), "gone");
}

TEST(StatusOrTest, ArrowAndMoveOutOfValue) {
  StatusOr<std::string> v = std::string("hello");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->size(), 5u);
  std::string moved = std::move(v).value();
  EXPECT_EQ(moved, "hello");

  StatusOr<std::unique_ptr<int>> p = std::make_unique<int>(7);
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> owned = std::move(p).value();
  ASSERT_NE(owned, nullptr);
  EXPECT_EQ(*owned, 7);
}

TEST(StatusOrTest, ConstAccessors) {
  const StatusOr<std::string> v = std::string("abc");
  EXPECT_EQ(v.value(), "abc");
  EXPECT_EQ(*v, "abc");
  EXPECT_EQ(v->front(), 'a');
}

Status Step(bool fail, int* reached) {
  ++*reached;
  if (fail) return Status::Unavailable("step failed");
  return Status::Ok();
}

Status RunTwoSteps(bool fail_first, bool fail_second, int* reached,
                   bool* finished) {
  HF_RETURN_IF_ERROR(Step(fail_first, reached));
  HF_RETURN_IF_ERROR(Step(fail_second, reached));
  *finished = true;
  return Status::Ok();
}

TEST(ReturnIfErrorTest, ContinuesOnOk) {
  int reached = 0;
  bool finished = false;
  EXPECT_TRUE(RunTwoSteps(false, false, &reached, &finished).ok());
  EXPECT_EQ(reached, 2);
  EXPECT_TRUE(finished);
}

TEST(ReturnIfErrorTest, ReturnsTheFirstErrorUnchanged) {
  int reached = 0;
  bool finished = false;
  const Status s = RunTwoSteps(true, false, &reached, &finished);
  EXPECT_EQ(s, Status::Unavailable("step failed"));
  EXPECT_EQ(reached, 1);
  EXPECT_FALSE(finished);
}

TEST(ReturnIfErrorTest, ReturnsALaterError) {
  int reached = 0;
  bool finished = false;
  const Status s = RunTwoSteps(false, true, &reached, &finished);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(reached, 2);
  EXPECT_FALSE(finished);
}

TEST(ReturnIfErrorTest, EvaluatesTheExpressionOnce) {
  int calls = 0;
  auto f = [&]() -> Status {
    HF_RETURN_IF_ERROR((++calls, Status::Ok()));
    return Status::Internal("after");
  };
  EXPECT_EQ(f().code(), StatusCode::kInternal);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace hf
