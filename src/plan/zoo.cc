#include "lockstep/plan/zoo.h"

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::plan {
namespace {

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct Layer {
  std::string name;
  std::vector<std::pair<std::string, std::vector<int64_t>>> params;  // name, shape (torch's)
  double flops = 0;                                                  // forward, per image
  bool first = false;                                                // no input gradient
};

class Builder {
 public:
  // k x k convolution, cin -> cout, producing an h x h map.
  void conv(const std::string& name, int k, int cin, int cout, int h, bool bias = false) {
    Layer l{name,
            {{name + ".weight", {cout, cin, k, k}}},
            2.0 * k * k * cin * cout * h * h,
            layers_.empty()};
    if (bias) l.params.push_back({name + ".bias", {cout}});
    layers_.push_back(std::move(l));
  }
  void bn(const std::string& name, int c, int h) {
    layers_.push_back(
        {name, {{name + ".weight", {c}}, {name + ".bias", {c}}}, 4.0 * c * h * h, false});
  }
  void fc(const std::string& name, int in, int out) {
    layers_.push_back(
        {name, {{name + ".weight", {out, in}}, {name + ".bias", {out}}}, 2.0 * in * out, false});
  }
  std::vector<Layer> take() { return std::move(layers_); }

 private:
  std::vector<Layer> layers_;
};

std::vector<Layer> resnet(const int (&blocks)[4]) {
  Builder b;
  b.conv("conv1", 7, 3, 64, 112);
  b.bn("bn1", 64, 112);
  int in = 64, h = 56;
  for (int stage = 0; stage < 4; ++stage) {
    const int width = 64 << stage, out = width * 4;
    for (int i = 0; i < blocks[stage]; ++i) {
      const std::string p = fmt::format("layer{}.{}.", stage + 1, i);
      const int h_in = h;
      if (i == 0 && stage > 0) h /= 2;  // torchvision v1.5: stride on the 3x3
      b.conv(p + "conv1", 1, in, width, h_in);
      b.bn(p + "bn1", width, h_in);
      b.conv(p + "conv2", 3, width, width, h);
      b.bn(p + "bn2", width, h);
      b.conv(p + "conv3", 1, width, out, h);
      b.bn(p + "bn3", out, h);
      if (i == 0) {
        b.conv(p + "downsample.0", 1, in, out, h);
        b.bn(p + "downsample.1", out, h);
      }
      in = out;
    }
  }
  b.fc("fc", 2048, 1000);
  return b.take();
}

std::vector<Layer> vgg16() {
  Builder b;
  const int plan[][3] = {{3, 64, 224},   {64, 64, 224},  {64, 128, 112}, {128, 128, 112},
                         {128, 256, 56}, {256, 256, 56}, {256, 256, 56}, {256, 512, 28},
                         {512, 512, 28}, {512, 512, 28}, {512, 512, 14}, {512, 512, 14},
                         {512, 512, 14}};
  int i = 0;
  for (const auto& c : plan) b.conv(fmt::format("features.{}", i++), 3, c[0], c[1], c[2], true);
  b.fc("classifier.0", 512 * 7 * 7, 4096);
  b.fc("classifier.3", 4096, 4096);
  b.fc("classifier.6", 4096, 1000);
  return b.take();
}

std::vector<Layer> layers_of(std::string_view model) {
  static const int r50[4] = {3, 4, 6, 3}, r101[4] = {3, 4, 23, 3};
  if (model == "resnet50") return resnet(r50);
  if (model == "resnet101") return resnet(r101);
  if (model == "vgg16") return vgg16();
  throw InvalidArgument(fmt::format("unknown model '{}' (resnet50 resnet101 vgg16)", model));
}

}  // namespace

std::vector<std::string> zoo_models() { return {"resnet50", "resnet101", "vgg16"}; }

Profile zoo_profile(std::string_view model, const ZooOptions& o) {
  if (!(o.images_per_s > 0) || o.batch < 1 || !(o.memory_bytes_per_s > 0))
    throw InvalidArgument("zoo: images per second, batch and memory bandwidth must be positive");
  const std::vector<Layer> layers = layers_of(model);
  int64_t param_bytes = 0;
  double backward_flops = 0;
  for (const auto& l : layers) {
    for (const auto& p : l.params) param_bytes += 4 * elements(p.second);
    backward_flops += (l.first ? 1 : 2) * l.flops;
  }
  const double step_ms = 1e3 * o.batch / o.images_per_s;
  // Momentum SGD reads weight, gradient and momentum and writes two of them.
  const double optimizer_ms = 1e3 * 5.0 * param_bytes / o.memory_bytes_per_s;
  const double compute = step_ms - optimizer_ms;
  const double forward_ms = compute / 3, backward_ms = compute - forward_ms;
  Profile p;
  p.program = fmt::format("{} (published throughput {} images/s, batch {})", model, o.images_per_s,
                          o.batch);
  p.source = "zoo: layer shapes + published throughput (lockstep plan zoo)";
  p.steps.assign(5, {step_ms, forward_ms, backward_ms, 0, optimizer_ms, o.batch});
  // Gradients in parameter order, each ready when backward (last layer
  // first) has done its share of FLOPs through that layer.
  std::vector<double> ready(layers.size());
  double done = 0;
  for (size_t i = layers.size(); i-- > 0;) {
    done += (layers[i].first ? 1 : 2) * layers[i].flops;
    ready[i] = backward_ms * done / backward_flops;
  }
  for (size_t i = 0; i < layers.size(); ++i)
    for (const auto& [name, shape] : layers[i].params)
      p.gradients.push_back({name, 4 * elements(shape), "f32", ready[i], shape});
  return p;
}

}  // namespace lockstep::plan
