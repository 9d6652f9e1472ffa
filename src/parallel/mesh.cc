#include "lockstep/parallel/mesh.h"

#include <fmt/format.h>

#include <charconv>
#include <set>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::parallel {
namespace {

void validate(const std::vector<MeshDim>& dims, int world) {
  if (dims.empty()) throw InvalidArgument("Mesh: no dimensions (e.g. data=2,tensor=2)");
  std::set<std::string> names;
  int64_t product = 1;
  std::string text;
  for (const auto& d : dims) {
    if (d.name.empty()) throw InvalidArgument("Mesh: a dimension has an empty name");
    if (!names.insert(d.name).second)
      throw InvalidArgument(fmt::format("Mesh: dimension '{}' is given twice", d.name));
    if (d.size < 1)
      throw InvalidArgument(
          fmt::format("Mesh: dimension {}={} must be at least 1", d.name, d.size));
    product *= d.size;
    text += fmt::format("{}{}={}", text.empty() ? "" : " x ", d.name, d.size);
  }
  if (product != world)
    throw InvalidArgument(
        fmt::format("Mesh: {} covers {} rank(s) but the job has {}; the sizes "
                    "must multiply to the world size",
                    text, product, world));
}

std::vector<int> strides_of(const std::vector<MeshDim>& dims) {
  std::vector<int> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i].size;
  return strides;
}

}  // namespace

std::vector<MeshDim> Mesh::parse_dims(std::string_view spec, int world) {
  std::vector<MeshDim> dims;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find_first_of(", ", pos);
    if (end == std::string_view::npos) end = spec.size();
    std::string_view item = spec.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find_first_of("=:");
    int size = 0;
    const char* first = item.data() + (eq == std::string_view::npos ? item.size() : eq + 1);
    const char* last = item.data() + item.size();
    auto [ptr, ec] = std::from_chars(first, last, size);
    if (eq == std::string_view::npos || ec != std::errc() || ptr != last || first == last)
      throw InvalidArgument(
          fmt::format("Mesh: '{}' in '{}' is not NAME=SIZE (e.g. "
                      "data=2,tensor=2)",
                      item, spec));
    dims.push_back({std::string(item.substr(0, eq)), size});
  }
  validate(dims, world);
  return dims;
}

Mesh Mesh::parse(std::string_view spec) { return Mesh(parse_dims(spec, torch::size())); }

Mesh::Mesh(std::vector<MeshDim> dims) : dims_(std::move(dims)) {
  validate(dims_, torch::size());
  coords_ = coordinates_of(torch::rank());
  const std::vector<int> strides = strides_of(dims_);
  const int world = torch::size();
  // Every rank creates every group in the same order (Group::create is
  // collective); each keeps the one it belongs to.
  for (size_t d = 0; d < dims_.size(); ++d) {
    Group mine;
    for (int base = 0; base < world; ++base) {
      if (coordinates_of(base)[d] != 0) continue;  // one group per line along d
      std::vector<int> ranks;
      for (int i = 0; i < dims_[d].size; ++i) ranks.push_back(base + i * strides[d]);
      Group g = Group::create(ranks);
      if (g.is_member()) mine = g;
    }
    groups_.push_back(mine);
  }
}

int Mesh::index_of(std::string_view dim) const {
  for (size_t i = 0; i < dims_.size(); ++i)
    if (dims_[i].name == dim) return static_cast<int>(i);
  return -1;
}

bool Mesh::has(std::string_view dim) const { return index_of(dim) >= 0; }

int Mesh::size(std::string_view dim) const {
  const int i = index_of(dim);
  return i < 0 ? 1 : dims_[i].size;
}

int Mesh::coordinate(std::string_view dim) const {
  const int i = index_of(dim);
  return i < 0 ? 0 : coords_[i];
}

const Group& Mesh::group(std::string_view dim) const {
  const int i = index_of(dim);
  if (i < 0) throw InvalidArgument(fmt::format("Mesh {} has no dimension '{}'", describe(), dim));
  return groups_[i];
}

std::vector<int> Mesh::coordinates_of(int rank) const {
  std::vector<int> out(dims_.size());
  for (size_t i = dims_.size(); i-- > 0;) {
    out[i] = rank % dims_[i].size;
    rank /= dims_[i].size;
  }
  return out;
}

int Mesh::rank_at(const std::vector<int>& coordinates) const {
  if (coordinates.size() != dims_.size())
    throw InvalidArgument(fmt::format("Mesh {}: {} coordinates given for {} dimensions", describe(),
                                      coordinates.size(), dims_.size()));
  int rank = 0;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (coordinates[i] < 0 || coordinates[i] >= dims_[i].size)
      throw InvalidArgument(fmt::format("Mesh {}: coordinate {} along {} is out of range [0, {})",
                                        describe(), coordinates[i], dims_[i].name, dims_[i].size));
    rank = rank * dims_[i].size + coordinates[i];
  }
  return rank;
}

std::string Mesh::describe() const {
  std::string text;
  for (const auto& d : dims_)
    text += fmt::format("{}{}={}", text.empty() ? "" : " x ", d.name, d.size);
  return text;
}

}  // namespace lockstep::parallel
