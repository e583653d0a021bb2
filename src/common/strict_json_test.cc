// ParseStrictJson: the checks nlohmann::json's parser does not make, each an
// InvalidArgument naming the value at fault by its path.
#include "common/strict_json.h"

#include <gtest/gtest.h>

#include <string>

namespace hf {
namespace {

::testing::AssertionResult Names(std::string_view text,
                                 const std::string& field,
                                 const StrictJsonOptions& options = {}) {
  const Status s = ParseStrictJson(text, options).status();
  if (s.code() == StatusCode::kInvalidArgument && s.field() == field) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "expected invalid_argument on '" << field << "', got "
         << s.ToString() << " (field '" << s.field() << "')";
}

TEST(StrictJsonTest, AcceptsWhatJsonAllows) {
  auto doc = ParseStrictJson(R"({"a":[1,2.5,"x",{"b":null}],"c":{"a":1}})");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ((*doc)["a"][3]["b"], nullptr);
  EXPECT_TRUE(ParseStrictJson("[1, 2]").ok());  // any top level
  EXPECT_TRUE(ParseStrictJson(R"({"s":"tab\tand\nnewline"})").ok());
}

// nlohmann throws out_of_range (not parse_error) on a number a double
// cannot hold; callers catching parse_error let it escape (the API's 500,
// and found by inventory_fuzz: an inventory file with -1e400 terminated
// hf-agent).
TEST(StrictJsonTest, NumberOutOfRangeNamesItsPath) {
  EXPECT_TRUE(Names(R"({"gpu_memory_mb":1e400})", "gpu_memory_mb"));
  EXPECT_TRUE(Names(R"({"gpus":[{"memory_mb":1},{"memory_mb":-1e400}]})",
                    "gpus[1].memory_mb"));
  EXPECT_TRUE(Names("1e400", "body"));
}

TEST(StrictJsonTest, DuplicateKeysAreRejectedAtAnyDepth) {
  EXPECT_TRUE(Names(R"({"name":"a","name":"b"})", "name"));
  EXPECT_TRUE(Names(R"({"a":[[1],[2,{"k":1,"k":1}]]})", "a[1][1].k"));
  EXPECT_TRUE(ParseStrictJson(R"({"g":[{"i":0},{"i":1}]})").ok());
}

TEST(StrictJsonTest, CommentKeysMayRepeat) {
  StrictJsonOptions options;
  options.comment_prefix = "_";
  EXPECT_TRUE(ParseStrictJson(R"({"_c":1,"_c":2,"a":1})", options).ok());
  EXPECT_TRUE(Names(R"({"_c":1,"a":1,"a":2})", "a", options));
}

TEST(StrictJsonTest, KeysAndStringsHoldNoForbiddenCharacters) {
  EXPECT_TRUE(Names(R"({"":1})", "body"));
  EXPECT_TRUE(Names(R"({"env":{"":"x"}})", "env"));
  EXPECT_TRUE(Names(R"({"a\u0007":1})", "a\a"));
  EXPECT_TRUE(Names(R"({"name":"a\u0000b"})", "name"));
  EXPECT_TRUE(Names(R"({"args":["x","\u0000"]})", "args[1]"));
}

TEST(StrictJsonTest, DepthSyntaxAndTopLevelName) {
  StrictJsonOptions options;
  options.max_depth = 3;
  options.top_level = "(document)";
  EXPECT_TRUE(ParseStrictJson(R"({"a":{"b":[]}})", options).ok());
  EXPECT_TRUE(Names(R"({"a":{"b":[[]]}})", "(document)", options));
  EXPECT_TRUE(Names("{", "(document)", options));
  EXPECT_TRUE(Names("{\"a\":\"\xff\"}", "(document)", options));
  const Status s = ParseStrictJson("{\n  \"a\": tru\n}").status();
  EXPECT_NE(s.message().find("line 3"), std::string::npos) << s.message();
}

TEST(StrictJsonTest, ControlCharactersAreC0DelAndC1) {
  EXPECT_FALSE(HasControlCharacter("plain name-1.2_x"));
  EXPECT_FALSE(HasControlCharacter("caf\xc3\xa9"));  // é
  EXPECT_TRUE(HasControlCharacter(std::string("a\0b", 3)));
  EXPECT_TRUE(HasControlCharacter("a\tb"));
  EXPECT_TRUE(HasControlCharacter("a\x7f"));
  EXPECT_TRUE(HasControlCharacter("a\xc2\x9b"));  // CSI
  EXPECT_FALSE(HasControlCharacter("\xc2\xa0"));  // no-break space
}

}  // namespace
}  // namespace hf
