// retain-diff --html's page (tools/lib/html_report.h): the three markers
// replaced once each and nothing else touched, every '<' of the JSON
// written \u003c, the template checked, the file written whole or not at
// all. The real runs are in tests/e2e/html_report_test.cc.
#include "tools/lib/html_report.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tools/lib/report_assets.h"

namespace retain::tool {
namespace {

ReportAssets Assets(absl::string_view html) {
  ReportAssets assets;
  assets.html = html;
  assets.css = "body{color:red}";
  // The page's script may name the markers: what is put in is never
  // searched again.
  assets.js = "const m = '<!--RETAIN_DATA-->';";
  return assets;
}

constexpr char kTemplate[] =
    "<!DOCTYPE html>\n<head>\n<!--RETAIN_STYLE-->\n</head>\n<body>\n<!--RETAIN_DATA-->\n"
    "<!--RETAIN_SCRIPT-->\n</body>\n";

TEST(HtmlReportTest, EachMarkerIsReplacedOnce) {
  absl::StatusOr<std::string> page =
      RenderHtmlReport("{\"schema\":\"retain-diff/1\"}\n", Assets(kTemplate));
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(*page,
            "<!DOCTYPE html>\n<head>\n<style>body{color:red}</style>\n</head>\n<body>\n"
            "<script type=\"application/json\" id=\"retain-data\">{\"schema\":\"retain-diff/1\"}"
            "\n</script>\n<script>const m = '<!--RETAIN_DATA-->';</script>\n</body>\n");
}

TEST(HtmlReportTest, NoStringOfTheDataCanEndItsElement) {
  const std::string json = "{\"name\":\"</script><script>alert(1)</script><!--\"}\n";
  EXPECT_EQ(EscapeJsonForHtml(json),
            "{\"name\":\"\\u003c/script>\\u003cscript>alert(1)\\u003c/script>\\u003c!--\"}\n");
  absl::StatusOr<std::string> page = RenderHtmlReport(json, Assets(kTemplate));
  ASSERT_TRUE(page.ok()) << page.status();
  const size_t start = page->find(kDataElementStart) + std::string(kDataElementStart).size();
  const size_t end = page->find("</script>", start);
  EXPECT_EQ(page->substr(start, end - start), EscapeJsonForHtml(json))
      << "the element ends where the data does";
}

TEST(HtmlReportTest, ATemplateWithoutEachMarkerOnceIsRefused) {
  for (const char* html :
       {"<!--RETAIN_STYLE--><!--RETAIN_SCRIPT-->",
        "<!--RETAIN_STYLE--><!--RETAIN_SCRIPT--><!--RETAIN_DATA--><!--RETAIN_DATA-->"}) {
    absl::StatusOr<std::string> page = RenderHtmlReport("{}", Assets(html));
    EXPECT_FALSE(page.ok()) << html;
    EXPECT_NE(page.status().message().find("exactly once"), std::string::npos) << page.status();
  }
}

TEST(HtmlReportTest, TheEmbeddedPageHasItsMarkers) {
  const ReportAssets assets = EmbeddedReportAssets();
  absl::StatusOr<std::string> page = RenderHtmlReport("{}\n", assets);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_NE(page->find(std::string(kDataElementStart) + "{}\n</script>"), std::string::npos);
  EXPECT_EQ(page->find("<!--RETAIN_STYLE-->"), std::string::npos);
  EXPECT_FALSE(assets.css.empty());
  EXPECT_FALSE(assets.js.empty());
}

class WriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/html_report_test.XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    dir_ = name;
  }
  void TearDown() override {
    std::string command = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(system(command.c_str()), 0);
  }
  std::string dir_;
};

TEST_F(WriteTest, ThePageIsWrittenWholeUnderItsName) {
  const std::string path = dir_ + "/report.html";
  ASSERT_TRUE(WriteHtmlReport(path, "<p>one</p>").ok());
  ASSERT_TRUE(WriteHtmlReport(path, "<p>two</p>").ok()) << "an existing page is replaced";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "<p>two</p>");
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0) << "no temporary file is left";
}

TEST_F(WriteTest, AMissingDirectoryOrADirectoryIsAnError) {
  absl::Status missing = WriteHtmlReport(dir_ + "/no/such/report.html", "x");
  EXPECT_FALSE(missing.ok());
  EXPECT_EQ(missing.message(),
            "--html: cannot write " + dir_ + "/no/such/report.html.tmp: No such file or directory");
  ASSERT_EQ(mkdir((dir_ + "/taken").c_str(), 0755), 0);
  absl::Status directory = WriteHtmlReport(dir_ + "/taken", "x");
  EXPECT_FALSE(directory.ok());
  EXPECT_NE(directory.message().find("cannot rename"), std::string::npos) << directory;
  EXPECT_NE(access((dir_ + "/taken.tmp").c_str(), F_OK), 0) << "the temporary file is removed";
}

}  // namespace
}  // namespace retain::tool
