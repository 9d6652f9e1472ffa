// A `lockstep run` / mpirun worker for same_bits_backends_test.sh: trains
// SameBitsNet (same_bits_model.h, the model of same_bits_test.cc) for
// kSameBitsSteps steps and rank 0 prints `state hash: HEX` on stdout, so
// the script can compare world sizes and backends (the backend is the
// launcher's: LOCKSTEP_BACKEND).
//   lockstep-test-same-bits-worker on       SameBitsStep, K = 8 micro-batches
//   lockstep-test-same-bits-worker off      plain data parallelism, B/n per rank
//   lockstep-test-same-bits-worker elastic  SameBitsStep under run_elastic, a
//       commit per step; with SAME_BITS_PHASE_DIR set (same_bits_elastic_test.sh)
//       rank 0 asks the discovery script for one slot after step 8 and for
//       two after step 16 by creating `shrink` and `grow` there, and the
//       ranks step no further until the world has that size (commits only),
//       so the 24 steps run at 2, 1 and 2 workers whatever the timing.
// Exit status 1 with the message on stderr on any error (0 for a worker
// that scale-down removed).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "lockstep/base/error.h"
#include "lockstep/engine/elastic.h"
#include "lockstep/torch/same_bits.h"
#include "lockstep/torch/torch.h"
#include "same_bits_model.h"

namespace {

namespace lt = lockstep::torch;
namespace lt_test = lockstep::torch::testing;

// SameBitsStep as every mode here drives it (K micro-batches, seed 42, the
// micro-batch's samples by global position), from step `first` on.
class SameBitsSteps {
 public:
  SameBitsSteps(lt_test::SameBitsNet& net, ::torch::optim::Optimizer& opt, int64_t first)
      : net_(net), driver_(net, opt, options()) {
    driver_.set_steps_done(first);
  }
  void step() {
    const int64_t m = lt_test::kSameBitsGlobalBatch / lt_test::kSameBitsMicroBatches;
    driver_.step([&](const lt::MicroBatch& micro) {
      auto [x, y] = data_.batch(micro.step, micro.index * m, m);
      return ::torch::nn::functional::cross_entropy(net_.forward(x), y);
    });
  }

 private:
  static lt::SameBitsOptions options() {
    lt::SameBitsOptions o;
    o.micro_batches = lt_test::kSameBitsMicroBatches;
    o.seed = 42;
    return o;
  }
  lt_test::SameBitsNet& net_;
  lt::SameBitsStep driver_;
  const lt_test::SameBitsData data_;
};

void train_same_bits(lt_test::SameBitsNet& net, ::torch::optim::Optimizer& opt) {
  SameBitsSteps steps(net, opt, 0);
  for (int64_t s = 0; s < lt_test::kSameBitsSteps; ++s) steps.step();
}

// Each rank one batch of B/n, f32 gradients averaged by allreduce.
void train_default(lt_test::SameBitsNet& net, ::torch::optim::Optimizer& opt) {
  ::torch::manual_seed(42 + static_cast<uint64_t>(lt::rank()));
  const lt_test::SameBitsData data;
  const int64_t share = lt_test::kSameBitsGlobalBatch / lt::size();
  for (int64_t s = 0; s < lt_test::kSameBitsSteps; ++s) {
    opt.zero_grad();
    auto [x, y] = data.batch(s, lt::rank() * share, share);
    ::torch::nn::functional::cross_entropy(net.forward(x), y).backward();
    int i = 0;
    for (auto& p : net.parameters()) lt::allreduce_(p.mutable_grad(), fmt::format("g.{}", i++));
    opt.step();
  }
}

// Phase p (1: shrink, 2: grow) starts after step kPhaseStep[p]; its world size.
constexpr int64_t kPhaseStep[] = {0, 8, 16};
constexpr int kPhaseSize[] = {0, 1, 2};
constexpr auto kPhaseDeadline = std::chrono::seconds(60);

// The steps of one world; run_elastic calls it again after each
// re-formation, with the state synced from rank 0. A SameBitsStep of this
// world's size continues at the committed step: nothing of it depends on
// who ran the steps before.
void train_elastic(lt_test::SameBitsNet& net, ::torch::optim::Optimizer& opt,
                   lt::ElasticState& state, const char* phase_dir) {
  SameBitsSteps steps(net, opt, state.step);
  const auto start = std::chrono::steady_clock::now();
  while (state.step < lt_test::kSameBitsSteps) {
    // Synced, so every rank takes the same decision: the phase reached.
    const int phase = phase_dir == nullptr          ? 0
                      : state.step >= kPhaseStep[2] ? 2
                      : state.step >= kPhaseStep[1] ? 1
                                                    : 0;
    const std::string seen = "phase" + std::to_string(phase);
    if (phase > 0 && !state.values.count(seen)) {
      if (lt::size() == kPhaseSize[phase]) {
        state.values[seen] = static_cast<double>(state.step);
        std::printf("same-bits-worker: rank %d size %d at step %lld (phase %d)\n", lt::rank(),
                    lt::size(), static_cast<long long>(state.step), phase);
        std::fflush(stdout);
      } else {
        if (lt::rank() == 0)
          std::ofstream(std::string(phase_dir) + (phase == 1 ? "/shrink" : "/grow")) << "";
        if (std::chrono::steady_clock::now() - start > kPhaseDeadline)
          throw lockstep::Error(
              fmt::format("the world did not reach {} worker(s) for phase {} "
                          "within {} s (still {})",
                          kPhaseSize[phase], phase, kPhaseDeadline.count(), lt::size()));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        state.commit();  // where a re-formation is noticed
        continue;
      }
    }
    steps.step();
    ++state.step;
    state.commit();
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "on" && mode != "off" && mode != "elastic") {
    std::fprintf(stderr, "usage: %s on|off|elastic\n", argv[0]);
    return 2;
  }
  try {
    lt::init();
    ::torch::manual_seed(1);
    lt_test::SameBitsNet net;
    ::torch::optim::Adam opt(net.parameters(), ::torch::optim::AdamOptions(1e-2));
    if (mode == "elastic") {
      lt::ElasticState state(net, opt);
      const char* phase_dir = std::getenv("SAME_BITS_PHASE_DIR");
      lt::run_elastic(state, [&](lt::ElasticState& s) { train_elastic(net, opt, s, phase_dir); });
    } else if (mode == "on") {
      train_same_bits(net, opt);
    } else {
      train_default(net, opt);
    }
    if (lt::rank() == 0)
      std::printf("rank %d size %d state hash: %s\n", lt::rank(), lt::size(),
                  lt::state_hash_hex(net, opt).c_str());
    std::fflush(stdout);
    lt::shutdown();
    return 0;
  } catch (const lockstep::engine::RemovedFromWorld&) {  // scale-down: this worker's part is done
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "same-bits-worker: %s\n", e.what());
    return 1;
  }
}
