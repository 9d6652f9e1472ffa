// Packing trials into slots: each host offers slots (on this host, one per
// CPU the sweep may use); a trial of N workers takes N free slots of one
// host, and on this host is bound to those CPUs, so concurrent trials never
// share a core unless --oversubscribe asked for it.
//
// Not thread-safe (the sweep loop owns it).
#pragma once

#include <string>
#include <vector>

namespace lockstep::sweep {

struct HostSlots {
  std::string host;  // "" for this host
  int slots = 0;
  std::vector<int> cpus;  // this host only: CPU ids, one per slot
};

struct Placement {
  int host_index = -1;
  std::string host;        // "" for this host
  std::vector<int> slots;  // indices into the host's slots
  std::vector<int> cpus;   // CPUs to bind the trial to (this host, not oversubscribed)
};

class SlotPool {
 public:
  // `oversubscribe`: hand out slots that are taken (round robin), no binding.
  SlotPool(std::vector<HostSlots> hosts, bool oversubscribe);

  int total() const;
  int largest_host() const;
  // N free slots on one host, or host_index -1 when none has them.
  Placement acquire(int n);
  void release(const Placement& p);

 private:
  std::vector<HostSlots> hosts_;
  std::vector<std::vector<int>> users_;  // per host, per slot: trials on it
  bool oversubscribe_;
};

// This host's slots: the CPUs in the sweep's affinity mask, or `slots` of
// them when given (more than there are CPUs: unbound slots).
HostSlots local_slots(int slots);
// "-H a:2,b:4" (host alone: 1 slot); "localhost" is this host.
std::vector<HostSlots> parse_hosts(const std::string& text);

}  // namespace lockstep::sweep
