// The parameter tensors of torchvision's ResNet-50, in registration (forward)
// order: 161 tensors, 25,557,032 parameters. Gradients become ready roughly
// in the reverse order during the backward pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::bench {

struct ParamShape {
  std::string name;
  std::vector<int64_t> shape;
  int64_t elements() const;
};

std::vector<ParamShape> resnet50_parameters();

inline constexpr size_t kResNet50Tensors = 161;
inline constexpr int64_t kResNet50Parameters = 25'557'032;

}  // namespace lockstep::bench
