// Network-namespace "hosts" on this machine for `lockstep plan validate
// --netns`: H namespaces joined by a bridge in ours (where the launcher
// runs), as tests/launcher/netns_multihost_test.sh builds them, with each
// host's link shaped by tc (tbf for the rate; netem for latency only where
// the kernel has it).
//
// Owns what it creates: the destructor kills processes left in the
// namespaces and removes namespaces, links and the bridge. Not thread-safe.
#pragma once

#include <string>
#include <vector>

namespace lockstep::plan_tool {

struct LinkShape {
  std::string label;  // as given, e.g. "1gbit" or "200mbit:5ms"
  std::string rate;   // tc rate, e.g. "1gbit"
  double bytes_per_s = 0;
  double latency_ms = 0;  // one-way, added by netem
};

// "RATE" or "RATE:LATENCY" (e.g. 1gbit, 200mbit:2ms). Throws InvalidArgument.
LinkShape parse_shape(const std::string& text);

class NetnsHosts {
 public:
  // Throws lockstep::Error naming what is missing (root, ip, namespaces).
  explicit NetnsHosts(int hosts);
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;
  ~NetnsHosts();

  const std::vector<std::string>& names() const { return names_; }
  const std::string& launcher_ip() const { return launcher_ip_; }
  // "-H a:1,b:1" style host list with `slots` ranks each.
  std::string host_list(int slots) const;
  // Replaces each host's egress qdisc. Throws Error when tc refuses, or when
  // a latency is asked for and netem is missing.
  void shape(const LinkShape& s);
  bool netem_available() const { return netem_; }

 private:
  void cleanup() noexcept;
  std::vector<std::string> names_, veths_;
  std::string bridge_, launcher_ip_;
  bool netem_ = false;
};

}  // namespace lockstep::plan_tool
