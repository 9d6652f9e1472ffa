#include "launcher/elastic.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/rendezvous/store.h"

namespace lockstep::launcher {

namespace el = rendezvous::elastic;

std::vector<std::pair<ElasticMember, el::Assignment>> plan_generation(
    std::vector<ElasticMember> members) {
  // Host order: by the lowest previous rank on it; newcomer-only hosts last.
  std::map<std::string, std::pair<int, size_t>> host_key;  // (lowest rank, first index)
  for (size_t i = 0; i < members.size(); ++i) {
    int rank = members[i].previous_rank.value_or(std::numeric_limits<int>::max());
    auto [it, added] = host_key.try_emplace(members[i].host, rank, i);
    if (!added) it->second.first = std::min(it->second.first, rank);
  }
  std::vector<size_t> order(members.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& ha = host_key.at(members[a].host);
    const auto& hb = host_key.at(members[b].host);
    if (ha != hb) return ha < hb;
    return members[a].previous_rank.value_or(std::numeric_limits<int>::max()) <
           members[b].previous_rank.value_or(std::numeric_limits<int>::max());
  });
  std::map<std::string, int> per_host, host_index;
  for (const auto& m : members) ++per_host[m.host];
  std::vector<std::pair<ElasticMember, el::Assignment>> out;
  std::map<std::string, int> seen_on_host;
  for (size_t i : order) {
    const auto& m = members[i];
    if (!host_index.contains(m.host)) host_index[m.host] = static_cast<int>(host_index.size());
    el::Assignment a;
    a.rank = static_cast<int>(out.size());
    a.size = static_cast<int>(members.size());
    a.local_rank = seen_on_host[m.host]++;
    a.local_size = per_host[m.host];
    a.cross_rank = host_index[m.host];
    a.cross_size = static_cast<int>(per_host.size());
    out.emplace_back(m, a);
  }
  return out;
}

std::vector<HostSlots> parse_discovery_output(std::string_view text) {
  // `localhost:3` beside this machine's name is one host, not two.
  return merge_duplicates(parse_hostfile_text(text, "the host discovery script's output"));
}

std::vector<std::string> hosts_for_new_workers(const std::vector<HostSlots>& discovered,
                                               const std::map<std::string, int>& running_per_host,
                                               const std::vector<std::string>& cooling_down,
                                               int room) {
  std::vector<std::string> out;
  for (const auto& h : discovered) {
    if (std::find(cooling_down.begin(), cooling_down.end(), h.host) != cooling_down.end()) continue;
    auto it = running_per_host.find(h.host);
    int free = h.slots - (it == running_per_host.end() ? 0 : it->second);
    for (; free > 0 && static_cast<int>(out.size()) < room; --free) out.push_back(h.host);
  }
  return out;
}

std::vector<int> workers_to_remove(const std::vector<HostSlots>& discovered,
                                   const std::vector<std::pair<int, std::string>>& running) {
  std::map<std::string, int> room;
  for (const auto& h : discovered) room[h.host] += h.slots;
  std::vector<int> out;
  // The lowest ranks on a host stay: walk in rank order, spend its room.
  for (const auto& [index, host] : running) {
    int& left = room[host];
    if (left > 0) {
      --left;
    } else {
      out.push_back(index);
    }
  }
  return out;
}

int ElasticController::publish(rendezvous::StoreClient& store,
                               const std::vector<ElasticMember>& members) {
  current_ = plan_generation(members);
  ++generation_;  // workers wait for a generation above the one they leave
  for (size_t i = 0; i < current_.size(); ++i) {
    const auto& [member, assignment] = current_[i];
    // Ranks are dense and the world is every member: a worker's wait for
    // all ranks' ready keys (engine::wait_for_world) counts on both.
    LOCKSTEP_DCHECK(assignment.rank == static_cast<int>(i) &&
                        assignment.size == static_cast<int>(current_.size()),
                    "elastic generation {}: member {} got rank {} of {}", generation_, i,
                    assignment.rank, assignment.size);
    store.set(el::member_key(generation_, member.id), assignment.encode());
  }
  store.set(el::kLatestKey, std::to_string(generation_));
  return generation_;
}

std::optional<el::Assignment> ElasticController::assignment_of(const std::string& id) const {
  for (const auto& [member, assignment] : current_)
    if (member.id == id) return assignment;
  return std::nullopt;
}

void ElasticController::fail(rendezvous::StoreClient& store, const std::string& reason) {
  store.set(el::kFailedKey, reason);
}

bool ElasticController::record_failure(const std::string& host) {
  if (++failures_[host] < options_.host_failure_limit) return false;
  failures_[host] = 0;
  cooling_until_[host] = Clock::now() + options_.cooldown;
  return true;
}

std::vector<std::string> ElasticController::cooling_down() const {
  std::vector<std::string> out;
  for (const auto& [host, until] : cooling_until_)
    if (Clock::now() < until) out.push_back(host);
  return out;
}

std::optional<ElasticController::Clock::time_point> ElasticController::next_discovery() const {
  if (options_.discovery_script.empty()) return std::nullopt;
  if (!last_discovery_) return Clock::now();
  return *last_discovery_ + options_.discovery_interval;
}

namespace {

// The script's stdout; nullopt (after saying why on stderr) when it fails.
// `timeout` bounds a hanging script so discovery never stalls supervision
// for long; the launcher's loop handles everything else in between.
std::optional<std::string> run_script(const std::string& script, ElasticController& controller) {
  std::string command = fmt::format("timeout 5 {} 2>&1", script);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return std::nullopt;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0 && out.size() < (1 << 20))
    out.append(buf, n);
  int status = ::pclose(pipe);
  if (status != 0) {
    std::string line = fmt::format(
        "lockstep run: host discovery script '{}' failed (status {}); keeping the current "
        "hosts. Its output: {}\n",
        script, status, out.substr(0, 500));
    if (controller.first_time(line)) {
      [[maybe_unused]] auto w = ::write(STDERR_FILENO, line.data(), line.size());
    }
    return std::nullopt;
  }
  return out;
}

}  // namespace

std::optional<std::vector<HostSlots>> ElasticController::discover() {
  auto due = next_discovery();
  if (!due || Clock::now() < *due) return std::nullopt;
  last_discovery_ = Clock::now();
  auto out = run_script(options_.discovery_script, *this);
  if (!out) return std::nullopt;
  try {
    return parse_discovery_output(*out);
  } catch (const InvalidArgument& e) {
    std::string line = fmt::format("lockstep run: {}; keeping the current hosts\n", e.what());
    if (first_time(line)) {
      [[maybe_unused]] auto w = ::write(STDERR_FILENO, line.data(), line.size());
    }
    return std::nullopt;
  }
}

}  // namespace lockstep::launcher
