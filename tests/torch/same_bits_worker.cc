// A `lockstep run` / mpirun worker for same_bits_backends_test.sh: trains
// SameBitsNet (same_bits_model.h, the model of same_bits_test.cc) for
// kSameBitsSteps steps and rank 0 prints `state hash: HEX` on stdout, so
// the script can compare world sizes and backends (the backend is the
// launcher's: LOCKSTEP_BACKEND).
//   lockstep-test-same-bits-worker on    SameBitsStep, K = 8 micro-batches
//   lockstep-test-same-bits-worker off   plain data parallelism, B/n per rank
// Exit status 1 with the message on stderr on any error.
#include <fmt/format.h>

#include <cstdio>
#include <string>

#include "lockstep/base/error.h"
#include "lockstep/torch/same_bits.h"
#include "lockstep/torch/torch.h"
#include "same_bits_model.h"

namespace {

namespace lt = lockstep::torch;
namespace lt_test = lockstep::torch::testing;

void train_same_bits(lt_test::SameBitsNet& net, ::torch::optim::Optimizer& opt) {
  lt::SameBitsOptions options;
  options.micro_batches = lt_test::kSameBitsMicroBatches;
  options.seed = 42;
  lt::SameBitsStep driver(net, opt, options);
  const lt_test::SameBitsData data;
  const int64_t m = lt_test::kSameBitsGlobalBatch / lt_test::kSameBitsMicroBatches;
  for (int64_t s = 0; s < lt_test::kSameBitsSteps; ++s)
    driver.step([&](const lt::MicroBatch& micro) {
      auto [x, y] = data.batch(micro.step, micro.index * m, m);
      return ::torch::nn::functional::cross_entropy(net.forward(x), y);
    });
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

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "on" && mode != "off") {
    std::fprintf(stderr, "usage: %s on|off\n", argv[0]);
    return 2;
  }
  try {
    lt::init();
    ::torch::manual_seed(1);
    lt_test::SameBitsNet net;
    ::torch::optim::Adam opt(net.parameters(), ::torch::optim::AdamOptions(1e-2));
    if (mode == "on") train_same_bits(net, opt);
    else train_default(net, opt);
    if (lt::rank() == 0)
      std::printf("rank %d size %d state hash: %s\n", lt::rank(), lt::size(),
                  lt::state_hash_hex(net, opt).c_str());
    std::fflush(stdout);
    lt::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "same-bits-worker: %s\n", e.what());
    return 1;
  }
}
