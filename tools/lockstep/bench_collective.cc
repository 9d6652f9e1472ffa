// `lockstep bench <collective>`: latency and bandwidth per message size, in
// the nccl-tests convention (busbw = algbw * bus factor), table + JSON lines.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/comm/communicator.h"
#include "tools/common/cli_checks.h"
#include "tools/lockstep/bench_device.h"
#include "tools/lockstep/commands.h"

namespace lockstep::cli {
namespace {

using comm::Communicator;
using comm::DataType;
using comm::ReduceOp;
using Clock = std::chrono::steady_clock;

constexpr const char* kCollectives[] = {"allreduce", "broadcast", "allgather", "reduce_scatter",
                                        "alltoall",  "reduce",    "barrier"};

struct Options {
  std::string collective;
  std::string sizes = "8B:256MiB";
  std::string dtype = "f32";
  std::string op = "sum";
  std::string backend = knob_string("LOCKSTEP_BACKEND");
  std::string device = "cpu";  // cpu | cuda (bench_device.h)
  double factor = 2;
  double seconds_per_size = 0.25;
  int max_iters = 20000;
  bool check = false;
  bool json = false;
  std::string run_dir;  // rank 0 writes run.json and bench.jsonl there
};

// nccl-tests' factors: the fraction of the message each rank's link carries.
double bus_factor(const std::string& c, int n) {
  if (n == 1) return 1;
  if (c == "allreduce") return 2.0 * (n - 1) / n;
  if (c == "allgather" || c == "reduce_scatter" || c == "alltoall") return double(n - 1) / n;
  return 1;
}

// One collective call moving `bytes` per rank (the nccl-tests "size").
// `comm` moves the data; `control` (the same one, except over a device
// transport, whose buffers must be on the GPU) agrees iteration counts and
// gathers times. `device`: the message is in GPU memory (bench_device.h).
struct Runner {
  Communicator& comm;
  Communicator& control;
  const Options& o;
  DataType dtype;
  ReduceOp op;
  size_t es;
  std::vector<uint8_t> in, out;
  DeviceBuffers* device = nullptr;

  void prepare(size_t bytes) {
    size_t n = static_cast<size_t>(comm.size());
    in.assign(bytes, 0);
    out.assign(o.collective == "allgather" ? bytes * n : bytes, 0);
    if (o.collective == "reduce_scatter") out.assign(bytes / n + es, 0);
    if (device) device->resize(in.size(), out.size());
  }
  void* in_ptr() { return device ? device->in() : in.data(); }
  void* out_ptr() { return device ? device->out() : out.data(); }
  void run(size_t bytes) {
    size_t count = bytes / es;
    size_t n = static_cast<size_t>(comm.size());
    const std::string& c = o.collective;
    void* src = in_ptr();
    void* dst = out_ptr();
    if (device) device->before();
    if (c == "allreduce")
      comm.allreduce(src, dst, count, dtype, op);
    else if (c == "reduce")
      comm.reduce(src, dst, count, dtype, op, 0);
    else if (c == "broadcast")
      comm.broadcast(src, count, dtype, 0);
    else if (c == "allgather")
      comm.allgather(src, dst, count, dtype);
    else if (c == "reduce_scatter")
      comm.reduce_scatter(src, dst, count / n, dtype, op);
    else if (c == "alltoall")
      comm.alltoall(src, dst, count / n, dtype);
    else
      comm.barrier();
    if (device) device->after();
  }
};

std::vector<size_t> size_list(const Options& o, size_t es) {
  auto colon = o.sizes.find(':');
  size_t lo = parse_bytes(o.sizes.substr(0, colon), "--sizes");
  size_t hi = colon == std::string::npos ? lo : parse_bytes(o.sizes.substr(colon + 1), "--sizes");
  if (lo == 0 || hi < lo) throw InvalidArgument("--sizes wants MIN:MAX with 0 < MIN <= MAX");
  std::vector<size_t> out;
  for (double s = static_cast<double>(lo); s <= static_cast<double>(hi) * 1.0000001;
       s *= o.factor) {
    size_t b = std::max(es, static_cast<size_t>(s) / es * es);
    if (out.empty() || out.back() != b) out.push_back(b);
  }
  return out;
}

// Verifies one sum-allreduce-like result: every rank fills rank+1, so the sum
// is n(n+1)/2 (exact in every dtype for small n).
bool check_once(Runner& r, size_t bytes) {
  if (r.o.collective != "allreduce" || r.dtype != DataType::kFloat32) return true;
  size_t count = bytes / 4;
  std::vector<float> v(count, static_cast<float>(r.comm.rank() + 1));
  std::vector<float> got(count);
  if (r.device) {  // through the GPU buffers, staged or not, as the timed runs go
    r.prepare(bytes);
    r.device->upload_in(v.data(), bytes);
    r.device->before();
    r.comm.allreduce(r.in_ptr(), r.out_ptr(), count, DataType::kFloat32, ReduceOp::kSum);
    r.device->after();
    r.device->download_out(got.data(), bytes);
  } else {
    r.comm.allreduce(v.data(), got.data(), count, DataType::kFloat32, ReduceOp::kSum);
  }
  float want = r.comm.size() * (r.comm.size() + 1) / 2.0f;
  return std::all_of(got.begin(), got.end(), [&](float x) { return x == want; });
}

struct Stats {
  double median_us, p99_us;
};

Stats measure(Runner& r, size_t bytes) {
  r.prepare(bytes);
  for (int i = 0; i < 3; ++i) r.run(bytes);
  // Rank 0 picks the iteration count so every rank runs the same number.
  auto t0 = Clock::now();
  for (int i = 0; i < 3; ++i) r.run(bytes);
  double per = std::chrono::duration<double>(Clock::now() - t0).count() / 3;
  int64_t iters = std::clamp<int64_t>(
      static_cast<int64_t>(r.o.seconds_per_size / std::max(per, 1e-9)), 5, r.o.max_iters);
  r.control.broadcast(&iters, 1, DataType::kInt64, 0);
  std::vector<double> times(static_cast<size_t>(iters));
  for (auto& t : times) {
    auto s = Clock::now();
    r.run(bytes);
    t = std::chrono::duration<double, std::micro>(Clock::now() - s).count();
  }
  // The slowest rank defines each iteration's time.
  r.control.allreduce(times.data(), times.size(), DataType::kFloat64, ReduceOp::kMax);
  std::sort(times.begin(), times.end());
  auto pct = [&](double q) {
    return times[std::min(times.size() - 1, static_cast<size_t>(q * times.size()))];
  };
  return {pct(0.5), pct(0.99)};
}

std::string human_bytes(size_t b) {
  if (b >= (1u << 30) && b % (1u << 30) == 0) return fmt::format("{}GiB", b >> 30);
  if (b >= (1u << 20) && b % (1u << 20) == 0) return fmt::format("{}MiB", b >> 20);
  if (b >= (1u << 10) && b % (1u << 10) == 0) return fmt::format("{}KiB", b >> 10);
  return fmt::format("{}B", b);
}

// --run-dir: what `lockstep report` reads (docs/report.md).
void write_run_json(const Options& o, std::string_view backend, int np) {
  std::filesystem::create_directories(o.run_dir);
  nlohmann::json run = {{"kind", "bench"}, {"op", o.collective}, {"backend", std::string(backend)},
                        {"np", np},        {"dtype", o.dtype},   {"sizes", o.sizes}};
  std::ofstream(o.run_dir + "/run.json") << run.dump(2) << "\n";
}

// One size's row (rank 0): a table line or a JSON line, and the run
// directory's bench.jsonl.
void print_size(const Runner& r, size_t bytes, const Stats& s, double algbw, double busbw,
                bool wrong) {
  const Options& o = r.o;
  Communicator& comm = r.comm;
  nlohmann::json j = {{"op", o.collective},       {"backend", comm.backend_name()},
                      {"device", o.device},       {"np", comm.size()},
                      {"dtype", o.dtype},         {"bytes", bytes},
                      {"median_us", s.median_us}, {"p99_us", s.p99_us},
                      {"algbw_gbps", algbw},      {"busbw_gbps", busbw}};
  if (o.check) j["check"] = !wrong;
  if (o.collective == "allreduce" || o.collective == "reduce") {
    const std::string algorithm =
        comm.backend().allreduce_algorithm(bytes, r.es, o.collective == "reduce");
    if (!algorithm.empty()) j["algorithm"] = algorithm;
  }
  if (!o.run_dir.empty())
    std::ofstream(o.run_dir + "/bench.jsonl", std::ios::app) << j.dump() << "\n";
  if (o.json) {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{:>10} {:>12.2f} {:>12.2f} {:>12.3f} {:>12.3f}{}\n", human_bytes(bytes),
               s.median_us, s.p99_us, algbw, busbw, o.check ? (wrong ? "  WRONG" : "  ok") : "");
  }
  std::fflush(stdout);
}

int run_bench(const Options& o) {
  auto dtype = comm::parse_dtype(o.dtype);
  auto op = comm::parse_reduce_op(o.op);
  if (!dtype)
    throw InvalidArgument(
        fmt::format("--dtype {}: unknown (f16 bf16 f32 f64 i8 u8 i32 i64)", o.dtype));
  if (!op)
    throw InvalidArgument(fmt::format("--op {}: unknown (sum average min max product)", o.op));
  const std::vector<size_t> sizes =
      size_list(o, comm::dtype_size(*dtype));  // before any rank waits
  const comm::WorldInfo world = comm::WorldInfo::from_environment();
  const bool cuda = o.device == "cuda";
  std::unique_ptr<DeviceBuffers> device;
  // The GPU is chosen before a device transport starts on it.
  if (cuda) device = std::make_unique<DeviceBuffers>(o.backend != "nccl", world.local_rank);
  auto comm = Communicator::create(world, o.backend);
  const bool on_gpu = comm->backend().memory() == comm::MemoryKind::kCuda;
  if (on_gpu && !cuda)
    throw InvalidArgument(
        fmt::format("--backend {} moves GPU memory: add --device cuda", o.backend));
  // Iteration counts and times are host values: over a device transport they
  // travel on a host one beside it.
  std::unique_ptr<Communicator> host_comm =
      on_gpu ? Communicator::create(world, knob_string("LOCKSTEP_BACKEND") == "nccl"
                                               ? std::string("auto")
                                               : knob_string("LOCKSTEP_BACKEND"))
             : nullptr;
  Communicator& control = host_comm ? *host_comm : *comm;
  Runner r{*comm, control, o, *dtype, *op, comm::dtype_size(*dtype), {}, {}, device.get()};
  bool lead = comm->rank() == 0;
  if (lead && !o.json)
    fmt::print(
        "# lockstep bench {}: backend={} device={} np={} dtype={}\n{:>10} {:>12} {:>12} {:>12} {:>12}{}\n",
        o.collective, comm->backend_name(), o.device, comm->size(), o.dtype, "size", "median(us)",
        "p99(us)", "algbw(GB/s)", "busbw(GB/s)", o.check ? "  check" : "");
  if (lead && !o.run_dir.empty()) write_run_json(o, comm->backend_name(), comm->size());
  bool all_ok = true;
  for (size_t bytes : sizes) {
    bool ok = !o.check || check_once(r, bytes);
    int32_t bad = ok ? 0 : 1;
    control.allreduce(&bad, 1, DataType::kInt32, ReduceOp::kMax);
    all_ok &= bad == 0;
    Stats s = measure(r, bytes);
    double algbw = o.collective == "barrier" ? 0 : bytes / (s.median_us * 1e3);
    double busbw = algbw * bus_factor(o.collective, comm->size());
    if (lead) print_size(r, bytes, s, algbw, busbw, bad != 0);
  }
  control.barrier();
  if (!all_ok && lead) std::fprintf(stderr, "lockstep bench: results were WRONG for some sizes\n");
  return all_ok ? 0 : 1;
}

}  // namespace

bool is_benchmarkable_collective(const char* name) {
  for (const char* c : kCollectives)
    if (!std::strcmp(c, name)) return true;
  return false;
}

int bench_collective_main(int argc, char** argv) {
  Options o;
  o.collective = argv[0];
  CLI::App app{"Benchmark one collective over message sizes. Run it under `lockstep run -np N`.",
               "lockstep bench " + o.collective};
  app.add_option("--sizes", o.sizes, "MIN:MAX message bytes per rank, e.g. 8B:256MiB")
      ->capture_default_str();
  app.add_option("-f,--factor", o.factor, "size multiplier between steps")
      ->check(greater_than(1))
      ->capture_default_str();
  app.add_option("--dtype", o.dtype, "f16 bf16 f32 f64 i8 u8 i32 i64")->capture_default_str();
  app.add_option("--op", o.op, "sum average min max product")->capture_default_str();
  app.add_option("--backend", o.backend,
                 "auto shm mpi gloo nccl, those built in (default: LOCKSTEP_BACKEND)")
      ->capture_default_str();
  app.add_option("--device", o.device,
                 "cpu, or cuda: the message lives in GPU memory (staged through pinned host "
                 "memory around each call unless --backend nccl)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--seconds", o.seconds_per_size, "timed seconds per size")
      ->check(greater_than(0))
      ->capture_default_str();
  app.add_option("--max-iters", o.max_iters, "iteration cap per size (at least 5)")
      ->check(at_least(5))
      ->capture_default_str();
  app.add_flag("--check", o.check, "verify results (allreduce f32) before timing");
  app.add_flag("--json", o.json, "one JSON object per size (rank 0)");
  app.add_option("--run-dir", o.run_dir,
                 "rank 0 also writes run.json and appends bench.jsonl there for `lockstep report`");
  if (auto status = parse_or_status(app, argc, argv)) return *status;
  try {
    return run_bench(o);
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "lockstep bench: %s\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "lockstep bench: %s\n", e.what());
    return 1;
  }
}

}  // namespace lockstep::cli
