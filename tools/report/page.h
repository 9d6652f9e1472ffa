// Writes the self-contained report page: the vendored charting library
// (Apache ECharts, from npm, pinned in web/package-lock.json and installed by
// scripts/setup.sh), the page script web/report.js, the data, and the
// library's licenses, all inline, so the file opens offline with no server.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace lockstep::report {

// The folder holding report.js, report.css and node_modules/echarts:
// $LOCKSTEP_REPORT_ASSETS, else <bin>/../share/lockstep/report, else the
// source tree's tools/report/web. Throws naming what to run when the
// charting library is missing.
std::string find_assets();

std::string render_page(const nlohmann::json& data, const std::string& title,
                        const std::string& assets);

}  // namespace lockstep::report
