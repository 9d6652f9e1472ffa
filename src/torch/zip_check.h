// Checking a zip archive's central directory before LibTorch's
// PyTorchStreamReader trusts it: that reader allocates each record's
// uncompressed size as the directory states it, so a hostile file of a few
// bytes could ask for terabytes. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace lockstep::torch::detail {

// Every record's full name -> size, after checking the directory lies inside
// the file and, with `stored_only` (what a reader that will extract records
// asks), that each record is stored uncompressed (as torch.save writes it)
// and lies inside the file. Throws lockstep::Error naming `path` and what is
// wrong (no end-of-directory record, a truncated directory, a compressed or
// oversized record).
std::map<std::string, uint64_t> checked_zip_records(const std::string& path,
                                                    bool stored_only = true);

}  // namespace lockstep::torch::detail
