#include "tools/report/chromium.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::report {
namespace {

namespace fs = std::filesystem;

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string read_output(const fs::path& p) {  // empty if chromium wrote none
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs chromium with the page and extra flags; returns its stdout.
std::string run_chromium(const std::string& chromium, const std::string& url,
                         const std::string& flags) {
  const fs::path tmp =
      fs::temp_directory_path() / fmt::format("lockstep-report-{}-{}", getpid(), rand());
  fs::create_directories(tmp);
  // The closed network refuses Chromium's background connections, and root
  // needs --no-sandbox; virtual time lets the page finish drawing first.
  const std::string cmd = fmt::format(
      "timeout 120 {} --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync "
      "--disable-dev-shm-usage --hide-scrollbars --user-data-dir={} --virtual-time-budget=15000 {} {} "
      ">{} 2>{}",
      quote(chromium), quote((tmp / "profile").string()), flags, quote(url),
      quote((tmp / "out").string()), quote((tmp / "err").string()));
  const int rc = std::system(cmd.c_str());
  std::string out = read_output(tmp / "out"), err = read_output(tmp / "err");
  fs::remove_all(tmp);
  if (rc != 0)
    throw Error(fmt::format("{} failed ({}) on {}:\n{}", chromium, rc, url, err.substr(0, 2000)));
  return out;
}

std::string file_url(const std::string& html, const std::string& mode) {
  return "file://" + fs::absolute(html).string() + (mode.empty() ? "" : "#" + mode);
}

std::string html_unescape(std::string s) {
  const std::pair<const char*, const char*> entities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&amp;", "&"}};
  for (auto [from, to] : entities)
    for (size_t at; (at = s.find(from)) != std::string::npos;) s.replace(at, std::strlen(from), to);
  return s;
}

std::string base64_decode(const std::string& in) {
  std::string out;
  int value = 0, bits = -8;
  for (unsigned char c : in) {
    int d;
    if (c >= 'A' && c <= 'Z')
      d = c - 'A';
    else if (c >= 'a' && c <= 'z')
      d = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      d = c - '0' + 52;
    else if (c == '+')
      d = 62;
    else if (c == '/')
      d = 63;
    else
      continue;
    value = (value << 6) + d;
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((value >> bits) & 0xff));
      bits -= 8;
    }
  }
  return out;
}

}  // namespace

std::string find_chromium() {
  if (const char* env = std::getenv("LOCKSTEP_CHROMIUM")) return env;
  for (const char* name : {"chromium", "chromium-headless-shell", "chromium-browser"}) {
    const std::string probe = fmt::format("command -v {} >/dev/null 2>&1", name);
    if (std::system(probe.c_str()) == 0) return name;
  }
  throw Error(
      "headless Chromium is needed for --png/--screenshot/--check: install the Debian "
      "package `chromium` (scripts/setup.sh does) or set LOCKSTEP_CHROMIUM");
}

nlohmann::json run_page(const std::string& chromium, const std::string& html,
                        const std::string& mode) {
  const std::string dom = run_chromium(chromium, file_url(html, mode), "--dump-dom");
  const std::string open = "<pre id=\"report-out\">";
  const size_t begin = dom.rfind(open);  // the element is appended last
  const size_t end = begin == std::string::npos ? begin : dom.find("</pre>", begin);
  if (begin == std::string::npos || end == std::string::npos)
    throw Error(
        fmt::format("{}: the page did not finish (no report-out element after loading in "
                    "{}); open it in a browser and look at its console",
                    html, chromium));
  auto out = nlohmann::json::parse(
      html_unescape(dom.substr(begin + open.size(), end - begin - open.size())), nullptr, false);
  if (out.is_discarded()) throw Error(fmt::format("{}: the page wrote malformed output", html));
  return out;
}

int export_pngs(const std::string& chromium, const std::string& html, const std::string& dir) {
  auto out = run_page(chromium, html, "png");
  fs::create_directories(dir);
  int n = 0;
  for (auto it = out["charts"].begin(); it != out["charts"].end(); ++it) {
    const std::string url = it.value().get<std::string>();
    const auto comma = url.find(',');
    std::ofstream(fs::path(dir) / (it.key() + ".png"), std::ios::binary)
        << base64_decode(url.substr(comma + 1));
    ++n;
  }
  return n;
}

void screenshot(const std::string& chromium, const std::string& html, const std::string& png) {
  run_chromium(
      chromium, file_url(html, "screenshot"),
      fmt::format("--window-size=1400,2400 --screenshot={}", quote(fs::absolute(png).string())));
  if (!fs::exists(png)) throw Error(fmt::format("{} wrote no screenshot to {}", chromium, png));
}

}  // namespace lockstep::report
