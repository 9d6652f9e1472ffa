#include "tools/report/page.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/executable.h"

namespace lockstep::report {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read {}", path.string()));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// Inline scripts end at the first "</"; JSON may escape the slash.
std::string script_safe_json(const nlohmann::json& data) {
  std::string text = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') out += '\\';
  }
  return out;
}

bool has_library(const fs::path& dir) {
  return fs::exists(dir / "node_modules/echarts/dist/echarts.min.js") &&
         fs::exists(dir / "report.js");
}

// Keeps the page script's error hooks ahead of everything else.
constexpr const char* kErrorHooks = R"(window.__reportErrors = [];
addEventListener('error', function (e) { __reportErrors.push(String(e.message || e)); });
addEventListener('unhandledrejection', function (e) { __reportErrors.push(String(e.reason)); });
(function () { var ce = console.error; console.error = function () {
  __reportErrors.push(Array.prototype.map.call(arguments, String).join(' ')); ce.apply(console, arguments); }; })();)";

}  // namespace

std::string find_assets() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("LOCKSTEP_REPORT_ASSETS")) candidates.emplace_back(env);
  candidates.push_back(fs::path(executable_dir()) / "../share/lockstep/report");
  candidates.emplace_back(LOCKSTEP_REPORT_SOURCE_ASSETS);
  for (const auto& c : candidates)
    if (has_library(c)) return c.string();
  throw Error(fmt::format(
      "the charting library is not installed: no node_modules/echarts in {} (run `bash "
      "scripts/setup.sh`, or `npm ci --prefix {}`; or point LOCKSTEP_REPORT_ASSETS at a copy)",
      LOCKSTEP_REPORT_SOURCE_ASSETS, LOCKSTEP_REPORT_SOURCE_ASSETS));
}

std::string render_page(const nlohmann::json& data, const std::string& title,
                        const std::string& assets) {
  const fs::path a(assets), lib = a / "node_modules/echarts";
  const auto version = nlohmann::json::parse(slurp(lib / "package.json")).value("version", "?");
  std::string licenses = fmt::format("Apache ECharts {} (Apache-2.0)\n\n{}\n{}\n", version,
                                     slurp(lib / "LICENSE"), slurp(lib / "NOTICE"));
  if (fs::exists(a / "node_modules/zrender/LICENSE"))
    licenses += "\nZRender (bundled in ECharts)\n\n" + slurp(a / "node_modules/zrender/LICENSE");
  std::string page;
  page += fmt::format(
      "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>{}</title>\n<style>\n{}</style>\n<script>\n{}\n</script>\n",
      html_escape(title), slurp(a / "report.css"), kErrorHooks);
  page += fmt::format(
      "<!-- Apache ECharts {}, Apache-2.0: license text at the end of the page -->\n"
      "<script>\n{}\n</script>\n</head>\n<body>\n",
      version, slurp(lib / "dist/echarts.min.js"));
  page += fmt::format(
      "<header><h1>{}</h1><p id=\"summary\"></p></header>\n<main id=\"report\"></main>\n",
      html_escape(title));
  page += "<script>\nwindow.REPORT_DATA = " + script_safe_json(data) + ";\n</script>\n";
  page += "<script>\n" + slurp(a / "report.js") + "\n</script>\n";
  page += "<details class=\"licenses\"><summary>Third-party licenses</summary><pre>" +
          html_escape(licenses) + "</pre></details>\n</body></html>\n";
  return page;
}

}  // namespace lockstep::report
