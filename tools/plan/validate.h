// `lockstep plan validate`, inside: the Validator that runs the schedule
// (lockstep/plan/validation.h) of profiles, fits, calibrations and
// measurements, split by phase across validate*.cc:
//   validate.cc          the command line and the schedule (what runs when)
//   validate_measure.cc  runs under `lockstep run` and fits by `lockstep bench fit`
//   validate_netns.cc    the network-namespace hosts' points
//   validate_report.cc   the table and JSON lines
// Internal to lockstep-plan; single-threaded.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "lockstep/plan/network.h"
#include "lockstep/plan/profile.h"
#include "lockstep/plan/simulator.h"
#include "lockstep/plan/validation.h"
#include "tools/plan/netns.h"

namespace lockstep::plan_tool::validate {

struct Options {
  std::string np = "1,2";
  int netns = 0;
  int per_host = 1;  // ranks per netns host (> 1: the hierarchical allreduce)
  std::string shapes = "1gbit,200mbit";
  std::vector<std::string> networks;  // fitted beforehand; else fitted here
  int steps = 20;
  int warmup = 5;
  int threads = 1;
  std::string workdir;
  bool json = false;
  bool quick = false;      // short fits (CI): fewer sizes, less time per size
  bool contention = true;  // calibrate the co-location slowdown at np > 1
  int rounds = 3;
  std::string wake_wait = "tick";  // tick | sweep | milliseconds (netns hosts sharing cores)
  double timeout_s = 300;
  std::vector<std::string> program;
};

// What one point measured and predicted, one entry per round.
struct PointResult {
  bool oversubscribed = false;
  // Namespace hosts whose training threads fill the cores, run with
  // overlap on: their engine threads have no core during backward, and the
  // step swings between calls with the scheduler (docs/plan.md, run 5).
  bool comm_without_core = false;
  std::string backend;
  bool overlap = false;
  std::vector<double> measured_ms, predicted_ms, measured_sync_ms, predicted_comm_ms;
  std::vector<double> slowdown;  // the co-location factor each round's prediction used
  double wake_wait_ms = 0;
};

inline int cores() { return std::max(1u, std::thread::hardware_concurrency()); }

// --wake-wait MS; throws InvalidArgument naming the flag.
double parse_wake_wait_ms(const std::string& text);

template <typename... Args>
void progress(fmt::format_string<Args...> f, Args&&... args) {
  fmt::print(stderr, "lockstep plan validate: {}\n", fmt::format(f, std::forward<Args>(args)...));
}

// Runs the schedule (validation.h): every point's measurement right after a
// profile at np 1 (and a co-location calibration) of its own, round after
// round, so that each round's prediction comes from a profile taken seconds
// before its measurement, in the same state of this VM. Each point reports
// its per-round errors and their median.
class Validator {
 public:
  explicit Validator(const Options& o);
  int run();  // 0, or 1 when a profile could not be taken (said on stderr)

 private:
  // validate.cc: the points and the predictions.
  void make_points();
  plan::Scenario scenario(int hosts, int per_host, const std::string& cross) const;
  const LinkShape& shape_of(const plan::ValidationPoint& p) const;
  std::string tag_of(const plan::ValidationPoint& p) const;
  void record(int index, const plan::Profile& measured, const plan::NetworkModel& net,
              const plan::Scenario& s);

  // validate_measure.cc: runs and fits.
  std::optional<plan::Profile> measure(const std::vector<std::string>& launch,
                                       const std::string& tag);
  plan::NetworkModel fit(const std::string& backend, const std::vector<std::string>& args,
                         const std::string& tag);
  plan::NetworkModel network_for_shm(const std::string& r, int np);
  const plan::NetworkModel& shm_costs();
  void shm_point(int index, const std::string& r);
  double colocated_slowdown(const plan::Profile& profile, int np, const std::string& tag);
  double wake_wait_ms(std::vector<std::string> fit_args, const std::string& label);
  double tick_ms();

  // validate_netns.cc: the namespace hosts.
  void prepare_netns();
  // The namespace hosts share this machine's cores: their training threads
  // fill them, unlike a cluster host's.
  bool hosts_share_cores() const { return o_.netns * o_.per_host * o_.threads >= cores(); }
  std::vector<std::string> link_launch(int slots) const;
  void fit_link(const LinkShape& shape);
  void netns_point(int index, const std::string& r);

  // validate_report.cc.
  void report() const;
  void report_json(size_t i, const plan::RoundErrors& e) const;
  void report_row(size_t i, const plan::RoundErrors& e) const;
  void report_rounds() const;

  const Options& o_;
  std::string dir_;
  int64_t threshold_ = 0;
  std::vector<int> nps_;
  plan::NetworkModel given_;                       // --network, resolved (empty without)
  std::optional<plan::NetworkModel> shm_network_;  // the latest shared-memory costs
  std::vector<LinkShape> shapes_;
  std::unique_ptr<NetnsHosts> hosts_;  // removed (namespaces and all) with the validator
  std::map<std::string, plan::NetworkModel> net_of_;  // per link shape
  std::map<std::string, double> wake_wait_ms_;        // per link shape
  std::vector<plan::ValidationPoint> points_;
  std::vector<PointResult> results_;      // per point
  std::optional<plan::Profile> profile_;  // the np 1 profile of the point measured next
  bool said_overlap_off_ = false;
  double slowdown_ = 1.0;  // its co-location calibration
};

}  // namespace lockstep::plan_tool::validate
