// Fuzz tree only: a stand-in for LibTorch's <torch/torch.h> holding the one
// thing the restricted unpickler (src/torch/state_dict_unpickle.cc) takes
// from LibTorch, the ScalarType tags of the ten storage classes. The fuzz
// tree is configured without LibTorch (scripts/fuzz.sh), so this lets
// lockstep-fuzz-torch-save compile the real unpickler source instead of a
// copy. Should that source start to call LibTorch, this tree fails to
// compile, naming the missing symbol: then fuzz it from a tree with LibTorch
// or move the call out of the parser.
#pragma once

#include <cstdint>

namespace torch {

enum class ScalarType : int8_t {
  Byte,
  Char,
  Short,
  Int,
  Long,
  Half,
  Float,
  Double,
  Bool,
  BFloat16
};

inline constexpr ScalarType kByte = ScalarType::Byte, kChar = ScalarType::Char,
                            kShort = ScalarType::Short, kInt = ScalarType::Int,
                            kLong = ScalarType::Long, kHalf = ScalarType::Half,
                            kFloat = ScalarType::Float, kDouble = ScalarType::Double,
                            kBool = ScalarType::Bool, kBFloat16 = ScalarType::BFloat16;

}  // namespace torch
