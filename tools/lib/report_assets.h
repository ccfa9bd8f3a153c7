// report_assets: the page of retain-diff --html (tools/report/report.html,
// report.css and report.js), embedded in the tools library at build time
// by cmake/EmbedReport.cmake (the generated report_assets.cc in the build
// directory), so retain-diff needs no file beside it at run time.
//
// A build made while tools/report/ lacked the page embeds a placeholder
// (tests/e2e/report_placeholder/: the three markers and no viewer), and
// says so in `placeholder`.
//
// Thread-safe: constant data.
#ifndef RETAIN_TOOLS_LIB_REPORT_ASSETS_H_
#define RETAIN_TOOLS_LIB_REPORT_ASSETS_H_

#include "absl/strings/string_view.h"

namespace retain::tool {

struct ReportAssets {
  absl::string_view html;  // the template, with its three markers (html_report.h)
  absl::string_view css;
  absl::string_view js;
  bool placeholder = false;  // not the real page: tools/report/ was missing
};

// The assets this build embedded (static storage: the views never dangle).
ReportAssets EmbeddedReportAssets();

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_REPORT_ASSETS_H_
