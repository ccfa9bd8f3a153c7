// html_report: see html_report.h.
#include "tools/lib/html_report.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"

namespace retain::tool {

std::string EscapeJsonForHtml(absl::string_view json) {
  std::string out;
  out.reserve(json.size() + json.size() / 64);
  for (char c : json) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

absl::StatusOr<std::string> RenderHtmlReport(absl::string_view json, const ReportAssets& assets) {
  const std::string data = EscapeJsonForHtml(json);
  struct Part {
    absl::string_view marker;
    size_t at = 0;
    std::array<absl::string_view, 3> text;
  };
  std::array<Part, 3> parts = {{
      {kStyleMarker, 0, {"<style>", assets.css, "</style>"}},
      {kScriptMarker, 0, {"<script>", assets.js, "</script>"}},
      {kDataMarker, 0, {kDataElementStart, data, "</script>"}},
  }};
  size_t size = assets.html.size();
  for (Part& part : parts) {
    part.at = assets.html.find(part.marker);
    if (part.at == absl::string_view::npos ||
        assets.html.find(part.marker, part.at + 1) != absl::string_view::npos) {
      return absl::InternalError(absl::StrCat("the report template must hold ", part.marker,
                                              " exactly once (tools/report/report.html)"));
    }
    for (absl::string_view text : part.text) size += text.size();
  }
  // The template is cut at the markers, in their order in it; what is put
  // in is never searched again.
  std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.at < b.at; });
  std::string page;
  page.reserve(size);
  size_t from = 0;
  for (const Part& part : parts) {
    absl::StrAppend(&page, assets.html.substr(from, part.at - from));
    for (absl::string_view text : part.text) absl::StrAppend(&page, text);
    from = part.at + part.marker.size();
  }
  absl::StrAppend(&page, assets.html.substr(from));
  return page;
}

absl::Status WriteHtmlReport(const std::string& path, absl::string_view page) {
  const std::string temporary = path + ".tmp";
  auto failed = [](const std::string& what, int error) {
    return absl::InvalidArgumentError(absl::StrCat("--html: cannot ", what, ": ", strerror(error)));
  };
  FILE* file = fopen(temporary.c_str(), "wb");
  if (file == nullptr) {
    const int error = errno;
    return failed(absl::StrCat("write ", temporary), error);
  }
  const bool written = fwrite(page.data(), 1, page.size(), file) == page.size();
  const int write_error = written ? 0 : (errno != 0 ? errno : EIO);
  // fclose flushes: a full disk can show only here.
  const bool closed = fclose(file) == 0;
  const int close_error = closed ? 0 : errno;
  if (!written || !closed) {
    remove(temporary.c_str());
    return failed(absl::StrCat("write ", temporary), written ? close_error : write_error);
  }
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    remove(temporary.c_str());
    return failed(absl::StrCat("rename ", temporary, " to ", path), error);
  }
  return absl::OkStatus();
}

}  // namespace retain::tool
