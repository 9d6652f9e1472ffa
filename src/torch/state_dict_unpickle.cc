// The restricted unpickler of Note [Restricted unpickler] (state_dict_pickle.h).
#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "lockstep/base/error.h"
#include "torch/state_dict_pickle.h"

namespace lockstep::torch::detail {
namespace {

constexpr int kMaxDepth = 64;    // a state_dict nests 4 deep; bounds the destructors' recursion
constexpr size_t kMaxDims = 64;  // dimensions of one tensor

enum class Kind {
  kNone,
  kBool,
  kInt,
  kFloat,
  kStr,
  kTuple,
  kList,
  kDict,
  kGlobal,
  kStorage,
  kTensor
};
enum class Global { kOrderedDict, kRebuildTensor, kRebuildParameter, kStorageClass };

struct Value;
using Ref = std::shared_ptr<Value>;

struct Value {
  Kind kind = Kind::kNone;
  int64_t i = 0;  // bool, int; Global
  double f = 0;
  std::string s;                                // str; storage key
  std::vector<Ref> items;                       // tuple, list; a dict's keys and values interleaved
  ::torch::ScalarType dtype = ::torch::kFloat;  // storage class, storage, tensor
  PickledTensor tensor;                         // tensor (name empty)
  int depth = 1;
};

struct StorageName {
  const char* name;
  ::torch::ScalarType dtype;
};
constexpr StorageName kStorages[] = {
    {"FloatStorage", ::torch::kFloat}, {"DoubleStorage", ::torch::kDouble},
    {"HalfStorage", ::torch::kHalf},   {"BFloat16Storage", ::torch::kBFloat16},
    {"LongStorage", ::torch::kLong},   {"IntStorage", ::torch::kInt},
    {"ShortStorage", ::torch::kShort}, {"CharStorage", ::torch::kChar},
    {"ByteStorage", ::torch::kByte},   {"BoolStorage", ::torch::kBool},
};

const char* kind_name(Kind k) {
  static const char* names[] = {"None", "bool", "int",    "float",   "str",   "tuple",
                                "list", "dict", "global", "storage", "tensor"};
  return names[static_cast<int>(k)];
}

class Unpickler {
 public:
  Unpickler(std::string_view bytes, const std::string& what) : in_(bytes), what_(what) {}
  // Empties every value made, so cycles a hostile stream built (a list
  // appended to itself) are freed and no destructor recurses.
  ~Unpickler() {
    for (const Ref& v : made_) v->items.clear();
  }
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;
  Ref run();

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Error(
        fmt::format("{}: {} (byte {} of data.pkl; only PyTorch state_dict pickles of "
                    "tensors are read: re-save it with torch.save(model.state_dict()))",
                    what_, why, op_at_));
  }
  std::string_view take(size_t n) {
    if (in_.size() - pos_ < n) fail(fmt::format("the pickle is truncated ({} bytes)", in_.size()));
    std::string_view out = in_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  uint64_t le(size_t n) {
    std::string_view b = take(n);
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(b[k])) << (8 * k);
    return v;
  }
  std::string line() {
    size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos) fail("the pickle is truncated inside a GLOBAL");
    std::string out(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }
  Ref make(Kind kind) {
    auto v = std::make_shared<Value>();
    v->kind = kind;
    made_.push_back(v);
    return v;
  }
  Ref make_int(int64_t i) {
    Ref v = make(Kind::kInt);
    v->i = i;
    return v;
  }
  void push(Ref v) { stack_.push_back(std::move(v)); }
  Ref pop() {
    if (stack_.size() <= floor()) fail("an opcode pops an empty stack");
    Ref v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Ref& top() {
    if (stack_.size() <= floor()) fail("an opcode reads an empty stack");
    return stack_.back();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<Ref> pop_mark() {
    if (marks_.empty()) fail("an opcode needs a MARK that is not there");
    std::vector<Ref> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()),
                           stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  Ref container(Kind kind, std::vector<Ref> items) {
    Ref v = make(kind);
    for (const Ref& item : items) v->depth = std::max(v->depth, item->depth + 1);
    if (v->depth > kMaxDepth) fail(fmt::format("values nest deeper than {}", kMaxDepth));
    v->items = std::move(items);
    return v;
  }
  void extend(Ref& target, std::vector<Ref> items, Kind want, const char* op) {
    if (target->kind != want) fail(fmt::format("{} on a {}", op, kind_name(target->kind)));
    if (want == Kind::kDict && items.size() % 2) fail(fmt::format("{} with an odd count", op));
    for (Ref& item : items) {
      target->depth = std::max(target->depth, item->depth + 1);
      if (target->depth > kMaxDepth) fail(fmt::format("values nest deeper than {}", kMaxDepth));
      target->items.push_back(std::move(item));
    }
  }
  void memo_put(uint64_t index) { memo_[index] = top(); }
  Ref memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail(fmt::format("memo entry {} is read before it is written", index));
    return it->second;
  }

  Ref global(const std::string& module, const std::string& name);
  Ref reduce(const Ref& callable, const Ref& args);
  Ref rebuild_tensor(const Ref& args);
  Ref persistent(const Ref& pid);
  bool step(uint8_t op);
  int64_t as_int(const Ref& v, const char* what) {
    if (v->kind != Kind::kInt)
      fail(fmt::format("{} is a {}, not an int", what, kind_name(v->kind)));
    return v->i;
  }
  std::vector<int64_t> int_tuple(const Ref& v, const char* what);

  std::string_view in_;
  const std::string& what_;
  size_t pos_ = 0, op_at_ = 0;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Ref> memo_;
  std::vector<Ref> made_;
};

Ref Unpickler::global(const std::string& module, const std::string& name) {
  Ref v = make(Kind::kGlobal);
  if (module == "collections" && name == "OrderedDict") {
    v->i = static_cast<int64_t>(Global::kOrderedDict);
  } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
    v->i = static_cast<int64_t>(Global::kRebuildTensor);
  } else if (module == "torch._utils" && name == "_rebuild_parameter") {
    v->i = static_cast<int64_t>(Global::kRebuildParameter);
  } else {
    for (const StorageName& s : kStorages) {
      if (module == "torch" && name == s.name) {
        v->i = static_cast<int64_t>(Global::kStorageClass);
        v->dtype = s.dtype;
        return v;
      }
    }
    fail(fmt::format("global {}.{} is not allowed", module, name));
  }
  return v;
}

std::vector<int64_t> Unpickler::int_tuple(const Ref& v, const char* what) {
  if (v->kind != Kind::kTuple)
    fail(fmt::format("{} is a {}, not a tuple", what, kind_name(v->kind)));
  if (v->items.size() > kMaxDims)
    fail(fmt::format("{} has more than {} dimensions", what, kMaxDims));
  std::vector<int64_t> out;
  for (const Ref& item : v->items) {
    out.push_back(as_int(item, what));
    if (out.back() < 0) fail(fmt::format("{} holds the negative {}", what, out.back()));
  }
  return out;
}

// _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]).
Ref Unpickler::rebuild_tensor(const Ref& args) {
  const auto& a = args->items;
  if (a.size() < 6 || a.size() > 7) fail("_rebuild_tensor_v2 takes 6 or 7 arguments");
  if (a[0]->kind != Kind::kStorage) fail("_rebuild_tensor_v2's first argument is not a storage");
  Ref v = make(Kind::kTensor);
  PickledTensor& t = v->tensor;
  t.storage_key = a[0]->s;
  t.dtype = a[0]->dtype;
  t.storage_numel = a[0]->i;
  t.offset = as_int(a[1], "the storage offset");
  t.sizes = int_tuple(a[2], "the size");
  t.strides = int_tuple(a[3], "the stride");
  if (t.offset < 0) fail(fmt::format("storage offset {} is negative", t.offset));
  if (t.sizes.size() != t.strides.size()) fail("size and stride differ in length");
  // The last element's index, in 128 bits so no size or stride can overflow it.
  __int128 last = t.offset;
  bool empty = false;
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    empty = empty || t.sizes[d] == 0;
    if (t.sizes[d] > 0) last += static_cast<__int128>(t.sizes[d] - 1) * t.strides[d];
  }
  if (!empty && last >= t.storage_numel)
    fail(
        fmt::format("a tensor of size {} at offset {} reaches past its storage '{}' of {} "
                    "elements",
                    fmt::join(t.sizes, "x"), t.offset, t.storage_key, t.storage_numel));
  return v;
}

// ('storage', torch.<X>Storage, key, location, numel)
Ref Unpickler::persistent(const Ref& pid) {
  const auto& a = pid->items;
  if (pid->kind != Kind::kTuple || a.size() != 5 || a[0]->kind != Kind::kStr ||
      a[0]->s != "storage")
    fail("a persistent id is not ('storage', class, key, location, numel)");
  if (a[1]->kind != Kind::kGlobal || a[1]->i != static_cast<int64_t>(Global::kStorageClass))
    fail("a persistent id names no storage class");
  if (a[2]->kind != Kind::kStr || a[2]->s.empty() || a[2]->s.size() > 64)
    fail("a storage key is not a short string");
  if (a[3]->kind != Kind::kStr) fail("a storage location is not a string");
  Ref v = make(Kind::kStorage);
  v->s = a[2]->s;
  v->dtype = a[1]->dtype;
  v->i = as_int(a[4], "a storage's numel");
  if (v->i < 0) fail(fmt::format("storage '{}' has the negative numel {}", v->s, v->i));
  return v;
}

Ref Unpickler::reduce(const Ref& callable, const Ref& args) {
  if (callable->kind != Kind::kGlobal)
    fail(fmt::format("REDUCE calls a {}", kind_name(callable->kind)));
  if (args->kind != Kind::kTuple) fail("REDUCE's arguments are not a tuple");
  switch (static_cast<Global>(callable->i)) {
    case Global::kOrderedDict:
      if (!args->items.empty()) fail("OrderedDict is called with arguments");
      return make(Kind::kDict);
    case Global::kRebuildTensor: return rebuild_tensor(args);
    case Global::kRebuildParameter:  // (tensor, requires_grad, hooks): the tensor itself
      if (args->items.size() != 3 || args->items[0]->kind != Kind::kTensor)
        fail("_rebuild_parameter's arguments are not (tensor, requires_grad, hooks)");
      return args->items[0];
    case Global::kStorageClass: break;
  }
  fail("a storage class is called (only persistent ids name storages)");
}

// One opcode; false at STOP. Opcode bytes as in CPython's Lib/pickle.py.
bool Unpickler::step(uint8_t op) {
  switch (op) {
    case 0x80: take(1); break;                         // PROTO
    case 0x95: take(8); break;                         // FRAME: the bytes follow inline
    case '(': marks_.push_back(stack_.size()); break;  // MARK
    case ')': push(make(Kind::kTuple)); break;         // EMPTY_TUPLE
    case ']': push(make(Kind::kList)); break;          // EMPTY_LIST
    case '}': push(make(Kind::kDict)); break;          // EMPTY_DICT
    case 'N': push(make(Kind::kNone)); break;          // NONE
    case 0x88:
    case 0x89: {  // NEWTRUE, NEWFALSE
      Ref v = make(Kind::kBool);
      v->i = op == 0x88;
      push(v);
      break;
    }
    case 'K': push(make_int(static_cast<int64_t>(le(1)))); break;  // BININT1
    case 'M': push(make_int(static_cast<int64_t>(le(2)))); break;  // BININT2
    case 'J': push(make_int(static_cast<int32_t>(le(4)))); break;  // BININT
    case 0x8a: {                                                   // LONG1: n-byte two's complement
      size_t n = static_cast<size_t>(le(1));
      if (n > 8) fail(fmt::format("LONG1 of {} bytes is past 64 bits", n));
      uint64_t raw = n ? le(n) : 0;
      if (n && n < 8 && (raw >> (8 * n - 1)) & 1) raw |= ~uint64_t{0} << (8 * n);
      push(make_int(static_cast<int64_t>(raw)));
      break;
    }
    case 'G': {  // BINFLOAT: big-endian double
      uint64_t bits = 0;
      for (char c : take(8)) bits = (bits << 8) | static_cast<uint8_t>(c);
      Ref v = make(Kind::kFloat);
      std::memcpy(&v->f, &bits, sizeof bits);
      push(v);
      break;
    }
    case 'X':
    case 0x8c: {  // BINUNICODE, SHORT_BINUNICODE
      Ref v = make(Kind::kStr);
      v->s = std::string(take(static_cast<size_t>(le(op == 'X' ? 4 : 1))));
      push(v);
      break;
    }
    case 't': push(container(Kind::kTuple, pop_mark())); break;  // TUPLE
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1, TUPLE2, TUPLE3
      std::vector<Ref> items(static_cast<size_t>(op - 0x84));
      for (size_t k = items.size(); k-- > 0;) items[k] = pop();
      push(container(Kind::kTuple, std::move(items)));
      break;
    }
    case 'c': {  // GLOBAL
      std::string module = line();
      push(global(module, line()));
      break;
    }
    case 0x93: {  // STACK_GLOBAL
      Ref name = pop(), module = pop();
      if (name->kind != Kind::kStr || module->kind != Kind::kStr)
        fail("STACK_GLOBAL of non-strings");
      push(global(module->s, name->s));
      break;
    }
    case 'R': {  // REDUCE
      Ref args = pop(), callable = pop();
      push(reduce(callable, args));
      break;
    }
    case 'Q': push(persistent(pop())); break;  // BINPERSID
    case 'q': memo_put(le(1)); break;          // BINPUT
    case 'r': memo_put(le(4)); break;          // LONG_BINPUT
    case 0x94: memo_put(memo_.size()); break;  // MEMOIZE
    case 'h': push(memo_get(le(1))); break;    // BINGET
    case 'j': push(memo_get(le(4))); break;    // LONG_BINGET
    case 's': {                                // SETITEM
      Ref value = pop(), key = pop();
      extend(top(), {key, value}, Kind::kDict, "SETITEM");
      break;
    }
    case 'u': {
      std::vector<Ref> items = pop_mark();
      extend(top(), std::move(items), Kind::kDict, "SETITEMS");
      break;
    }
    case 'a': {
      Ref item = pop();
      extend(top(), {item}, Kind::kList, "APPEND");
      break;
    }
    case 'e': {
      std::vector<Ref> items = pop_mark();
      extend(top(), std::move(items), Kind::kList, "APPENDS");
      break;
    }
    case 'b': {  // BUILD: a dict's attributes (_metadata)
      Ref state = pop();
      if (top()->kind != Kind::kDict || state->kind != Kind::kDict)
        fail("BUILD sets state on something other than the state_dict");
      break;
    }
    case '.': return false;  // STOP
    default: fail(fmt::format("opcode 0x{:02x} is not one a state_dict uses", op));
  }
  return true;
}

Ref Unpickler::run() {
  for (;;) {
    op_at_ = pos_;
    if (!step(static_cast<uint8_t>(le(1)))) break;
  }
  if (stack_.size() != 1 || !marks_.empty()) fail("STOP with a stack other than one value");
  return stack_.back();
}

}  // namespace

std::vector<PickledTensor> unpickle_state_dict(std::string_view bytes, const std::string& what) {
  Unpickler unpickler(bytes, what);
  Ref dict = unpickler.run();
  if (dict->kind != Kind::kDict)
    throw Error(
        fmt::format("{}: the pickle holds a {}, not a state_dict (save "
                    "model.state_dict(), not the model)",
                    what, kind_name(dict->kind)));
  std::vector<PickledTensor> out;
  std::unordered_set<std::string> names;
  for (size_t k = 0; k + 1 < dict->items.size(); k += 2) {
    const Value& key = *dict->items[k];
    const Value& value = *dict->items[k + 1];
    if (key.kind != Kind::kStr)
      throw Error(
          fmt::format("{}: a state_dict key is a {}, not a str", what, kind_name(key.kind)));
    if (value.kind != Kind::kTensor)
      throw Error(
          fmt::format("{}: entry '{}' is a {}, not a tensor (only a flat state_dict of "
                      "tensors is read: save model.state_dict() itself)",
                      what, key.s, kind_name(value.kind)));
    if (!names.insert(key.s).second)
      throw Error(fmt::format("{}: entry '{}' appears twice", what, key.s));
    out.push_back(value.tensor);
    out.back().name = key.s;
  }
  return out;
}

}  // namespace lockstep::torch::detail
