#include "lockstep/plan/simulator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/policy/compression.h"
#include "lockstep/policy/policies.h"
#include "lockstep/plan/stats.h"

namespace lockstep::plan {

// The decisions this model shares with the runtime (lockstep/policy).
using policy::compressed_step;
using policy::compression_pass_bytes;
using policy::CompressionKind;
using policy::CompressionSpec;
using policy::fusion_batches;
using policy::FusionItem;
using policy::is_fused;
using policy::overlap_pays;
using policy::parse_compression;
using policy::StepCollective;
using policy::worker_cpus;

bool overlap_for(const Scenario& s) {
  const int cpus = s.cores_per_node > 0 ? worker_cpus(s.cores_per_node, s.topology.ranks_per_node)
                                        : 0;  // unknown
  return policy::choose_overlap(policy::parse_overlap(s.overlap, "--overlap"), s.topology.ranks(),
                                s.topology.nodes == 1, cpus, s.threads_per_rank)
      .overlap;  // torch's rule, too
}

namespace {

struct Grad {
  size_t index = 0;      // registration order
  double submit_ms = 0;  // when the slowest rank hands it to the engine
  int64_t wire_bytes = 0;
  int elem_bytes = 4;
  int key = 0;  // wire dtype
};

int wire_elem_bytes(const GradientTiming& g, CompressionKind kind) {
  const bool floating =
      g.dtype == "f16" || g.dtype == "bf16" || g.dtype == "f32" || g.dtype == "f64";
  return policy::wire_element_bytes(kind, dtype_bytes(g.dtype), floating);
}

// The parameters' shapes for the compression closed forms; a gradient
// recorded without one counts as a vector, which PowerSGD would not
// compress, so PowerSGD refuses it instead of guessing.
std::vector<std::vector<int64_t>> gradient_shapes(const Profile& profile,
                                                  const CompressionSpec& spec) {
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& g : profile.gradients) {
    if (g.shape.empty() && spec.kind == CompressionKind::kPowerSGD)
      throw InvalidArgument(fmt::format(
          "--compression {}: the profile's gradient {} has no shape (recorded before profiles "
          "had shapes); record the profile again",
          spec.name(), g.name));
    shapes.push_back(g.shape.empty() ? std::vector<int64_t>{g.bytes / dtype_bytes(g.dtype)}
                                     : g.shape);
  }
  return shapes;
}

// The engine's background thread: costs of cycles and batches, with totals.
class EngineModel {
 public:
  EngineModel(const NetworkModel& m, const Scenario& s, size_t names, StepPrediction& out)
      : m_(m), s_(s), out_(out) {
    // The negotiation header's int32 fields (the engine lays them out by the same counts).
    header_bytes_ = 4.0 * double(policy::negotiation_header_fields(s.topology.ranks(),
                                                                   static_cast<int64_t>(names)));
    // DistributedOptimizer averages (its default op) the way the policy says.
    scale_pass_ = policy::scales_after_reduce(parse_compression(s.compression).kind,
                                              /*average=*/true);
  }

  // One collective of a compressed step (compression.h), after its own
  // negotiation cycle. alltoall and allgather are costed like a ring pass
  // over the flat transport's fitted line: n-1 message steps, the
  // collective's wire bytes; an allreduce of several tensors is fused.
  double compressed_ms(const StepCollective& c) {
    out_.payload_bytes += c.payload_bytes;
    out_.wire_bytes += c.wire_bytes;
    ++out_.collectives;
    const double copy_s = 2.0 * double(c.payload_bytes) * m_.host->copy_s_per_byte;
    Cost cost;
    if (c.op == "allreduce") {
      cost = allreduce_cost(m_, s_.topology, double(c.payload_bytes), 4).cost;
    } else {
      const int n = s_.topology.ranks();
      const std::string transport =
          s_.topology.nodes == 1 && m_.has("shm") ? "shm" : s_.topology.cross;
      const double bytes = double(c.wire_bytes);
      const AlphaBeta ab = m_.cost(transport, algorithm_for(m_, transport, n, bytes), bytes);
      cost = apply({double(n - 1), bytes, 0}, ab, 0);
    }
    add(cost);
    out_.copy_ms += copy_s * 1e3;
    return cycle_ms() + (cost.total() + copy_s) * 1e3;
  }

  double cycle_ms() {
    AllreduceCost c = allreduce_cost(m_, s_.topology, header_bytes_, 4);
    add(c.cost);
    out_.cycle_ms += m_.host->cycle_overhead_s * 1e3;
    ++out_.cycles;
    return (c.cost.total() + m_.host->cycle_overhead_s) * 1e3;
  }

  double batch_ms(const std::vector<const Grad*>& batch) {
    int64_t bytes = 0;
    for (const Grad* g : batch) bytes += g->wire_bytes;
    out_.payload_bytes += bytes;
    out_.wire_bytes += policy::allreduce_wire_bytes(bytes, s_.topology.ranks());
    double copy_s = (is_fused(batch.size()) ? 2.0 : 0.0) * bytes * m_.host->copy_s_per_byte;
    if (scale_pass_) copy_s += bytes * m_.host->copy_s_per_byte;
    AllreduceCost c = allreduce_cost(m_, s_.topology, double(bytes), batch.front()->elem_bytes);
    add(c.cost);
    out_.copy_ms += copy_s * 1e3;
    ++out_.collectives;
    if (bytes > largest_) {
      largest_ = bytes;
      out_.largest_algorithm = c.algorithm;
    }
    return (c.cost.total() + copy_s) * 1e3;
  }

  // Runs the batches of `ready` (in order) and returns their time.
  double run(const std::vector<const Grad*>& ready, int64_t threshold) {
    std::vector<FusionItem> items;
    for (const Grad* g : ready) items.push_back({g->wire_bytes, g->key});
    double t = 0;
    for (const auto& batch : fusion_batches(items, threshold)) {
      std::vector<const Grad*> members;
      for (size_t i : batch) members.push_back(ready[i]);
      t += batch_ms(members);
    }
    return t;
  }

 private:
  void add(const Cost& c) {
    out_.alpha_ms += c.alpha_s * 1e3;
    out_.beta_ms += c.beta_s * 1e3;
    out_.gamma_ms += c.gamma_s * 1e3;
  }

  const NetworkModel& m_;
  const Scenario& s_;
  StepPrediction& out_;
  double header_bytes_ = 0;
  bool scale_pass_ = true;
  int64_t largest_ = -1;
};

// Phases of one rank's step from the profile's medians, adjusted so that
// they add up to its median compute time exactly (the 1-rank invariant).
struct Phases {
  double forward = 0, backward = 0, optimizer = 0, compute = 0;
};

Phases phases_of(const ProfileSummary& s, double slowdown) {
  Phases p{s.forward_ms * slowdown, s.backward_ms * slowdown, s.optimizer_ms * slowdown,
           s.compute_ms * slowdown};
  // Medians of parts need not add up to the median of the whole: the
  // difference (and whatever the loop does outside the phases) is counted
  // as time before backward.
  p.forward = p.compute - p.backward - p.optimizer;
  if (p.forward < 0) {
    p.backward = std::max(0.0, p.backward + p.forward);
    p.forward = 0;
    p.optimizer = p.compute - p.backward;
  }
  return p;
}

std::string bottleneck(const StepPrediction& p) {
  const double step = std::max(p.step_ms, 1e-12);
  if (p.exposed_comm_ms / step < 0.05 && p.straggler_ms / step < 0.05) return "compute";
  const double busy = std::max(
      p.alpha_ms + p.beta_ms + p.gamma_ms + p.copy_ms + p.cycle_ms + p.wake_wait_ms + p.compress_ms,
      1e-12);
  const double exposed = std::max(0.0, p.exposed_comm_ms);
  std::vector<std::pair<double, std::string>> c = {
      {p.straggler_ms, "stragglers"},
      {exposed * p.beta_ms / busy, "network bandwidth"},
      {exposed * (p.alpha_ms + p.cycle_ms + p.wake_wait_ms) / busy, "latency"},
      {exposed * p.gamma_ms / busy, "reduction"},
      {exposed * p.copy_ms / busy, "memory copies"},
      {exposed * p.compress_ms / busy, "compression compute"},
  };
  return std::max_element(c.begin(), c.end())->second;
}

void validate(const Profile& profile, const NetworkModel& m, const Scenario& s) {
  if (s.topology.nodes < 1 || s.topology.ranks_per_node < 1)
    throw InvalidArgument(fmt::format("nodes ({}) and ranks per node ({}) must be >= 1",
                                      s.topology.nodes, s.topology.ranks_per_node));
  parse_compression(s.compression);  // names the accepted forms
  if (s.fusion_threshold < 0) throw InvalidArgument("--fusion must be >= 0 bytes");
  // One rank does not communicate (its step is its compute), so it needs
  // no network model: plan validate predicts its np 1 points without one.
  if (!m.host && s.topology.ranks() > 1)
    throw InvalidArgument(fmt::format("network '{}' has no host costs", m.name));
  if (profile.steps.empty()) throw InvalidArgument("the profile holds no steps");
  if (!(s.wake_wait_ms >= 0) || !std::isfinite(s.wake_wait_ms))
    throw InvalidArgument(fmt::format("--wake-wait-ms {} must be >= 0", s.wake_wait_ms));
  if (!(s.colocated_slowdown > 0) || !std::isfinite(s.colocated_slowdown))
    throw InvalidArgument(
        fmt::format("--compute-slowdown {} must be a positive factor", s.colocated_slowdown));
}

// The prediction's fields that come before any communication is priced.
StepPrediction start_prediction(const NetworkModel& m, const Scenario& s, const Phases& ph) {
  StepPrediction out;
  out.nodes = s.topology.nodes;
  out.ranks = s.topology.ranks();
  out.backend = s.topology.backend();
  if (out.backend == "shm" && !m.has("shm")) out.backend = s.topology.cross;  // GPU presets
  out.compute_ms = ph.compute;
  return out;
}

// What follows from the step's time: throughput, efficiency against one
// rank alone, the communication left exposed, and the bottleneck.
StepPrediction finish(StepPrediction p, const ProfileSummary& sum, const Phases& ph) {
  p.samples_per_s = p.step_ms > 0 ? p.ranks * sum.samples_per_step / (p.step_ms / 1e3) : 0;
  p.efficiency = p.step_ms > 0 ? sum.compute_ms / p.step_ms : 0;
  p.exposed_comm_ms = std::max(0.0, p.step_ms - ph.compute - p.straggler_ms);
  p.overlapped_share =
      p.comm_ms > 0 ? std::clamp((p.comm_ms - p.exposed_comm_ms) / p.comm_ms, 0.0, 1.0) : 0;
  p.bottleneck = bottleneck(p);
  return p;
}

// Gradients as the slowest rank submits them (ready times relative to the
// start of backward); compression casts run on the training thread before
// each submission (overlap) or in synchronize.
struct Submissions {
  std::vector<Grad> grads;      // parameter order
  std::vector<double> cast_ms;  // per gradient, by index (0 without compression)
  double cast_total = 0;
};

Submissions submissions(const Profile& profile, const NetworkModel& m, const Scenario& s,
                        double slowdown) {
  Submissions out;
  const CompressionKind kind = parse_compression(s.compression).kind;  // once, not per gradient
  const bool compress = policy::casts_on_wire(kind);
  for (size_t i = 0; i < profile.gradients.size(); ++i) {
    const auto& g = profile.gradients[i];
    const int elem = wire_elem_bytes(g, kind);
    const int64_t count = g.bytes / dtype_bytes(g.dtype);
    out.grads.push_back({i, g.ready_ms * slowdown, count * elem, elem, elem});
    const double cast = compress ? g.bytes * m.host->copy_s_per_byte * 1e3 : 0;
    out.cast_ms.push_back(cast);
    if (compress) out.cast_total += cast;
  }
  return out;
}

// Without overlap: every gradient goes to the engine once backward (and
// its casts) ended. Returns when communication ends.
double synchronous_comm(const std::vector<Grad>& grads, EngineModel& engine, const Scenario& s,
                        double backward_end, StepPrediction& out) {
  std::vector<const Grad*> ready;
  for (const auto& g : grads) ready.push_back(&g);  // parameter order
  double t = backward_end + engine.cycle_ms();
  if (s.wake_wait_ms > 0) {
    // The first operation wakes the engine's thread as compute ends, and
    // it waits for a core like those that start during compute
    // (docs/plan.md, "The wait for a core").
    t += s.wake_wait_ms;
    out.wake_wait_ms += s.wake_wait_ms;
  }
  t += engine.run(ready, s.fusion_threshold);
  out.comm_ms = t - backward_end;
  return t;
}

// With overlap: the engine takes what has been submitted whenever it is
// free, cycle after cycle, while backward goes on (and slows down by the
// engine's work where they share a core). Returns when communication ends;
// moves `backward_end` by what the engine took from training.
double overlapped_comm(Submissions& sub, EngineModel& engine, const Scenario& s,
                       double backward_start, double& backward_end, StepPrediction& out) {
  std::vector<Grad>& grads = sub.grads;
  std::stable_sort(grads.begin(), grads.end(),
                   [](const Grad& a, const Grad& b) { return a.submit_ms < b.submit_ms; });
  double cast_so_far = 0;
  for (auto& g : grads) {
    cast_so_far += sub.cast_ms[g.index];
    g.submit_ms = backward_start + g.submit_ms + cast_so_far;
  }
  double free_at = 0;
  size_t i = 0;
  while (i < grads.size()) {
    const double start = std::max(free_at, grads[i].submit_ms);
    size_t j = i;
    std::vector<const Grad*> ready;
    while (j < grads.size() && grads[j].submit_ms <= start) ready.push_back(&grads[j++]);
    const int collectives_before = out.collectives;
    double busy = engine.cycle_ms();
    busy += engine.run(ready, s.fusion_threshold);
    if (start < backward_end && s.wake_wait_ms > 0) {
      // Each operation wakes a thread that waits for a computing one's core.
      const double wait = s.wake_wait_ms * (1 + out.collectives - collectives_before);
      out.wake_wait_ms += wait;
      busy += wait;
    }
    out.comm_ms += busy;
    if (out.comm_shares_cores) {
      // The engine's work takes the training thread's core: everything
      // backward had left to do after `start` finishes `busy` later.
      for (size_t k = j; k < grads.size(); ++k) grads[k].submit_ms += busy;
      if (backward_end > start) backward_end += busy;
    }
    free_at = start + busy;
    i = j;
  }
  return free_at;
}

// PowerSGD, 1-bit, 1-bit Adam: nothing goes during backward; the training
// thread compresses at synchronize() (1-bit Adam: in step()), then the
// collectives run one after another, each after its negotiation cycle
// (Note [Compression compute] for the modelled compute). Returns when
// communication ends.
double compressed_comm(const Profile& profile, const NetworkModel& m, const Scenario& s,
                       const CompressionSpec& spec, EngineModel& engine, double backward_end,
                       StepPrediction& out) {
  const auto shapes = gradient_shapes(profile, spec);
  out.compress_ms = compression_pass_bytes(spec, shapes) * m.host->copy_s_per_byte * 1e3;
  double t = backward_end + out.compress_ms + s.wake_wait_ms;
  out.wake_wait_ms += s.wake_wait_ms;
  for (const auto& c : compressed_step(spec, shapes, out.ranks)) t += engine.compressed_ms(c);
  out.comm_ms = t - backward_end;
  return t;
}

}  // namespace

StepPrediction simulate(const Profile& profile, const NetworkModel& m, const Scenario& s) {
  validate(profile, m, s);
  const ProfileSummary sum = summarize(profile);
  const bool colocated =
      s.topology.ranks_per_node > 1 || (s.nodes_share_machine && s.topology.ranks() > 1);
  const double slowdown = colocated ? s.colocated_slowdown : 1.0;
  const Phases ph = phases_of(sum, slowdown);
  StepPrediction out = start_prediction(m, s, ph);
  if (out.ranks == 1) {  // DistributedOptimizer does not communicate at all
    out.step_ms = ph.compute;
    return finish(out, sum, ph);
  }
  out.overlap = overlap_for(s);
  const bool one_host = s.topology.nodes == 1;
  const int cpus = s.cores_per_node > 0 ? worker_cpus(s.cores_per_node, s.topology.ranks_per_node)
                                        : s.threads_per_rank + 1;
  // The engine's work takes a core training needs where overlap cannot pay.
  out.comm_shares_cores = !overlap_pays(one_host, cpus, s.threads_per_rank);
  const double sigma = s.jitter_ms >= 0 ? s.jitter_ms : sum.compute_sigma_ms;
  out.straggler_ms = sigma * detail::expected_max_normal(out.ranks);

  const double backward_start = ph.forward + out.straggler_ms;
  const CompressionSpec spec = parse_compression(s.compression);
  if (spec.replaces_allreduce()) {
    EngineModel engine(m, s, profile.gradients.size(), out);
    out.step_ms = compressed_comm(profile, m, s, spec, engine, backward_start + ph.backward, out) +
                  ph.optimizer;
    return finish(out, sum, ph);
  }
  Submissions sub = submissions(profile, m, s, slowdown);
  double backward_end = backward_start + ph.backward + sub.cast_total;
  EngineModel engine(m, s, sub.grads.size(), out);
  const double comm_end = out.overlap
                              ? overlapped_comm(sub, engine, s, backward_start, backward_end, out)
                              : synchronous_comm(sub.grads, engine, s, backward_end, out);
  out.step_ms = std::max(backward_end, comm_end) + sub.cast_total + ph.optimizer;
  return finish(out, sum, ph);
}

}  // namespace lockstep::plan
