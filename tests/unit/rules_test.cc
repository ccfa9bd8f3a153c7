// The shipped llama-server rules parse and name the owners the reports name.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace retain::tool
