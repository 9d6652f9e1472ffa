// Headless Chromium (Debian's `chromium`) on a report page: PNGs of every
// chart, a screenshot, and the page's own check that every chart drew.
// Each call starts a fresh browser with a throw-away profile and the flags a
// closed network and a root user need, and is bounded by a timeout.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace lockstep::report {

// $LOCKSTEP_CHROMIUM, else chromium / chromium-headless-shell on PATH;
// throws naming the Debian package when none is found.
std::string find_chromium();

// Loads `html#mode` and returns what the page left in <pre id="report-out">
// (report.js writes it for the modes "png" and "check").
nlohmann::json run_page(const std::string& chromium, const std::string& html,
                        const std::string& mode);

// Writes DIR/<chart id>.png for every chart; returns how many.
int export_pngs(const std::string& chromium, const std::string& html, const std::string& dir);

void screenshot(const std::string& chromium, const std::string& html, const std::string& png);

}  // namespace lockstep::report
