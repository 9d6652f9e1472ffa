// Profiles of published models, built from their layer shapes and a
// published single-device throughput, for planning hardware nobody has here
// (docs/plan.md reproduces Horovod's 512-GPU benchmark with them).
//
// The step (batch / images_per_s) is split as forward 1/3, backward 2/3
// (backward computes two products per layer, forward one), minus a
// memory-bound momentum-SGD update; backward visits layers in reverse and a
// layer's gradients are ready when its share of backward FLOPs is done.
// Pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lockstep/plan/profile.h"

namespace lockstep::plan {

std::vector<std::string> zoo_models();  // resnet50 resnet101 vgg16

struct ZooOptions {
  double images_per_s = 0;            // one device, the published figure
  int batch = 64;                     // per device
  double memory_bytes_per_s = 732e9;  // device memory bandwidth, for the optimizer update
};

// Throws InvalidArgument for an unknown model or non-positive throughput.
Profile zoo_profile(std::string_view model, const ZooOptions& options);

}  // namespace lockstep::plan
