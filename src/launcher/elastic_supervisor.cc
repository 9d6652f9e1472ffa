#include "launcher/elastic_supervisor.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/say.h"
#include "lockstep/base/terminate.h"

namespace lockstep::launcher {
namespace {

// Failures this close together re-form the job once.
constexpr auto kReformDebounce = std::chrono::milliseconds(300);

bool member(const Worker& w) { return w.running && !w.removing; }

}  // namespace

std::string elastic_id(int index) { return fmt::format("w{}", index); }

bool is_program_bug(const std::string& note, int exit_code) {
  return exit_code == kUncaughtErrorExitCode && note.starts_with("MismatchError:");
}

ElasticSupervisor::ElasticSupervisor(const ElasticOptions& options, rendezvous::StoreClient& store,
                                     Deadlines& deadlines, bool multi_host)
    : options_(options),
      store_(store),
      deadlines_(deadlines),
      multi_host_(multi_host),
      controller_(options) {}

void ElasticSupervisor::start(const std::vector<Placement>& placements) {
  std::vector<ElasticMember> members;
  for (int i = 0; i < static_cast<int>(placements.size()); ++i)
    members.push_back({elastic_id(i), placements[i].host, i});
  controller_.publish(store_, members);
}

std::optional<int> ElasticSupervisor::rank_of(int index) const {
  if (auto a = controller_.assignment_of(elastic_id(index))) return a->rank;
  return std::nullopt;
}

ElasticSupervisor::Environment ElasticSupervisor::environment_of(int index,
                                                                 const Environment& env) const {
  std::map<std::string, std::string> map(env.begin(), env.end());
  const std::string id = elastic_id(index);
  if (auto a = controller_.assignment_of(id)) {
    map["LOCKSTEP_RANK"] = std::to_string(a->rank);
    map["LOCKSTEP_SIZE"] = std::to_string(a->size);
    map["LOCKSTEP_LOCAL_RANK"] = std::to_string(a->local_rank);
    map["LOCKSTEP_LOCAL_SIZE"] = std::to_string(a->local_size);
    map["LOCKSTEP_CROSS_RANK"] = std::to_string(a->cross_rank);
    map["LOCKSTEP_CROSS_SIZE"] = std::to_string(a->cross_size);
  }
  map["LOCKSTEP_ELASTIC"] = "1";
  map["LOCKSTEP_WORKER_ID"] = id;
  map["LOCKSTEP_ELASTIC_GENERATION"] = std::to_string(controller_.generation());
  return {map.begin(), map.end()};
}

// A lost worker. Re-forming waits kReformDebounce so that workers dying
// together (a whole host) cost one re-formation, and no generation names a
// worker that is already dead but not yet reaped.
void ElasticSupervisor::on_failure(const Worker& w, const std::string& how) {
  say("{} (pid {}) {}", rank_label(w, multi_host_), w.pid, how);
  if (controller_.record_failure(w.where.host))
    say("host {} failed {} times; leaving it out for {} s", w.where.host,
        options_.host_failure_limit, options_.cooldown.count());
  last_failure_code_ = exit_code_of(w.wait_status);
  deadlines_.arm_once(Deadline::kReform, Deadlines::Clock::now() + kReformDebounce);
}

int ElasticSupervisor::on_program_bug(const Worker& w, const std::string& how) {
  say("{} (pid {}) {}", rank_label(w, multi_host_), w.pid, how);
  last_failure_code_ = exit_code_of(w.wait_status);
  deadlines_.disarm(Deadline::kReform);
  return stop(
      "a MismatchError is a bug in the program (its ranks disagree about a collective), "
      "not a lost host: every generation would repeat it, so the job stops without "
      "re-forming; fix the program");
}

void ElasticSupervisor::on_success(const Worker& w) {
  if (finishing_) return;
  finishing_ = true;
  deadlines_.disarm(Deadline::kReform);
  // Said only where discovery could have offered new slots: otherwise the
  // rule changes nothing the user can see.
  if (!options_.discovery_script.empty())
    say("{} (pid {}) finished; the job is ending: no worker is started or re-formed from now on",
        rank_label(w, multi_host_), w.pid);
}

ElasticSupervisor::Decision ElasticSupervisor::poll(std::vector<Worker>& workers,
                                                    Deadlines::TimePoint now) {
  if (finishing_) return {};
  if (deadlines_.take_due(Deadline::kReform, now))
    if (auto code = reform(workers)) return {code, {}};
  if (deadlines_.armed(Deadline::kReform)) return {};
  return {std::nullopt, scale_up(workers)};
}

std::optional<Deadlines::TimePoint> ElasticSupervisor::next_wakeup() const {
  if (finishing_) return std::nullopt;
  return earlier(controller_.next_discovery(), deadlines_.at(Deadline::kReform));
}

// Re-form with the survivors, unless that breaks a limit; returns the exit
// code when the job must stop instead.
std::optional<int> ElasticSupervisor::reform(std::vector<Worker>& workers) {
  int survivors = 0;
  for (const auto& w : workers) survivors += member(w);
  const int limit = options_.reset_limit;
  if (limit >= 0 && controller_.reformations() >= limit)
    return stop(
        fmt::format("the job already re-formed {} time(s), the --reset-limit; stopping", limit));
  if (survivors < options_.min_np)
    return stop(fmt::format("{} worker(s) left, fewer than --min-np {}; stopping", survivors,
                            options_.min_np));
  controller_.count_reformation();
  say("re-forming the job with the {} remaining worker(s)", survivors);
  publish_generation(workers, {});
  return std::nullopt;
}

int ElasticSupervisor::stop(const std::string& reason) {
  say("{}", reason);
  try {
    controller_.fail(store_, reason);
  } catch (const std::exception& e) {
    say("could not tell the workers why: {}", e.what());
  }
  return last_failure_code_ == 0 ? 1 : last_failure_code_;
}

// Discovery no longer offers room for some workers (a host left the list):
// publish a generation without them; they leave at the next commit, and
// their exit is not counted as a failure. Additions wait for the next round.
bool ElasticSupervisor::scale_down(std::vector<Worker>& workers,
                                   const std::vector<HostSlots>& discovered) {
  std::vector<Worker*> running;
  for (auto& w : workers)
    if (member(w)) running.push_back(&w);
  std::sort(running.begin(), running.end(),
            [](const Worker* a, const Worker* b) { return a->rank < b->rank; });
  std::vector<std::pair<int, std::string>> by_rank;
  for (const Worker* w : running) by_rank.emplace_back(w->index, w->where.host);
  auto leaving = workers_to_remove(discovered, by_rank);
  if (leaving.empty()) return false;
  const int staying = static_cast<int>(running.size() - leaving.size());
  if (staying < options_.min_np) {
    std::string note = fmt::format(
        "the discovery script offers room for only {} of the {} "
        "running worker(s); keeping them all (--min-np {})",
        staying, running.size(), options_.min_np);
    if (controller_.first_time(note)) say("{}", note);
    return false;
  }
  std::vector<std::string> who;
  for (auto& w : workers)
    if (std::find(leaving.begin(), leaving.end(), w.index) != leaving.end()) {
      w.removing = true;
      who.push_back(fmt::format("{} on {}", elastic_id(w.index), w.where.host));
    }
  say("the discovery script no longer offers room for {}; removing them at the next commit",
      fmt::join(who, ", "));
  controller_.count_reformation();
  publish_generation(workers, {});
  return true;
}

// The running workers (survivors keep their order) plus `newcomers`, which
// the Supervisor starts afterwards; every worker's rank follows the new
// generation.
void ElasticSupervisor::publish_generation(std::vector<Worker>& workers,
                                           const std::vector<ElasticMember>& newcomers) {
  std::vector<ElasticMember> members;
  for (const auto& w : workers)
    if (member(w)) members.push_back({elastic_id(w.index), w.where.host, w.rank});
  members.insert(members.end(), newcomers.begin(), newcomers.end());
  const int g = controller_.publish(store_, members);
  std::vector<std::string> ranks;
  for (auto& w : workers)
    if (auto a = controller_.assignment_of(elastic_id(w.index))) {
      w.rank = a->rank;
      ranks.push_back(fmt::format("{}->{}", elastic_id(w.index), a->rank));
    }
  for (const auto& m : newcomers)
    ranks.push_back(fmt::format("{}->{} (new)", m.id, controller_.assignment_of(m.id)->rank));
  say("generation {}: {} worker(s) ({})", g, members.size(), fmt::join(ranks, " "));
}

// Discovery found free slots: the new workers' places, for the Supervisor to
// start; they join the running ones at their next commit (docs/elastic.md).
std::vector<Placement> ElasticSupervisor::scale_up(std::vector<Worker>& workers) {
  auto discovered = controller_.discover();
  if (!discovered || scale_down(workers, *discovered)) return {};
  std::map<std::string, int> running_per_host;
  int running = 0;
  for (const auto& w : workers)
    if (member(w)) {
      ++running_per_host[w.where.host];
      ++running;
    }
  auto hosts = hosts_for_new_workers(*discovered, running_per_host, controller_.cooling_down(),
                                     options_.max_np - running);
  if (hosts.empty()) return {};
  say("discovered {} free slot(s) ({}); starting new worker(s) that join at the next commit",
      hosts.size(), fmt::join(hosts, ","));
  // The generation names the new workers before they start.
  std::vector<ElasticMember> newcomers;
  for (const auto& host : hosts)
    newcomers.push_back(
        {elastic_id(static_cast<int>(workers.size() + newcomers.size())), host, {}});
  controller_.count_reformation();
  publish_generation(workers, newcomers);
  std::vector<Placement> places;
  for (const auto& m : newcomers) {
    Placement where;  // local/cross ranks come from the generation (environment_of)
    where.host = m.host;
    where.local = is_local_host(m.host);
    places.push_back(std::move(where));
  }
  return places;
}

}  // namespace lockstep::launcher
