#include "gpt/model.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "lockstep/parallel/activation_checkpoint.h"

namespace lockstep::examples::gpt {

namespace nn = ::torch::nn;
namespace F = ::torch::nn::functional;
namespace lp = lockstep::parallel;
using ::torch::Tensor;

TokenEmbeddingImpl::TokenEmbeddingImpl(int64_t vocab, int64_t context, int64_t d_model)
    : tok(register_module("tok", nn::Embedding(vocab, d_model))),
      // GPT-2's N(0, 0.02): LibTorch's N(0, 1) would make the tied head's
      // first logits large and the first loss far above log(vocab).
      pos(register_parameter("pos", ::torch::randn({context, d_model}) * 0.02)) {
  ::torch::NoGradGuard no_grad;
  tok->weight.normal_(0, 0.02);
}

Tensor TokenEmbeddingImpl::forward(const Tensor& x) {
  if (x.is_floating_point()) return F::linear(x, tok->weight);  // the tied head
  return tok(x) + pos.narrow(0, 0, x.size(1));
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(int64_t d_model, int64_t heads)
    : heads(heads),
      qkv(register_module("qkv", nn::Linear(d_model, 3 * d_model))),
      proj(register_module("proj", nn::Linear(d_model, d_model))) {}

Tensor CausalSelfAttentionImpl::forward(const Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads;
  auto split = qkv(x).view({b, t, 3, heads, hd}).permute({2, 0, 3, 1, 4});  // [3, B, H, T, hd]
  Tensor q = split[0], k = split[1], v = split[2];
  Tensor scores = ::torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
  // Position i attends to positions <= i: the strict upper triangle is masked.
  auto future = ::torch::ones({t, t}, ::torch::dtype(::torch::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  Tensor y = ::torch::matmul(::torch::softmax(scores, -1), v);  // [B, H, T, hd]
  return proj(y.transpose(1, 2).reshape({b, t, d}));
}

BlockImpl::BlockImpl(int64_t d_model, int64_t heads)
    : ln1(register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({d_model})))),
      ln2(register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({d_model})))),
      attn(register_module("attn", CausalSelfAttention(d_model, heads))),
      fc(register_module("fc", nn::Linear(d_model, 4 * d_model))),
      out(register_module("out", nn::Linear(4 * d_model, d_model))) {}

Tensor BlockImpl::forward(const Tensor& x) {
  Tensor h = x + attn(ln1(x));
  return h + out(F::gelu(fc(ln2(h))));
}

GptImpl::GptImpl(const GptConfig& c) : config(c) {
  wte = register_module("wte", lp::fsdp_unit(TokenEmbedding(c.vocab, c.context, c.d_model)));
  for (int64_t i = 0; i < c.layers; ++i) {
    // Checkpointed inside the unit: the replay in backward runs while the
    // unit is gathered again (the unit's boundary gathers it first).
    auto unit = c.checkpoint_activations
                    ? lp::fsdp_unit(lp::Checkpointed(Block(c.d_model, c.heads)))
                    : lp::fsdp_unit(Block(c.d_model, c.heads));
    blocks.push_back(register_module(fmt::format("h{}", i), unit));
  }
  ln_f = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({c.d_model})));
}

Tensor GptImpl::forward(const Tensor& ids) {
  Tensor h = wte(ids);
  for (auto& block : blocks) h = block(h);
  return wte(ln_f(h));  // the head: the token embedding's weight
}

}  // namespace lockstep::examples::gpt
