// The pickle inside a PyTorch `torch.save(state_dict)` zip (`<name>/data.pkl`),
// read by a restricted unpickler and written by a matching pickler.
//
// Note [Restricted unpickler]
// Python's pickle is a small stack machine whose GLOBAL/REDUCE opcodes call
// any importable function, so a .pt file from elsewhere is code. This reader
// knows only what a state_dict pickle uses (PyTorch >= 1.6, protocol 2; the
// protocol 4 FRAME/MEMOIZE/SHORT_BINUNICODE/STACK_GLOBAL too):
//   globals  collections.OrderedDict, torch._utils._rebuild_tensor_v2,
//            torch._utils._rebuild_parameter, torch.<X>Storage for ten dtypes;
//   values   None, bools, ints (up to 64 bits), floats, strings, tuples,
//            lists, dicts, storages (BINPERSID) and tensors (REDUCE of
//            _rebuild_tensor_v2);
// and refuses any other opcode or global by name, before anything runs. Its
// memory is bounded by the stream: every value costs at least one opcode
// byte, nesting is capped at kMaxDepth, integers at 64 bits. The tensors it
// returns are descriptions (storage key, offset, sizes, strides) that the
// caller checks against the zip's records before reading any data.
//
// Stateless functions; thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::torch::detail {

// A tensor as the pickle describes it; offset, sizes and strides in elements.
struct PickledTensor {
  std::string name;
  std::string storage_key;  // the record <name>/data/<key>
  ::torch::ScalarType dtype = ::torch::kFloat;
  int64_t storage_numel = 0;
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
};

// Parses a state_dict pickle. Throws lockstep::Error "<what>: ..." naming the
// opcode, global, entry or byte offset that is refused; checks that every
// tensor's elements lie inside its storage's declared numel.
std::vector<PickledTensor> unpickle_state_dict(std::string_view bytes, const std::string& what);

// The pickle `torch.save` writes for an OrderedDict of these tensors (what
// torch.load reads back).
std::string pickle_state_dict(const std::vector<PickledTensor>& tensors);

// "Float" for kFloat ... as in torch.FloatStorage; throws InvalidArgument
// naming a dtype the format has no storage class for.
std::string storage_class(::torch::ScalarType dtype);
size_t element_size(::torch::ScalarType dtype);

}  // namespace lockstep::torch::detail
