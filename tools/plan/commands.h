// Sub-commands of `lockstep plan` (lockstep-plan) and helpers they share.
#pragma once

#include <string>
#include <vector>

#include "lockstep/plan/simulator.h"

namespace lockstep::plan_tool {

int predict_main(int argc, char** argv);   // lockstep plan --profile P --network N ...
int validate_main(int argc, char** argv);  // lockstep plan validate ... -- PROGRAM ARGS
int presets_main(int argc, char** argv);   // lockstep plan presets
int zoo_main(int argc, char** argv);       // lockstep plan zoo MODEL --images-per-s X
int layouts_main(int argc, char** argv);   // lockstep plan layouts --profile P --network N

// "1,2,4" or "1:1024" (powers of two) into a list of positive integers.
std::vector<int> parse_int_list(const std::string& text, const std::string& what);

// The cross-host transport of a network model: nccl, mpi or gloo, whichever
// it has (in that order), else "gloo".
std::string default_cross(const plan::NetworkModel& model);

// Human table row and JSON line of one prediction.
std::string prediction_header();
std::string prediction_row(const plan::StepPrediction& p);
std::string prediction_json(const plan::StepPrediction& p, const std::string& network);

}  // namespace lockstep::plan_tool
