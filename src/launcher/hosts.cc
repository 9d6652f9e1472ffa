#include "launcher/hosts.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/host.h"
#include "lockstep/base/socket.h"

namespace lockstep::launcher {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

bool parse_slots(std::string_view text, int& slots) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), slots);
  return ec == std::errc() && end == text.data() + text.size() && slots >= 1;
}

// Host names and addresses only: the name reaches a remote-exec command line.
bool valid_host_name(std::string_view host) {
  if (host.empty() || host.front() == '-') return false;
  for (char c : host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
          c == ':' || c == '@'))
      return false;
  return true;
}

// One name for this machine however it is written (localhost, 127.x, its
// addresses), so its ranks share one host everywhere: local ranks, the
// shared-memory group (LOCKSTEP_HOST), discovery's free slots.
HostSlots host_entry(std::string_view host, std::string_view slots_text, const std::string& where) {
  HostSlots h{is_local_host(host) ? host_name() : std::string(host), 1};
  if (!valid_host_name(host))
    throw InvalidArgument(
        fmt::format("{}: '{}' is not a host name (letters, digits, '.', '-', "
                    "'_', '@' only)",
                    where, host));
  if (!slots_text.empty() && !parse_slots(slots_text, h.slots))
    throw InvalidArgument(fmt::format("{}: slots of host '{}' must be a positive integer, got '{}'",
                                      where, host, slots_text));
  return h;
}

}  // namespace

std::vector<HostSlots> parse_host_list(std::string_view text) {
  std::vector<HostSlots> hosts;
  while (!text.empty()) {
    auto comma = text.find(',');
    std::string_view entry = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    std::string where = fmt::format("-H entry '{}'", entry);
    if (entry.empty()) throw InvalidArgument("-H: empty host entry; write host1:2,host2:2");
    auto colon = entry.rfind(':');
    if (colon == std::string_view::npos)
      hosts.push_back(host_entry(entry, "", where));
    else
      hosts.push_back(host_entry(entry.substr(0, colon), entry.substr(colon + 1), where));
  }
  if (hosts.empty()) throw InvalidArgument("-H: no hosts given; write host1:2,host2:2");
  return hosts;
}

std::vector<HostSlots> parse_hostfile_text(std::string_view text, std::string_view file_name) {
  std::vector<HostSlots> hosts;
  int line_no = 0;
  std::istringstream in{std::string(text)};
  for (std::string raw; std::getline(in, raw);) {
    ++line_no;
    std::string_view line = raw;
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::string where = fmt::format("{}:{}", file_name, line_no);
    auto space = line.find_first_of(" \t");
    std::string_view host = line.substr(0, space);
    std::string_view rest = space == std::string_view::npos ? "" : trim(line.substr(space));
    std::string_view slots;
    if (auto colon = host.rfind(':'); colon != std::string_view::npos && rest.empty()) {
      slots = host.substr(colon + 1);
      host = host.substr(0, colon);
    } else if (rest.starts_with("slots")) {
      slots = trim(rest.substr(5));
      if (slots.starts_with('=')) slots = trim(slots.substr(1));
    } else if (!rest.empty()) {
      throw InvalidArgument(fmt::format("{}: expected 'HOST slots=N', got '{}'", where, line));
    }
    hosts.push_back(host_entry(host, slots, where));
  }
  if (hosts.empty())
    throw InvalidArgument(
        fmt::format("hostfile {} lists no hosts ('HOST slots=N' lines)", file_name));
  return hosts;
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("--hostfile {}: cannot open the file", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_hostfile_text(text.str(), path);
}

// "-H a:1,b:1,a:1" means a has two slots, as for mpirun.
std::vector<HostSlots> merge_duplicates(const std::vector<HostSlots>& hosts) {
  std::vector<HostSlots> merged;
  for (const auto& h : hosts) {
    auto it = std::find_if(merged.begin(), merged.end(),
                           [&](const HostSlots& m) { return m.host == h.host; });
    if (it == merged.end())
      merged.push_back(h);
    else
      it->slots += h.slots;
  }
  return merged;
}

std::vector<Placement> place_ranks(const std::vector<HostSlots>& listed, int num_proc) {
  std::vector<HostSlots> hosts = merge_duplicates(listed);
  int total = 0;
  for (const auto& h : hosts) total += h.slots;
  if (num_proc > total)
    throw InvalidArgument(fmt::format(
        "-np {} is more than the {} slot(s) the hosts offer; add hosts or slots, or lower -np",
        num_proc, total));
  std::vector<Placement> out;
  std::vector<std::pair<size_t, int>> used;  // host index, ranks placed there
  for (size_t h = 0; h < hosts.size() && static_cast<int>(out.size()) < num_proc; ++h) {
    int here = std::min(hosts[h].slots, num_proc - static_cast<int>(out.size()));
    for (int i = 0; i < here; ++i) {
      Placement p;
      p.host = hosts[h].host;
      p.local = is_local_host(p.host);
      p.cross_rank = static_cast<int>(used.size());
      p.local_rank = i;
      p.local_size = here;
      out.push_back(p);
    }
    used.emplace_back(h, here);
  }
  for (auto& p : out) p.cross_size = static_cast<int>(used.size());
  return out;
}

std::string choose_rendezvous_host(const std::string& requested,
                                   const std::vector<Placement>& placements) {
  if (!requested.empty()) return requested;
  bool all_local =
      std::all_of(placements.begin(), placements.end(), [](const Placement& p) { return p.local; });
  if (all_local) return "127.0.0.1";
  for (const auto& p : placements) {
    if (p.local) continue;
    std::string address = net::source_address_towards(p.host);
    if (!address.empty()) return address;
  }
  throw InvalidArgument(
      "cannot tell which address of this machine the remote hosts can reach (their names do not "
      "resolve here); pass --rendezvous-addr with this machine's IP on their network");
}

namespace {

// `host` is an IP address of one of this machine's interfaces.
bool is_own_address(std::string_view host) {
  const std::string text(host);
  in_addr v4{};
  in6_addr v6{};
  const bool is_v4 = ::inet_pton(AF_INET, text.c_str(), &v4) == 1;
  if (!is_v4 && ::inet_pton(AF_INET6, text.c_str(), &v6) != 1) return false;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;
  bool found = false;
  for (const ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    if (is_v4 && i->ifa_addr->sa_family == AF_INET)
      found = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == v4.s_addr;
    if (!is_v4 && i->ifa_addr->sa_family == AF_INET6)
      found = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, &v6,
                          sizeof v6) == 0;
  }
  ::freeifaddrs(list);
  return found;
}

}  // namespace

bool is_local_host(std::string_view host) {
  if (host == "localhost" || host == "::1" || host.starts_with("127.")) return true;
  return host == host_name() || is_own_address(host);
}

}  // namespace lockstep::launcher
