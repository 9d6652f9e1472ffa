// Elastic mode of `lockstep run` (--min-np/--max-np/--host-discovery-script):
// the pure planning (who gets which rank in the next generation of the world,
// which hosts are cooling down, what the discovery script says) and the
// publication of each generation in the job's store. What the supervisor does
// with it is in elastic_supervisor.h; the processes stay in supervisor.cc.
// Internal; protocol in docs/elastic.md.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "launcher/hosts.h"
#include "lockstep/rendezvous/elastic_protocol.h"

namespace lockstep::rendezvous {
class StoreClient;
}

namespace lockstep::launcher {

struct ElasticOptions {
  int min_np = 0;  // 0 together with max_np 0 and no script: not elastic
  int max_np = 0;
  int reset_limit = -1;  // re-formations allowed; -1: no limit
  std::string discovery_script;
  std::chrono::milliseconds discovery_interval{2000};
  // A host whose workers failed this many times is left out for `cooldown`.
  int host_failure_limit = 2;
  std::chrono::seconds cooldown{300};

  bool enabled() const { return min_np > 0 || max_np > 0 || !discovery_script.empty(); }
};

// One worker of a generation: its stable id and where it runs. `previous_rank`
// orders survivors (new workers have none and come after them).
struct ElasticMember {
  std::string id;
  std::string host;
  std::optional<int> previous_rank;
};

// Ranks of the next generation: hosts in order of their lowest previous rank
// (hosts with only new workers last, in the order given), each host's
// workers contiguous, survivors before newcomers. So rank 0 is always the
// lowest-ranked survivor, which holds the state the others receive. Returns
// the members in rank order with their assignments.
std::vector<std::pair<ElasticMember, rendezvous::elastic::Assignment>> plan_generation(
    std::vector<ElasticMember> members);

// The discovery script's output: "host:slots", "host slots=N" or "host" lines.
// Throws InvalidArgument naming the line.
std::vector<HostSlots> parse_discovery_output(std::string_view text);

// Hosts with slots to spare for new workers: discovered slots minus workers
// already there, skipping cooling-down hosts, at most `room` in total.
std::vector<std::string> hosts_for_new_workers(const std::vector<HostSlots>& discovered,
                                               const std::map<std::string, int>& running_per_host,
                                               const std::vector<std::string>& cooling_down,
                                               int room);

// Running workers the discovery output no longer has room for: on each
// host, the highest-ranked ones beyond its listed slots (all of them on a
// host that is not listed). `running` is (worker index, host) in rank order.
std::vector<int> workers_to_remove(const std::vector<HostSlots>& discovered,
                                   const std::vector<std::pair<int, std::string>>& running);

class ElasticController {
 public:
  using Clock = std::chrono::steady_clock;

  // The first discovery waits one interval: the initial workers form first.
  explicit ElasticController(ElasticOptions options)
      : options_(std::move(options)), last_discovery_(Clock::now()) {}
  const ElasticOptions& options() const { return options_; }

  // Writes the generation's member keys, then its number as the latest.
  int publish(rendezvous::StoreClient& store, const std::vector<ElasticMember>& members);
  // Workers waiting for a generation get `reason` as their error.
  void fail(rendezvous::StoreClient& store, const std::string& reason);
  int generation() const { return generation_; }
  // This worker's place in the current generation, if it is a member.
  std::optional<rendezvous::elastic::Assignment> assignment_of(const std::string& id) const;

  // Counts a failure on `host`; returns true when it starts a cool-down.
  bool record_failure(const std::string& host);
  std::vector<std::string> cooling_down() const;
  int reformations() const { return reformations_; }
  void count_reformation() { ++reformations_; }

  // Runs the discovery script when its interval has passed; nullopt when it
  // is not due (or there is none). A failing script is reported and skipped.
  std::optional<std::vector<HostSlots>> discover();
  std::optional<Clock::time_point> next_discovery() const;
  // True the first time `note` is given: discovery runs every few seconds and
  // a warning it keeps causing (a failing script, no room to scale down) is
  // said once, not at every poll.
  bool first_time(const std::string& note) { return said_.insert(note).second; }

 private:
  std::set<std::string> said_;
  ElasticOptions options_;
  int generation_ = -1;
  int reformations_ = 0;
  std::vector<std::pair<ElasticMember, rendezvous::elastic::Assignment>> current_;
  std::map<std::string, int> failures_;
  std::map<std::string, Clock::time_point> cooling_until_;
  std::optional<Clock::time_point> last_discovery_;
};

}  // namespace lockstep::launcher
