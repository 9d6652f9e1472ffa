// A character-level corpus: a text file's bytes, its vocabulary (the
// distinct bytes, sorted) and a fixed train/validation split (the first
// 90% trains, the last 10% validates), the same on every rank. Plain data,
// read once; not thread-safe only in the sense that it is never mutated.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::examples::gpt {

struct CharCorpus {
  std::vector<unsigned char> vocab;  // token id -> byte
  ::torch::Tensor train, val;        // token ids, int64, 1-D

  // Throws lockstep::InvalidArgument naming the file when it cannot be read
  // or is too short for two windows of `context` + 1 characters per split.
  static CharCorpus load(const std::string& path, int64_t context);

  int64_t vocab_size() const { return static_cast<int64_t>(vocab.size()); }
  std::string decode(const std::vector<int64_t>& ids) const;
  std::vector<int64_t> encode(const std::string& text) const;  // unknown bytes dropped
};

// `rows` random windows of `context` + 1 tokens from `tokens`, drawn from a
// generator seeded with `seed`: inputs [rows, context] and next-token
// targets [rows, context].
std::pair<::torch::Tensor, ::torch::Tensor> random_windows(const ::torch::Tensor& tokens,
                                                           int64_t rows, int64_t context,
                                                           uint64_t seed);

// The validation windows of group rank `rank` of `size`: consecutive
// non-overlapping windows of `tokens`, dealt round-robin.
std::pair<::torch::Tensor, ::torch::Tensor> split_windows(const ::torch::Tensor& tokens,
                                                          int64_t context, int rank, int size);

}  // namespace lockstep::examples::gpt
