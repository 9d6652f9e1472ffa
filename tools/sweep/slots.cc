#include "tools/sweep/slots.h"

#include <sched.h>

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::sweep {

SlotPool::SlotPool(std::vector<HostSlots> hosts, bool oversubscribe)
    : hosts_(std::move(hosts)), oversubscribe_(oversubscribe) {
  for (const auto& h : hosts_) users_.emplace_back(static_cast<size_t>(h.slots), 0);
}

int SlotPool::total() const {
  int n = 0;
  for (const auto& h : hosts_) n += h.slots;
  return n;
}

int SlotPool::largest_host() const {
  int n = 0;
  for (const auto& h : hosts_) n = std::max(n, h.slots);
  return n;
}

Placement SlotPool::acquire(int n) {
  for (size_t h = 0; h < hosts_.size(); ++h) {
    auto& users = users_[h];
    std::vector<int> order(users.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    // Least-used slots first: free ones, then (oversubscribed) the least shared.
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return users[a] < users[b]; });
    std::vector<int> chosen;
    for (int s : order)
      if (static_cast<int>(chosen.size()) < n && (users[s] == 0 || oversubscribe_))
        chosen.push_back(s);
    if (static_cast<int>(chosen.size()) < n) {
      if (!oversubscribe_ || users.empty()) continue;
      while (static_cast<int>(chosen.size()) < n)
        chosen.push_back(order[chosen.size() % order.size()]);
    }
    Placement p{static_cast<int>(h), hosts_[h].host, chosen, {}};
    bool shared = false;
    for (int s : chosen) shared |= users[s]++ > 0;
    if (!shared && hosts_[h].host.empty() && !hosts_[h].cpus.empty())
      for (int s : chosen) p.cpus.push_back(hosts_[h].cpus[static_cast<size_t>(s)]);
    return p;
  }
  return {};
}

void SlotPool::release(const Placement& p) {
  if (p.host_index < 0) return;
  for (int s : p.slots) --users_[static_cast<size_t>(p.host_index)][static_cast<size_t>(s)];
}

HostSlots local_slots(int slots) {
  HostSlots h;
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  if (cpus.empty()) cpus.push_back(0);
  h.slots = slots > 0 ? slots : static_cast<int>(cpus.size());
  if (h.slots <= static_cast<int>(cpus.size())) h.cpus.assign(cpus.begin(), cpus.begin() + h.slots);
  return h;
}

std::vector<HostSlots> parse_hosts(const std::string& text) {
  std::vector<HostSlots> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    HostSlots h;
    const auto colon = item.rfind(':');
    h.host = item.substr(0, colon);
    h.slots = 1;
    if (colon != std::string::npos) {
      try {
        size_t used = 0;
        h.slots = std::stoi(item.substr(colon + 1), &used);
        if (used != item.size() - colon - 1) throw std::invalid_argument("trailing");
      } catch (const std::exception&) {
        h.slots = 0;
      }
      if (h.slots < 1)
        throw InvalidArgument(
            fmt::format("-H '{}': slots of '{}' must be a positive integer", text, item));
    }
    if (h.host == "localhost") {
      HostSlots local = local_slots(h.slots);
      out.push_back(local);
      continue;
    }
    out.push_back(h);
  }
  if (out.empty()) throw InvalidArgument(fmt::format("-H '{}': no hosts", text));
  return out;
}

}  // namespace lockstep::sweep
