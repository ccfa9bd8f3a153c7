// The shipped llama-server rules parse and name the owners the reports name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/support/test_support.h"
#include "tools/lib/owner.h"

namespace retain::tool {
namespace {

class LlamaRulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<v1::Rules> loaded =
        LoadRules(test::SourceRoot() + "/share/rules/llama-server.textproto");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    rules_ = *loaded;
    OwnerOptions options;
    options.rules = &rules_;
    auto resolver = OwnerResolver::Create(symbolizer_, options);
    ASSERT_TRUE(resolver.ok()) << resolver.status();
    resolver_ = std::move(*resolver);
  }
  std::string Category(std::vector<std::string> stack) {
    const v1::Category* category = resolver_->CategoryOf(stack);
    return category == nullptr ? "" : category->name();
  }

  v1::Rules rules_;
  Symbolizer symbolizer_;
  std::unique_ptr<OwnerResolver> resolver_;
};

TEST_F(LlamaRulesTest, PromptCacheOfTheHybridModelReport) {
  // The stack of the +126 MiB per request report.
  EXPECT_EQ(Category({"std::vector<unsigned char>::_M_default_append", "server_prompt_cache::alloc",
                      "server_slot::prompt_save", "server_context::update_slots"}),
            "prompt-cache");
  EXPECT_TRUE(resolver_->CategoryOf({"server_prompt_cache::alloc"})->bounded());
}

TEST_F(LlamaRulesTest, OtherOwners) {
  EXPECT_EQ(Category({"llama_state_seq_get_data_ext", "main"}), "sequence-state");
  EXPECT_EQ(Category({"llama_kv_cache::llama_kv_cache", "llama_model::create_memory"}), "kv-cache");
  EXPECT_EQ(Category({"ggml_backend_cpu_buffer_type_alloc_buffer", "ggml_backend_buft_alloc_buffer",
                      "ggml_gallocr_reserve_n"}),
            "compute-buffers");
  EXPECT_EQ(Category({"ggml_aligned_malloc", "ggml_backend_cpu_buffer_type_alloc_buffer",
                      "llama_model::load_tensors"}),
            "model-weights");
  EXPECT_EQ(Category({"mmap", "llama_mmap::impl::impl"}), "model-weights");
  EXPECT_EQ(Category({"ggml_aligned_malloc", "ggml_backend_cpu_buffer_type_alloc_buffer"}),
            "ggml-backend-buffers");
  EXPECT_EQ(Category({"httplib::detail::read_content", "httplib::Server::process_request"}),
            "http");
  EXPECT_EQ(Category({"some_function", "main"}), "");
}

TEST(RulesTest, RejectsBadFiles) {
  test::TempDir dir;
  auto write = [&](const std::string& text) {
    std::string path = dir.path() + "/rules.textproto";
    FILE* f = fopen(path.c_str(), "w");
    fputs(text.c_str(), f);
    fclose(f);
    return path;
  };
  EXPECT_FALSE(LoadRules(dir.path() + "/missing").ok());
  EXPECT_FALSE(LoadRules(write("category { name: \"x\" frame: \"(\" }")).ok());
  EXPECT_FALSE(LoadRules(write("category { frame: \"x\" }")).ok());
  EXPECT_FALSE(LoadRules(write("category { name: \"x\" }")).ok());
  absl::StatusOr<v1::Rules> bad = LoadRules(write("category { nme: \"x\" }"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 1"), std::string::npos) << bad.status();
  EXPECT_TRUE(LoadRules(write("category { name: \"x\" frame: \"^a\" bounded: true }")).ok());
}

// Rules files are read bounded: never a FIFO (before, the read waited for a
// writer forever), a device (before, /dev/zero was read until bad_alloc) or a
// file larger than kMaxRulesFileBytes.
TEST(RulesTest, RefusesFilesThatAreNotSmallRegularFiles) {
  test::TempDir dir;
  const std::string fifo = dir.path() + "/rules.textproto";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  alarm(60);
  absl::StatusOr<v1::Rules> rules = LoadRules(fifo);
  alarm(0);
  ASSERT_FALSE(rules.ok());
  EXPECT_EQ(rules.status().message(),
            fifo +
                ": is a FIFO (named pipe), not a regular file; to read a rules file from a "
                "pipe, give - and pipe it to standard input");

  rules = LoadRules("/dev/zero");
  ASSERT_FALSE(rules.ok());
  EXPECT_EQ(rules.status().message(), "/dev/zero: is a character device, not a regular file");

  const std::string big = dir.path() + "/big.textproto";
  FILE* f = fopen(big.c_str(), "w");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(ftruncate(fileno(f), static_cast<off_t>(kMaxRulesFileBytes + 1)), 0);
  fclose(f);
  rules = LoadRules(big);
  ASSERT_FALSE(rules.ok());
  EXPECT_EQ(rules.status().message(),
            big + ": 1048577 bytes (1.0 MiB) is larger than the largest rules file read (1.0 MiB)");
}

// The standard library compiles regexes recursively: 50,000 nested groups
// (a 100 KB rules file) crashed retain-diff with a stack overflow. Now deep
// nesting is refused, and so is an over-long pattern.
TEST(ParseRulesTest, RefusesRegexesNestedTooDeeplyOrTooLong) {
  const std::string crashing = std::string(50000, '(') + "a" + std::string(50000, ')');
  EXPECT_FALSE(
      ParseRules(absl::StrCat("category { name: \"x\" frame: \"", crashing, "\" }"), "r.txt").ok());
  const std::string nested = std::string(100, '(') + "a" + std::string(100, ')');
  absl::StatusOr<v1::Rules> rules =
      ParseRules(absl::StrCat("category { name: \"x\" frame: \"", nested, "\" }"), "r.txt");
  ASSERT_FALSE(rules.ok());
  EXPECT_THAT(std::string(rules.status().message()),
              testing::EndsWith("': groups nested more than 32 deep"));
  // 32 levels are fine, and so are parentheses that are not groups.
  const std::string ok = std::string(32, '(') + "a" + std::string(32, ')') + "\\\\(\\\\)[(]";
  EXPECT_TRUE(
      ParseRules(absl::StrCat("category { name: \"x\" frame: \"", ok, "\" }"), "r.txt").ok());

  rules = ParseRules(
      absl::StrCat("category { name: \"x\" frame: \"", std::string(1025, 'a'), "\" }"), "r.txt");
  ASSERT_FALSE(rules.ok());
  EXPECT_EQ(rules.status().message(),
            "r.txt: category x: a frame regex of 1025 characters (at most 1024)");
}

// Found by rules_fuzz: std::regex parses the number of a back-reference or
// a repetition into a long without checking (a 20-digit one overflows it:
// undefined behaviour). Numbers of more than 6 digits are refused first;
// digits elsewhere are literal text and stay.
TEST(ParseRulesTest, RefusesNumbersTheRegexLibraryWouldOverflow) {
  const auto frame = [](const std::string& regex) {
    return ParseRules(absl::StrCat("category { name: \"x\" frame: \"", regex, "\" }"), "r.txt");
  };
  for (const std::string regex :
       {"\\\\22222222222222222222", "a{99999999999999999999}", "a{1,1234567}"}) {
    SCOPED_TRACE(regex);
    absl::StatusOr<v1::Rules> rules = frame(regex);
    ASSERT_FALSE(rules.ok());
    EXPECT_THAT(std::string(rules.status().message()),
                testing::EndsWith("': a repetition count or back-reference of more than 6 digits"));
  }
  EXPECT_TRUE(frame("0x7f0000001234|llama_3_70b|a{2,30}").ok());
}

// Found by rules_fuzz: a regex (or a name) with a newline in it (\n in the
// text format) made a two-line message.
TEST(ParseRulesTest, MessagesAreOneLineWhateverTheFileHolds) {
  absl::StatusOr<v1::Rules> rules =
      ParseRules("category { name: \"a\\nb\" frame: \"x\\n)\" }", "r.txt");
  ASSERT_FALSE(rules.ok());
  const std::string message(rules.status().message());
  EXPECT_THAT(message, testing::StartsWith("r.txt: category a\\nb: bad regex 'x\\n)': "));
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

}  // namespace
}  // namespace retain::tool
