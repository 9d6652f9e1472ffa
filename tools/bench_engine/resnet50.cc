#include "tools/bench_engine/resnet50.h"

#include <fmt/format.h>

namespace lockstep::bench {
namespace {

void conv_bn(std::vector<ParamShape>& out, const std::string& prefix, const std::string& conv,
             const std::string& bn, int64_t out_ch, int64_t in_ch, int64_t k) {
  out.push_back({prefix + conv + ".weight", {out_ch, in_ch, k, k}});
  out.push_back({prefix + bn + ".weight", {out_ch}});
  out.push_back({prefix + bn + ".bias", {out_ch}});
}

}  // namespace

int64_t ParamShape::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ParamShape> resnet50_parameters() {
  std::vector<ParamShape> p;
  conv_bn(p, "", "conv1", "bn1", 64, 3, 7);
  const int blocks[4] = {3, 4, 6, 3};
  int64_t in_ch = 64;
  for (int layer = 0; layer < 4; ++layer) {
    int64_t width = 64LL << layer, out_ch = width * 4;
    for (int b = 0; b < blocks[layer]; ++b) {
      std::string prefix = fmt::format("layer{}.{}.", layer + 1, b);
      conv_bn(p, prefix, "conv1", "bn1", width, in_ch, 1);
      conv_bn(p, prefix, "conv2", "bn2", width, width, 3);
      conv_bn(p, prefix, "conv3", "bn3", out_ch, width, 1);
      if (b == 0) conv_bn(p, prefix, "downsample.0", "downsample.1", out_ch, in_ch, 1);
      in_ch = out_ch;
    }
  }
  p.push_back({"fc.weight", {1000, 2048}});
  p.push_back({"fc.bias", {1000}});
  return p;
}

}  // namespace lockstep::bench
