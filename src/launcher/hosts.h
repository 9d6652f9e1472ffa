// Where the ranks of a job run: the host list of `lockstep run -H` or
// `--hostfile`, and the placement of ranks onto it. Internal.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lockstep::launcher {

struct HostSlots {
  std::string host;
  int slots = 1;
};

// "host1:2,host2:2" (a host without ":N" has one slot). Throws
// InvalidArgument naming the bad entry.
std::vector<HostSlots> parse_host_list(std::string_view text);
// mpirun/horovodrun hostfile syntax: one host per line, optionally followed
// by "slots=N" (or "slots N" / ":N"); '#' starts a comment. Throws
// InvalidArgument naming the file and line.
std::vector<HostSlots> parse_hostfile_text(std::string_view text, std::string_view file_name);
std::vector<HostSlots> read_hostfile(const std::string& path);

// One rank's place: which host (index into the job's host list, in order of
// first use) and its rank among that host's ranks.
struct Placement {
  std::string host;
  bool local = true;  // this machine: started directly, not through remote-exec
  int cross_rank = 0, cross_size = 1;
  int local_rank = 0, local_size = 1;
};

// Fills hosts in order, each up to its slots, until `num_proc` ranks are
// placed (as mpirun's default by-slot mapping). Hosts left without ranks are
// not part of the job. Throws InvalidArgument when the slots are too few.
std::vector<Placement> place_ranks(const std::vector<HostSlots>& hosts, int num_proc);

// localhost, 127.x.y.z, ::1, this machine's own host name and the addresses
// of its interfaces. Every parser here (-H, --hostfile, discovery output)
// replaces such a name by host_name() (lockstep/base/host.h), so this
// machine is one host whatever it is called.
bool is_local_host(std::string_view host);
// "a:1,b:1,a:1" is a with two slots, as for mpirun; order of first mention.
std::vector<HostSlots> merge_duplicates(const std::vector<HostSlots>& hosts);

}  // namespace lockstep::launcher

namespace lockstep::launcher {

// The address the rendezvous store binds and advertises: `requested` when
// given; 127.0.0.1 when every rank is local; else this machine's source
// address on the route to the first remote host that resolves. Throws
// InvalidArgument asking for --rendezvous-addr when none can be found.
std::string choose_rendezvous_host(const std::string& requested,
                                   const std::vector<Placement>& placements);

}  // namespace lockstep::launcher
