// `lockstep plan validate --netns`: the points on network-namespace hosts
// of this machine, their links shaped by tc (netns.h, validate.h).
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "tools/plan/validate.h"

namespace lockstep::plan_tool::validate {

void Validator::prepare_netns() {
  size_t start = 0;
  for (;;) {
    size_t comma = o_.shapes.find(',', start);
    shapes_.push_back(
        parse_shape(o_.shapes.substr(start, comma == std::string::npos ? comma : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  try {
    hosts_ = std::make_unique<NetnsHosts>(o_.netns);
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    progress("skipping the network-namespace points: {}", e.what());
    return;
  }
  progress("{} network-namespace hosts; netem {}", o_.netns,
           hosts_->netem_available() ? "available (latency can be shaped)"
                                     : "NOT available in this kernel: links are shaped by rate "
                                       "(tbf) only, latency is the veth's own");
  for (const auto& shape : shapes_)
    if (shape.latency_ms > 0 && !hosts_->netem_available())
      throw InvalidArgument(fmt::format(
          "--shape {}: this kernel has no netem (CONFIG_NET_SCH_NETEM), so latency cannot be "
          "added; give the rate alone (e.g. --shape {})",
          shape.label, shape.rate));
}

std::vector<std::string> Validator::link_launch(int slots) const {
  return {"--remote-exec",
          "ip netns exec {host}",
          "--rendezvous-addr",
          hosts_->launcher_ip(),
          "-H",
          hosts_->host_list(slots)};
}

// Fits Gloo over one shaped link, one rank per host: the flat ring among
// hosts that is also the hierarchical allreduce's cross-host stage.
void Validator::fit_link(const LinkShape& shape) {
  hosts_->shape(shape);
  std::vector<std::string> fit_args;
  for (const auto& a : link_launch(1)) fit_args.push_back("--launcher-arg=" + a);
  progress("fitting Gloo over {} hosts shaped to {}", o_.netns, shape.label);
  // One rank per host (--per-host 1) has no intra-host stage to cost.
  const plan::NetworkModel base = o_.per_host > 1 ? shm_costs() : given_;
  net_of_[shape.label] = plan::merge(base, fit("gloo", fit_args, "gloo-" + shape.label));
  wake_wait_ms_[shape.label] = wake_wait_ms(fit_args, shape.label);
}

void Validator::netns_point(int index, const std::string& r) {
  const LinkShape& shape = shape_of(points_[index]);
  hosts_->shape(shape);
  plan::Scenario s = scenario(o_.netns, o_.per_host, "gloo");
  s.wake_wait_ms = wake_wait_ms_[shape.label];
  s.colocated_slowdown = slowdown_;
  s.nodes_share_machine = true;
  std::vector<std::string> launch = link_launch(o_.per_host);
  const std::string overlap = plan::netns_overlap(s.overlap, hosts_share_cores());
  if (overlap != s.overlap) {
    // auto turns overlap on across hosts, but these hosts' training
    // threads hold every core of this one machine, so their engine
    // threads would get one only when the scheduler preempts compute:
    // that measures the scheduler (36-48 ms for the same run, docs/plan.md
    // run 5), where a cluster host has cores of its own. Off measures the
    // network; LOCKSTEP_OVERLAP=on still runs (and marks) the other case.
    launch.insert(launch.end(), {"-x", "LOCKSTEP_OVERLAP=" + overlap});
    s.overlap = overlap;
    if (!said_overlap_off_)
      progress(
          "the namespace hosts fill this machine's {} cores: their runs use "
          "LOCKSTEP_OVERLAP={} (set LOCKSTEP_OVERLAP=on to measure overlap anyway)",
          cores(), overlap);
    said_overlap_off_ = true;
  }
  if (auto measured = measure(launch, tag_of(points_[index]) + r)) {
    record(index, *measured, net_of_[shape.label], s);
    if (measured->overlap && hosts_share_cores()) results_[index].comm_without_core = true;
  }
}

}  // namespace lockstep::plan_tool::validate
