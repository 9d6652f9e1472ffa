// A character-level GPT (GPT-2's layout, Radford et al. 2019): token and
// position embeddings, pre-norm transformer blocks (LayerNorm, causal
// self-attention written with matmul / masked_fill / softmax, LayerNorm, a
// GELU MLP), a final LayerNorm and a head tied to the token embedding.
//
// Written for FullyShardedModel over the module: the embedding (with the
// tied head) and each block are FullyShardedUnits, the final LayerNorm is
// the root unit. The head cannot read the token embedding's weight from the
// model's code (a unit's parameters hold memory only inside its forward), so
// one module computes both uses (TokenEmbedding: a lookup for integer input,
// the projection onto the vocabulary for floating input) and is one unit
// that runs twice per forward (docs/parallelism.md, "Tied weights").
// Not thread-safe (a torch::nn::Module); the model owns its submodules.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "lockstep/parallel/fully_sharded.h"

namespace lockstep::examples::gpt {

struct GptConfig {
  int64_t vocab = 0;
  int64_t context = 64;  // the longest sequence (the position table's rows)
  int64_t d_model = 64;
  int64_t layers = 3;
  int64_t heads = 4;
  bool checkpoint_activations = false;  // recompute each block in backward
};

// ids [B, T] (integer) -> token + position embeddings [B, T, d];
// x [B, T, d] (floating) -> logits [B, T, vocab] with the same weight.
struct TokenEmbeddingImpl : ::torch::nn::Module {
  TokenEmbeddingImpl(int64_t vocab, int64_t context, int64_t d_model);
  ::torch::Tensor forward(const ::torch::Tensor& x);
  ::torch::nn::Embedding tok{nullptr};
  ::torch::Tensor pos;
};
// The holders are TORCH_MODULE spelled out: inside lockstep::, the macro's
// torch::nn names lockstep::torch::nn (see GhostBatchNorm's holders).
class TokenEmbedding
    : public ::torch::nn::ModuleHolder<TokenEmbeddingImpl> {  // TORCH_MODULE, spelled out
 public:
  using ::torch::nn::ModuleHolder<TokenEmbeddingImpl>::ModuleHolder;
  using Impl = TokenEmbeddingImpl;
};

struct CausalSelfAttentionImpl : ::torch::nn::Module {
  CausalSelfAttentionImpl(int64_t d_model, int64_t heads);
  ::torch::Tensor forward(const ::torch::Tensor& x);  // [B, T, d] -> [B, T, d]
  int64_t heads;
  ::torch::nn::Linear qkv{nullptr}, proj{nullptr};
};
class CausalSelfAttention
    : public ::torch::nn::ModuleHolder<CausalSelfAttentionImpl> {  // TORCH_MODULE, spelled out
 public:
  using ::torch::nn::ModuleHolder<CausalSelfAttentionImpl>::ModuleHolder;
  using Impl = CausalSelfAttentionImpl;
};

// x + attn(ln1(x)), then + mlp(ln2(x)).
struct BlockImpl : ::torch::nn::Module {
  BlockImpl(int64_t d_model, int64_t heads);
  ::torch::Tensor forward(const ::torch::Tensor& x);
  ::torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  CausalSelfAttention attn{nullptr};
  ::torch::nn::Linear fc{nullptr}, out{nullptr};
};
class Block : public ::torch::nn::ModuleHolder<BlockImpl> {  // TORCH_MODULE, spelled out
 public:
  using ::torch::nn::ModuleHolder<BlockImpl>::ModuleHolder;
  using Impl = BlockImpl;
};

struct GptImpl : ::torch::nn::Module {
  explicit GptImpl(const GptConfig& config);
  // ids [B, T], T <= context -> logits [B, T, vocab], in the units' compute
  // dtype (cast them for the loss).
  ::torch::Tensor forward(const ::torch::Tensor& ids);
  GptConfig config;
  lockstep::parallel::FullyShardedUnit wte{nullptr};         // TokenEmbedding, also the head
  std::vector<lockstep::parallel::FullyShardedUnit> blocks;  // h0, h1, ...
  ::torch::nn::LayerNorm ln_f{nullptr};                      // the root unit
};
class Gpt : public ::torch::nn::ModuleHolder<GptImpl> {  // TORCH_MODULE, spelled out
 public:
  using ::torch::nn::ModuleHolder<GptImpl>::ModuleHolder;
  using Impl = GptImpl;
};

}  // namespace lockstep::examples::gpt
