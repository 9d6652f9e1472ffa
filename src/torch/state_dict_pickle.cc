// The pickle torch.save writes for a state_dict (protocol 2), and the dtype
// names both directions share.
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "torch/state_dict_pickle.h"

namespace lockstep::torch::detail {
namespace {

class Pickler {
 public:
  void op(char c) { out_.push_back(c); }
  void le(uint64_t v, size_t n) {
    for (size_t k = 0; k < n; ++k) out_.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
  }
  void str(const std::string& s) {  // BINUNICODE
    op('X');
    le(s.size(), 4);
    out_ += s;
  }
  void integer(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {  // BININT
      op('J');
      le(static_cast<uint64_t>(v), 4);
    } else {  // LONG1 of 8 bytes, two's complement
      op('\x8a');
      le(8, 1);
      le(static_cast<uint64_t>(v), 8);
    }
  }
  void global(const std::string& module, const std::string& name) {
    op('c');
    out_ += module + "\n" + name + "\n";
  }
  void int_tuple(const std::vector<int64_t>& values) {
    op('(');
    for (int64_t v : values) integer(v);
    op('t');
  }
  void ordered_dict() {  // collections.OrderedDict()
    global("collections", "OrderedDict");
    op(')');
    op('R');
  }
  // _rebuild_tensor_v2(persistent_load(('storage', cls, key, 'cpu', numel)),
  //                    offset, size, stride, False, OrderedDict())
  void tensor(const PickledTensor& t) {
    global("torch._utils", "_rebuild_tensor_v2");
    op('(');
    op('(');
    str("storage");
    global("torch", storage_class(t.dtype) + "Storage");
    str(t.storage_key);
    str("cpu");
    integer(t.storage_numel);
    op('t');
    op('Q');
    integer(t.offset);
    int_tuple(t.sizes);
    int_tuple(t.strides);
    op('\x89');
    ordered_dict();
    op('t');
    op('R');
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

struct DtypeRow {
  ::torch::ScalarType dtype;
  const char* storage;
};
constexpr DtypeRow kDtypes[] = {
    {::torch::kFloat, "Float"},       {::torch::kDouble, "Double"}, {::torch::kHalf, "Half"},
    {::torch::kBFloat16, "BFloat16"}, {::torch::kLong, "Long"},     {::torch::kInt, "Int"},
    {::torch::kShort, "Short"},       {::torch::kChar, "Char"},     {::torch::kByte, "Byte"},
    {::torch::kBool, "Bool"},
};

}  // namespace

std::string storage_class(::torch::ScalarType dtype) {
  for (const DtypeRow& row : kDtypes)
    if (row.dtype == dtype) return row.storage;
  throw InvalidArgument(
      fmt::format("a PyTorch state_dict file cannot hold dtype {} (it holds "
                  "float32/64, float16, bfloat16, int64/32/16, int8, uint8 and "
                  "bool): convert the tensor first",
                  c10::toString(dtype)));
}

size_t element_size(::torch::ScalarType dtype) { return c10::elementSize(dtype); }

std::string pickle_state_dict(const std::vector<PickledTensor>& tensors) {
  Pickler p;
  p.op('\x80');
  p.le(2, 1);  // PROTO 2, as torch.save
  p.ordered_dict();
  p.op('(');
  for (const PickledTensor& t : tensors) {
    p.str(t.name);
    p.tensor(t);
  }
  p.op('u');
  p.op('.');
  return p.take();
}

}  // namespace lockstep::torch::detail
