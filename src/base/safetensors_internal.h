// Helpers the safetensors parser and writer share. Private to src/base.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {

// 'name', cut short (with its length) when a hostile name would flood a message.
std::string quote_name(std::string_view s);
// "[2, 3]"
std::string shape_text(const std::vector<int64_t>& shape);
// "F64 F32 F16 ...": what an error about an unknown dtype offers.
std::string supported_dtype_names();

}  // namespace lockstep
