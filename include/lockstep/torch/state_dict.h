// Model weights in the files other tools use: PyTorch's `torch.save(
// model.state_dict())` zip (.pt/.pth/.bin), safetensors, and the `model` part
// of a lockstep checkpoint (save_checkpoint), read and written by name.
//
// PyTorch's format (since 1.6) is a zip of `<name>/data.pkl`, a pickle of an
// OrderedDict name -> tensor, and one raw little-endian record
// `<name>/data/<key>` per storage. Pickles are code in Python; this reader
// runs none: Note [Restricted unpickler] in src/torch/state_dict_pickle.h
// lists the few opcodes and globals it accepts and refuses every other one by
// name, checks every tensor against its storage and every record against the
// file before reading, so a hostile file can neither run code nor make it
// allocate more than the file's own size. Weights only: a state_dict of
// tensors (no optimizer state, no Python objects).
//
// Stateless functions; thread-safe for distinct files. Tensors returned are
// CPU tensors the caller owns; the ones written are read, never modified.
// Errors are lockstep::Error naming the file and the problem
// (lockstep::InvalidArgument for an unsupported dtype or extension).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "lockstep/torch/safetensors.h"  // NamedTensors, declared once there

namespace lockstep::torch {

// A torch.save(state_dict) file: its tensors in the file's order (views of
// one storage share it, as in Python). dtypes: float32/64, float16, bfloat16,
// int64/32/16, int8, uint8, bool.
NamedTensors read_torch_state_dict(const std::string& path);
// Writes what torch.load reads back as an OrderedDict (each tensor its own
// contiguous storage); atomic (write_file_atomically).
void write_torch_state_dict(const std::string& path, const NamedTensors& tensors);

// The module's parameters, then its buffers, under PyTorch's dotted names,
// detached (they share the module's memory).
NamedTensors state_dict(const ::torch::nn::Module& module);

enum class WeightsFormat { kTorchSave, kSafetensors, kLockstepCheckpoint };
const char* format_name(WeightsFormat format);
// By content: a zip with `constants.pkl` is a LibTorch archive (a lockstep
// checkpoint), another zip a torch.save file, anything else safetensors.
WeightsFormat detect_weights_format(const std::string& path);
// By extension, for writing: .safetensors, or .pt/.pth/.bin (torch.save).
WeightsFormat format_for_extension(const std::string& path);

// The weights of a file of any of the three formats, detected by content;
// of a lockstep checkpoint, the model's parameters and buffers.
NamedTensors read_weights(const std::string& path);
// Writes a .safetensors or .pt/.pth/.bin file (by extension), atomically.
void write_weights(const std::string& path, const NamedTensors& tensors);

// Loads the weights of a file of any format into `module`: every name, shape
// and dtype is checked first (check_state_matches); on a mismatch it throws
// naming it and the module is unchanged. A dtype difference is an error too
// (convert the file, e.g. with `lockstep convert checkpoint`, or the model).
// Values are copied into the module's tensors under NoGradGuard.
void load_state_dict(const std::string& path, ::torch::nn::Module& module);
// state_dict(module) to a .safetensors or .pt/.pth/.bin file (by extension).
void save_state_dict(const std::string& path, const ::torch::nn::Module& module);

}  // namespace lockstep::torch
