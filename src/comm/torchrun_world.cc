#include "comm/torchrun_world.h"

#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/rendezvous_file.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"

namespace lockstep::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::string env_text(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::optional<int> env_number(const char* name) {
  const std::string v = env_text(name);
  if (v.empty()) return std::nullopt;
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (*end != '\0')
    throw InvalidArgument(
        fmt::format("torchrun's environment: {}='{}' is not an integer", name, v));
  return static_cast<int>(x);
}

WorldInfo identity() {
  WorldInfo w;
  w.rank = *env_number("RANK");
  w.size = *env_number("WORLD_SIZE");
  // Without LOCAL_WORLD_SIZE (Kubeflow's one process a pod) every worker is
  // a host of its own: shared memory is then never assumed.
  w.local_size = env_number("LOCAL_WORLD_SIZE").value_or(1);
  w.local_rank = w.local_size > 1 ? env_number("LOCAL_RANK").value_or(0) : 0;
  const int per_host = std::max(1, w.local_size);
  w.cross_size = env_number("GROUP_WORLD_SIZE").value_or(std::max(1, w.size / per_host));
  w.cross_rank =
      env_number("GROUP_RANK").value_or(env_number("NODE_RANK").value_or(w.rank / per_host));
  return w;
}

#ifdef LOCKSTEP_HAVE_RENDEZVOUS

struct Place {
  std::string master;  // MASTER_ADDR as given
  std::string ip;      // resolved, IPv4
  uint16_t port = 0;   // the store's port
  std::string address() const { return fmt::format("{}:{}", ip, port); }
};

std::string resolve_ipv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0 || !found)
    throw InvalidArgument(
        fmt::format("torchrun's environment: MASTER_ADDR='{}' does not resolve "
                    "to an IPv4 address ({})",
                    host, ::gai_strerror(rc)));
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text,
              sizeof text);
  ::freeaddrinfo(found);
  return text;
}

Place place() {
  Place p;
  p.master = env_text("MASTER_ADDR");
  const auto port = env_number("MASTER_PORT");
  if (p.master.empty() || !port)
    throw InvalidArgument(fmt::format(
        "torchrun's environment says WORLD_SIZE={} but MASTER_ADDR or MASTER_PORT is not set, so "
        "this worker cannot find the others; set both (rank 0's host and a free port) on every "
        "worker, or start the job with `lockstep run`",
        env_text("WORLD_SIZE")));
  // torchrun's static rendezvous keeps its own store on MASTER_PORT.
  const int shift = env_text("TORCHELASTIC_USE_AGENT_STORE") == "True" ? 1 : 0;
  if (*port + shift < 1 || *port + shift > 65535)
    throw InvalidArgument(
        fmt::format("torchrun's environment: MASTER_PORT={} is not a port", *port));
  p.port = static_cast<uint16_t>(*port + shift);
  p.ip = resolve_ipv4(p.master);
  return p;
}

std::string secret_file(const Place& p) {
  std::string dir = knob_string("LOCKSTEP_RENDEZVOUS_DIR");
  if (dir.empty()) dir = ".";
  std::string name = fmt::format("{}-{}", p.master, p.port);
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  return fmt::format("{}/.lockstep-rendezvous-torchrun-{}", dir, name);
}

constexpr std::string_view kWho = "torchrun rendezvous";

// Rank 0: the store, on loopback when MASTER_ADDR is, else on every
// interface (MASTER_ADDR may name a Kubernetes service, not this host).
void serve_store(WorldInfo& w, const Place& p) {
  rendezvous::StoreServer::Options options;
  options.host = p.ip.rfind("127.", 0) == 0 ? p.ip : "0.0.0.0";
  options.port = p.port;
  const bool given = knob_is_set("LOCKSTEP_SECRET");
  w.secret = given ? knob_string("LOCKSTEP_SECRET") : rendezvous::random_secret_hex();
  options.secret = rendezvous::decode_secret_hex(w.secret);
  options.log_prefix = "lockstep (torchrun rendezvous): ";
  auto server = std::make_unique<rendezvous::StoreServer>(std::move(options));
  server->start();
  w.rendezvous = p.address();
  std::string file;
  if (!given) {
    file = secret_file(p);
    write_rendezvous_file(file, {w.rendezvous, w.secret}, kWho);
  }
  keep_serving(std::move(server), std::move(file));
}

rendezvous::StoreClient connect_to(const std::string& address, const std::string& secret_hex,
                                   Clock::time_point deadline) {
  rendezvous::StoreClient::Options options;
  options.connect_timeout =
      std::max(std::chrono::milliseconds(1),
               std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  return rendezvous::StoreClient(address, rendezvous::decode_secret_hex(secret_hex), options);
}

// The others: with LOCKSTEP_SECRET straight to the store; else through rank
// 0's file. A file left by an earlier job (killed before it removed it)
// holds another secret: the store refuses it at once, and the file is read
// again until rank 0 has replaced it.
rendezvous::StoreClient join_store(WorldInfo& w, const Place& p, Clock::time_point deadline) {
  w.rendezvous = p.address();
  if (knob_is_set("LOCKSTEP_SECRET")) {
    w.secret = knob_string("LOCKSTEP_SECRET");
    return connect_to(w.rendezvous, w.secret, deadline);
  }
  const std::string file = secret_file(p);
  std::string tried, last_error = "the file does not exist";
  while (Clock::now() < deadline) {
    auto note = read_rendezvous_file(file, kWho);
    if (note && note->secret != tried) {
      try {
        auto client = connect_to(note->address, note->secret, deadline);
        w.secret = note->secret;
        return client;
      } catch (const Error& e) {
        tried = note->secret;
        last_error = e.what();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw TimeoutError(fmt::format(
      "{}: rank {} found no usable secret from rank 0 in {} within LOCKSTEP_TIMEOUT ({}); rank 0 "
      "writes it there when no LOCKSTEP_SECRET is given: on several hosts give every worker the "
      "same LOCKSTEP_SECRET (64 hex digits) or a shared LOCKSTEP_RENDEZVOUS_DIR",
      kWho, w.rank, file, last_error));
}

// Which of ranks [0, size) have not checked in (the first 16 named).
std::string missing_ranks(rendezvous::StoreClient& store, int size) {
  std::vector<std::string> missing;
  int count = 0;
  for (int r = 0; r < size; ++r) {
    std::vector<std::string> key = {fmt::format("torchrun/arrived/{}", r)};
    if (store.check(key)) continue;
    if (++count <= 16) missing.push_back(std::to_string(r));
  }
  std::string out = fmt::format("{}", fmt::join(missing, ", "));
  return count > 16 ? fmt::format("{} and {} more", out, count - 16) : out;
}

// Rank 0 gives up: the others read why before its store goes with it (a
// second at most, so a rank that hangs cannot hold rank 0).
void tell_the_others(rendezvous::StoreClient& store, const std::string& why) {
  store.set("torchrun/abort", why);
  const int64_t others = store.add("torchrun/arrivals", 0) - 1;
  const auto until = Clock::now() + std::chrono::seconds(1);
  while (store.add("torchrun/abort_read", 0) < others && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

// Waits until WORLD_SIZE ranks have checked in. Rank 0 tells the others
// when it gives up, so all fail with the same account.
void wait_for_all(rendezvous::StoreClient& store, const WorldInfo& w, Clock::time_point deadline,
                  double timeout_s) {
  const std::vector<std::string> abort_key = {"torchrun/abort"};
  while (store.add("torchrun/arrivals", 0) < w.size) {
    if (store.check(abort_key)) {
      std::string why = store.get(abort_key[0], {});
      store.add("torchrun/abort_read", 1);
      throw TimeoutError(why);
    }
    if (Clock::now() >= deadline) {
      const std::string why = fmt::format(
          "{} at {}: {} of WORLD_SIZE={} ranks arrived within {} s (LOCKSTEP_TIMEOUT); missing "
          "rank(s): {}. Start one worker for each RANK in 0..{} with the same MASTER_ADDR and "
          "MASTER_PORT, or correct WORLD_SIZE",
          kWho, w.rendezvous, store.add("torchrun/arrivals", 0), w.size, timeout_s,
          missing_ranks(store, w.size), w.size - 1);
      if (w.rank == 0) tell_the_others(store, why);
      throw TimeoutError(why);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Checks in, refusing a second worker with this RANK and a WORLD_SIZE that
// differs from rank 0's; takes the job id rank 0 chose.
void check_in(rendezvous::StoreClient& store, WorldInfo& w, Clock::time_point deadline,
              double timeout_s) {
  if (w.rank == 0)
    store.set("torchrun/job",
              fmt::format("{} torchrun{}", w.size, rendezvous::random_secret_hex().substr(0, 16)));
  if (store.add(fmt::format("torchrun/claim/{}", w.rank), 1) > 1)
    throw InvalidArgument(
        fmt::format("{} at {}: two workers have RANK={}; give each worker its "
                    "own RANK in 0..{}",
                    kWho, w.rendezvous, w.rank, w.size - 1));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  const std::string job = store.get("torchrun/job", std::max(ms, std::chrono::milliseconds(1)));
  const auto space = job.find(' ');
  if (job.substr(0, space) != std::to_string(w.size))
    throw InvalidArgument(
        fmt::format("{} at {}: rank 0 has WORLD_SIZE={} but rank {} has "
                    "WORLD_SIZE={}; give every worker the same WORLD_SIZE",
                    kWho, w.rendezvous, job.substr(0, space), w.rank, w.size));
  w.job_id = job.substr(space + 1);
  store.set(fmt::format("torchrun/arrived/{}", w.rank), "1");
  store.add("torchrun/arrivals", 1);
  wait_for_all(store, w, deadline, timeout_s);
}

void rendezvous_with_others(WorldInfo& w) {
  const double timeout_s = knob_double("LOCKSTEP_TIMEOUT");
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  const Place p = place();
  if (w.rank == 0) serve_store(w, p);
  try {
    auto store =
        w.rank == 0 ? connect_to(w.rendezvous, w.secret, deadline) : join_store(w, p, deadline);
    check_in(store, w, deadline, timeout_s);
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with(kWho)) throw;  // says it all already
    const std::string why = fmt::format(
        "{} at {} (rank {}): {}; is rank 0 running with the same "
        "MASTER_ADDR and MASTER_PORT? If it failed or gave up, its "
        "output says why",
        kWho, p.address(), w.rank, e.what());
    if (dynamic_cast<const TimeoutError*>(&e)) throw TimeoutError(why);
    throw Error(why);
  }
}

#else

void rendezvous_with_others(WorldInfo& w) {
  throw InvalidArgument(fmt::format(
      "torchrun's environment says WORLD_SIZE={}, but this lockstep was built without the "
      "rendezvous store (gloo) the workers need to find each other; build with gloo or start the "
      "job with `lockstep run`",
      w.size));
}

#endif

}  // namespace

std::optional<WorldInfo> torchrun_world() {
  if (env_text("RANK").empty() || env_text("WORLD_SIZE").empty()) return std::nullopt;
  WorldInfo w = identity();
  w.validate();
  if (w.size > 1) rendezvous_with_others(w);
  return w;
}

}  // namespace lockstep::comm
