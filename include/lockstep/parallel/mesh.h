// Mesh: the job's ranks factored into named dimensions, each rank with its
// coordinates and, per dimension, the group of ranks that differ from it only
// along that dimension (PyTorch's DeviceMesh, Megatron's parallel_state).
//
//   Mesh mesh({{"data", 2}, {"tensor", 2}});      // 4 ranks
//   mesh.group("tensor")   // rank 0: {0,1}; rank 2: {2,3}
//   mesh.group("data")     // rank 0: {0,2}; rank 1: {1,3}
//
// Ranks are laid out row-major, the last dimension fastest: put the dimension
// that talks most (tensor) last so its groups are neighbouring ranks.
//
// Construction is collective over every rank (it creates every group of every
// dimension: Group::create). Afterwards a Mesh is immutable and thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lockstep/torch/group.h"

namespace lockstep::parallel {

using Group = lockstep::torch::Group;

struct MeshDim {
  std::string name;
  int size = 1;
};

class Mesh {
 public:
  // Throws InvalidArgument (before any communication) when a size is < 1, a
  // name is empty or repeated, or the product differs from the world size.
  explicit Mesh(std::vector<MeshDim> dims);
  // "data=2,tensor=2" (also "data:2 tensor:2"); same checks.
  static Mesh parse(std::string_view spec);
  // The dimensions without creating groups (same checks against `world`).
  static std::vector<MeshDim> parse_dims(std::string_view spec, int world);

  const std::vector<MeshDim>& dims() const { return dims_; }
  bool has(std::string_view dim) const;
  // Size along `dim`; 1 when the mesh has no such dimension.
  int size(std::string_view dim) const;
  // This rank's coordinate along `dim`; 0 when absent.
  int coordinate(std::string_view dim) const;
  // This rank's group along `dim`; throws InvalidArgument naming the mesh's
  // dimensions when there is no such dimension.
  const Group& group(std::string_view dim) const;
  // Coordinates of any global rank, and back.
  std::vector<int> coordinates_of(int rank) const;
  int rank_at(const std::vector<int>& coordinates) const;
  // "data=2 x tensor=2".
  std::string describe() const;

 private:
  int index_of(std::string_view dim) const;  // -1 when absent
  std::vector<MeshDim> dims_;
  std::vector<int> coords_;
  std::vector<Group> groups_;
};

}  // namespace lockstep::parallel
