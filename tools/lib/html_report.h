// html_report: retain-diff --html FILE, one self-contained page: the
// embedded template (report_assets.h) with its three markers replaced, each
// alone on its line in report.html:
//   <!--RETAIN_STYLE-->   by <style> + report.css + </style>
//   <!--RETAIN_SCRIPT-->  by <script> + report.js + </script>
//   <!--RETAIN_DATA-->    by <script type="application/json" id="retain-data">
//                         + the JSON document + </script>
// The JSON is byte for byte what `retain-diff --json --top 0` prints for
// the same snapshots and options, except that every '<' is written \u003c:
// '<' occurs only inside JSON strings, where \u003c reads back the same
// (JSON.parse), and without it no "</script>" in a frame or category name
// can end the element. Nothing else is added: the page makes no request.
//
// Thread-compatible; WriteHtmlReport writes FILE.tmp and renames it, so
// FILE is never half-written.
#ifndef RETAIN_TOOLS_LIB_HTML_REPORT_H_
#define RETAIN_TOOLS_LIB_HTML_REPORT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/lib/report_assets.h"

namespace retain::tool {

inline constexpr char kStyleMarker[] = "<!--RETAIN_STYLE-->";
inline constexpr char kScriptMarker[] = "<!--RETAIN_SCRIPT-->";
inline constexpr char kDataMarker[] = "<!--RETAIN_DATA-->";
inline constexpr char kDataElementStart[] = "<script type=\"application/json\" id=\"retain-data\">";

// `json` with every '<' written \u003c.
std::string EscapeJsonForHtml(absl::string_view json);

// The page of `json` (a retain-diff/1 or retain-trend/1 document) on
// `assets`. Internal error when the template lacks a marker or has one
// twice (the build checks it too: cmake/EmbedReport.cmake).
absl::StatusOr<std::string> RenderHtmlReport(absl::string_view json, const ReportAssets& assets);

// Writes `page` to `path` + ".tmp", then renames it to `path`. The message
// of an error names the file and the system's reason, e.g. "--html: cannot
// write /no/such/dir/r.html.tmp: No such file or directory".
absl::Status WriteHtmlReport(const std::string& path, absl::string_view page);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_HTML_REPORT_H_
