#include "gpt/text.h"

#include <fmt/format.h>

#include <array>
#include <fstream>
#include <iterator>

#include "lockstep/base/error.h"

namespace lockstep::examples::gpt {

using ::torch::Tensor;

CharCorpus CharCorpus::load(const std::string& path, int64_t context) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InvalidArgument(
        fmt::format("lockstep-gpt: cannot read --text '{}'; give a readable "
                    "text file (the default ships with Debian's base-files)",
                    path));
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const auto n = static_cast<int64_t>(text.size());
  const int64_t val_begin = n * 9 / 10;
  if (n - val_begin < 2 * (context + 1))
    throw InvalidArgument(fmt::format(
        "lockstep-gpt: --text '{}' has {} bytes, too few for --context {} (its last 10% must hold "
        "two windows of context + 1 characters); give a longer text or a shorter --context",
        path, n, context));
  CharCorpus c;
  std::array<int64_t, 256> id{};
  id.fill(-1);
  for (unsigned char ch : text) id[ch] = 0;
  for (int b = 0; b < 256; ++b)
    if (id[b] == 0) {
      id[b] = static_cast<int64_t>(c.vocab.size());
      c.vocab.push_back(static_cast<unsigned char>(b));
    }
  Tensor all = ::torch::empty({n}, ::torch::kInt64);
  auto* out = all.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) out[i] = id[static_cast<unsigned char>(text[i])];
  c.train = all.narrow(0, 0, val_begin);
  c.val = all.narrow(0, val_begin, n - val_begin);
  return c;
}

std::string CharCorpus::decode(const std::vector<int64_t>& ids) const {
  std::string s;
  for (int64_t i : ids) s.push_back(static_cast<char>(vocab.at(static_cast<size_t>(i))));
  return s;
}

std::vector<int64_t> CharCorpus::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  for (unsigned char ch : text)
    for (size_t i = 0; i < vocab.size(); ++i)
      if (vocab[i] == ch) ids.push_back(static_cast<int64_t>(i));
  return ids;
}

std::pair<Tensor, Tensor> random_windows(const Tensor& tokens, int64_t rows, int64_t context,
                                         uint64_t seed) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(seed);
  Tensor start = ::torch::randint(tokens.size(0) - context, {rows, 1}, g);
  Tensor index = start + ::torch::arange(context + 1).unsqueeze(0);  // [rows, context + 1]
  Tensor w = tokens.index({index});
  return {w.narrow(1, 0, context), w.narrow(1, 1, context)};
}

std::pair<Tensor, Tensor> split_windows(const Tensor& tokens, int64_t context, int rank, int size) {
  const int64_t windows = (tokens.size(0) - 1) / context;
  Tensor mine = ::torch::arange(rank, windows, size);
  Tensor index = mine.unsqueeze(1) * context + ::torch::arange(context + 1).unsqueeze(0);
  Tensor w = tokens.index({index});
  return {w.narrow(1, 0, context), w.narrow(1, 1, context)};
}

}  // namespace lockstep::examples::gpt
