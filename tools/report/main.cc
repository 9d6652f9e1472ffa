// lockstep-report: `lockstep report RUN_DIR... -o report.html` (docs/report.md).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "tools/report/chromium.h"
#include "tools/report/inputs.h"
#include "tools/report/page.h"

namespace {

struct Options {
  std::vector<std::string> inputs;
  std::string output = "report.html";
  std::string title = "lockstep report";
  std::string png_dir, screenshot;
  bool check = false;
};

// --check: every chart drew something and the page logged no error.
int check_page(const std::string& chromium, const std::string& html) {
  auto out = lockstep::report::run_page(chromium, html, "check");
  int bad = 0;
  for (const auto& c : out["charts"]) {
    const bool ok = c.value("points", 0) > 0 && c.value("painted", 0) > 0;
    if (!ok) ++bad;
    fmt::print(stderr, "  {:<40} {:>6} points {:>8} painted pixels  x {:<8} {:>3} marks  {}\n",
               c.value("id", "?"), c.value("points", 0), c.value("painted", 0), c.value("x", "?"),
               c.value("marks", 0), ok ? "ok" : "EMPTY");
  }
  for (const auto& e : out["errors"])
    fmt::print(stderr, "  page error: {}\n", e.get<std::string>());
  const size_t n = out["charts"].size();
  fmt::print(stderr, "lockstep report: check: {} chart(s), {} empty, {} page error(s)\n", n, bad,
             out["errors"].size());
  return (bad == 0 && out["errors"].empty() && n > 0) ? 0 : 1;
}

int run(const Options& o) {
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& in : o.inputs) runs.push_back(lockstep::report::read_input(in));
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char stamp[64];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  nlohmann::json data = {{"generated", stamp}, {"runs", runs}};
  const std::string assets = lockstep::report::find_assets();
  std::ofstream(o.output) << lockstep::report::render_page(data, o.title, assets);
  fmt::print(stderr, "lockstep report: {} ({} input(s), {:.1f} MB)\n", o.output, runs.size(),
             static_cast<double>(std::filesystem::file_size(o.output)) / 1e6);
  if (o.png_dir.empty() && o.screenshot.empty() && !o.check) return 0;
  const std::string chromium = lockstep::report::find_chromium();
  if (!o.png_dir.empty())
    fmt::print(stderr, "lockstep report: {} chart(s) written to {}/\n",
               lockstep::report::export_pngs(chromium, o.output, o.png_dir), o.png_dir);
  if (!o.screenshot.empty()) {
    lockstep::report::screenshot(chromium, o.output, o.screenshot);
    fmt::print(stderr, "lockstep report: screenshot {}\n", o.screenshot);
  }
  return o.check ? check_page(chromium, o.output) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Self-contained HTML page with interactive charts of run directories, sweeps, "
      "labs, `lockstep bench --json`, `lockstep plan --json` and `plan validate --json` files "
      "(docs/report.md)",
      "lockstep report"};
  Options o;
  app.add_option("inputs", o.inputs, "run directories (--run-dir, lockstep sweep --dir) or files")
      ->required();
  app.add_option("-o,--output", o.output, "the page to write")->capture_default_str();
  app.add_option("--title", o.title)->capture_default_str();
  app.add_option("--png", o.png_dir,
                 "also write each chart as DIR/<chart>.png (headless Chromium)");
  app.add_option("--screenshot", o.screenshot, "also write a screenshot of the page (PNG)");
  app.add_flag("--check", o.check,
               "open the page in headless Chromium; fail unless every chart drew and no error "
               "was logged");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const lockstep::InvalidArgument& e) {
    fmt::print(stderr, "lockstep report: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep report: {}\n", e.what());
    return 1;
  }
}
