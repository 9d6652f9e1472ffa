// The rows and JSON lines of layout predictions (plan/layouts.h), shared by
// `lockstep plan layouts` and `lockstep bench train`.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "lockstep/plan/layouts.h"

namespace lockstep::plan_tool {

std::string layout_header();
std::string layout_row(const plan::LayoutPrediction& p);
// Every term of one prediction; `recommended` marks the ranking's first.
nlohmann::json layout_json(const plan::LayoutPrediction& p, const plan::ThreadScaling& scaling,
                           bool recommended);
// "serial fraction 0.150 (default: not measured), contention 0.000 per extra worker".
std::string describe_scaling(const plan::ThreadScaling& scaling);

}  // namespace lockstep::plan_tool
