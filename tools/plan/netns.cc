#include "tools/plan/netns.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::plan_tool {
namespace {

// Runs a shell command quietly; true on exit status 0.
bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

void must(const std::string& cmd) {
  if (!sh(cmd)) throw Error(fmt::format("network namespaces: '{}' failed", cmd));
}

}  // namespace

LinkShape parse_shape(const std::string& text) {
  LinkShape s;
  s.label = text;
  std::string rate = text;
  if (auto colon = text.find(':'); colon != std::string::npos) {
    rate = text.substr(0, colon);
    std::string lat = text.substr(colon + 1);
    char* end = nullptr;
    s.latency_ms = std::strtod(lat.c_str(), &end);
    std::string unit = end ? end : "";
    if (end == lat.c_str() || (unit != "ms" && unit != "us") || s.latency_ms < 0)
      throw InvalidArgument(fmt::format("--shape {}: latency must look like 2ms or 500us", text));
    if (unit == "us") s.latency_ms /= 1000;
  }
  char* end = nullptr;
  double v = std::strtod(rate.c_str(), &end);
  std::string unit = end ? end : "";
  double scale = unit == "kbit" ? 1e3 : unit == "mbit" ? 1e6 : unit == "gbit" ? 1e9 : 0;
  if (end == rate.c_str() || scale == 0 || !(v > 0))
    throw InvalidArgument(fmt::format("--shape {}: rate must look like 200mbit or 1gbit", text));
  s.rate = rate;
  s.bytes_per_s = v * scale / 8;
  return s;
}

NetnsHosts::NetnsHosts(int hosts) {
  if (hosts < 2) throw InvalidArgument("--netns needs 2 or more hosts");
  if (geteuid() != 0) throw Error("--netns needs root (ip netns add)");
  if (!sh("command -v ip") || !sh("command -v tc"))
    throw Error("--netns needs iproute2 (ip and tc)");
  const int id = getpid() % 100000;
  const std::string net = fmt::format("10.{}.{}", 200 + id % 50, id % 250 + 1);
  launcher_ip_ = net + ".1";
  bridge_ = fmt::format("lspbr{}", id);
  try {
    must(fmt::format("ip link add {} type bridge", bridge_));
    must(fmt::format("ip addr add {}/24 dev {}", launcher_ip_, bridge_));
    must(fmt::format("ip link set {} up", bridge_));
    for (int i = 0; i < hosts; ++i) {
      std::string ns = fmt::format("lsp{}h{}", id, i), veth = fmt::format("lsv{}h{}", id, i);
      must("ip netns add " + ns);
      names_.push_back(ns);
      must(fmt::format("ip link add {} type veth peer name eth0 netns {}", veth, ns));
      veths_.push_back(veth);
      must(fmt::format("ip link set {} master {} up", veth, bridge_));
      must(fmt::format("ip -n {} addr add {}.{}/24 dev eth0", ns, net, 10 + i));
      must(fmt::format("ip -n {} link set eth0 up", ns));
      must(fmt::format("ip -n {} link set lo up", ns));
    }
    // netem is a kernel module that some kernels leave out (this machine's).
    netem_ =
        sh(fmt::format("ip netns exec {} tc qdisc add dev lo root netem delay 1ms", names_[0]));
    if (netem_) sh(fmt::format("ip netns exec {} tc qdisc del dev lo root", names_[0]));
  } catch (...) {
    cleanup();
    throw;
  }
}

NetnsHosts::~NetnsHosts() { cleanup(); }

void NetnsHosts::cleanup() noexcept {
  for (const auto& ns : names_) {
    sh(fmt::format("ip netns pids {} | xargs -r kill -9", ns));
    sh("ip netns del " + ns);
  }
  for (const auto& v : veths_) sh("ip link del " + v);
  if (!bridge_.empty()) sh("ip link del " + bridge_);
  names_.clear();
  veths_.clear();
  bridge_.clear();
}

std::string NetnsHosts::host_list(int slots) const {
  std::string out;
  for (const auto& ns : names_) out += (out.empty() ? "" : ",") + fmt::format("{}:{}", ns, slots);
  return out;
}

void NetnsHosts::shape(const LinkShape& s) {
  if (s.latency_ms > 0 && !netem_)
    throw Error(
        fmt::format("--shape {}: this kernel has no netem (CONFIG_NET_SCH_NETEM), so "
                    "latency cannot be added; give the rate alone",
                    s.label));
  // Two milliseconds' worth of burst (at least 32 KiB): smaller buckets
  // cannot sustain the rate with the kernel's timer granularity.
  const long burst = std::max<long>(32 << 10, std::lround(s.bytes_per_s * 0.002));
  for (const auto& ns : names_) {
    sh(fmt::format("ip netns exec {} tc qdisc del dev eth0 root", ns));
    if (s.latency_ms > 0) {
      must(fmt::format("ip netns exec {} tc qdisc add dev eth0 root handle 1: netem delay {}ms", ns,
                       s.latency_ms));
      must(
          fmt::format("ip netns exec {} tc qdisc add dev eth0 parent 1: handle 2: tbf rate {} "
                      "burst {} latency 100ms",
                      ns, s.rate, burst));
    } else {
      must(
          fmt::format("ip netns exec {} tc qdisc add dev eth0 root tbf rate {} burst {} latency "
                      "100ms",
                      ns, s.rate, burst));
    }
  }
}

}  // namespace lockstep::plan_tool
