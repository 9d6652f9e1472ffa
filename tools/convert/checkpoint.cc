// `lockstep convert checkpoint IN OUT`: model weights between a lockstep
// checkpoint, a PyTorch torch.save(state_dict) file and a .safetensors file
// (IN by content, OUT by extension). The weights only: a checkpoint's
// optimizer state, position and RNG stay behind. Its own binary
// (lockstep-convert-checkpoint) because it links LibTorch and the data
// converters do not; `lockstep convert checkpoint` runs it.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "lockstep/base/error.h"
#include "lockstep/torch/state_dict.h"
#include "tools/common/cli_main.h"

namespace {

using namespace lockstep::torch;

struct Options {
  std::string in, out;
  bool list = false;
};

std::string shape_of(const ::torch::Tensor& t) {
  return t.dim() == 0 ? std::string("scalar") : fmt::format("{}", fmt::join(t.sizes(), "x"));
}

int list(const std::string& path) {
  const NamedTensors tensors = read_weights(path);
  uint64_t bytes = 0;
  for (const auto& [name, t] : tensors) {
    std::printf("%-48s %-10s %s\n", name.c_str(), c10::toString(t.scalar_type()),
                shape_of(t).c_str());
    bytes += t.numel() * t.element_size();
  }
  std::printf("%zu tensors, %.1f MB (%s)\n", tensors.size(), bytes / 1e6,
              format_name(detect_weights_format(path)));
  return 0;
}

int convert(const Options& o) {
  if (o.out.empty())
    throw lockstep::InvalidArgument("give OUT (a .safetensors or .pt/.pth/.bin file), or --list");
  const WeightsFormat to = format_for_extension(o.out);  // refuse a bad OUT before reading IN
  const WeightsFormat from = detect_weights_format(o.in);
  const NamedTensors tensors = read_weights(o.in);
  write_weights(o.out, tensors);
  std::printf("wrote the %zu tensors of %s (%s) to %s (%s); weights only\n", tensors.size(),
              o.in.c_str(), format_name(from), o.out.c_str(), format_name(to));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Convert model weights between a lockstep checkpoint, a PyTorch "
      "torch.save(model.state_dict()) file (.pt/.pth/.bin) and a .safetensors file. "
      "IN's format is read from its content, OUT's from its extension. Weights only: a "
      "checkpoint's optimizer state, step and RNG are not carried (a lockstep checkpoint "
      "is read, never written: load the weights into a job with --init-from)",
      "lockstep convert checkpoint"};
  Options o;
  app.add_option("IN", o.in, "a lockstep checkpoint, torch.save file or .safetensors file")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("OUT", o.out, "the file to write: .safetensors, or .pt/.pth/.bin (torch.save)");
  app.add_flag("--list", o.list, "print IN's tensors (name, dtype, shape) instead of converting");
  return lockstep::cli::run_command(app, argc, argv, "lockstep convert checkpoint", [&] {
    try {
      return o.list ? list(o.in) : convert(o);
    } catch (const lockstep::Error&) {
      throw;
    } catch (const c10::Error& e) {  // what LibTorch found and lockstep could not name earlier
      throw lockstep::Error(fmt::format("{}: {}", o.in, e.what_without_backtrace()));
    } catch (const std::exception& e) {  // e.g. bad_alloc: an exit status, never a signal
      throw lockstep::Error(fmt::format("{}: {}", o.in, e.what()));
    }
  });
}
