// Groups and meshes: coordinates, membership, collectives confined to a group,
// and the errors for bad factorisations.
#include <gmock/gmock.h>

#include "lockstep/base/error.h"
#include "lockstep/parallel/mesh.h"
#include "torch/helpers.h"

namespace lockstep::parallel {
namespace {

using lockstep::torch::testing::run_torch_workers;
namespace lt = lockstep::torch;

TEST(MeshParse, AcceptsBothSpellings) {
  auto dims = Mesh::parse_dims("data=2,tensor=3", 6);
  ASSERT_EQ(dims.size(), 2u);
  EXPECT_EQ(dims[0].name, "data");
  EXPECT_EQ(dims[1].size, 3);
  EXPECT_EQ(Mesh::parse_dims("data:1 pipeline:4", 4).size(), 2u);
}

TEST(MeshParse, BadFactorisationsNameTheProblem) {
  auto message = [](const char* spec, int world) {
    try {
      Mesh::parse_dims(spec, world);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message("data=2,tensor=2", 6),
              ::testing::HasSubstr("covers 4 rank(s) but the job has 6"));
  EXPECT_THAT(message("data=0,tensor=2", 2), ::testing::HasSubstr("data=0 must be at least 1"));
  EXPECT_THAT(message("data=2,data=1", 2), ::testing::HasSubstr("'data' is given twice"));
  EXPECT_THAT(message("data=two", 2), ::testing::HasSubstr("is not NAME=SIZE"));
  EXPECT_THAT(message("", 2), ::testing::HasSubstr("no dimensions"));
}

TEST(Mesh, SingleProcessIsItsOwnMesh) {
  Mesh mesh({{"data", 1}, {"tensor", 1}});
  EXPECT_EQ(mesh.coordinate("tensor"), 0);
  EXPECT_EQ(mesh.group("data").size(), 1);
  EXPECT_TRUE(mesh.group("data").is_world());
  EXPECT_EQ(mesh.size("pipeline"), 1);
  EXPECT_THROW(mesh.group("pipeline"), InvalidArgument);
}

// Four ranks as data=2 x tensor=2: coordinates, groups, and collectives that
// stay inside each group.
TEST(Mesh, DataByTensorOnFourRanks) {
  run_torch_workers(4, [] {
    Mesh mesh = Mesh::parse("data=2,tensor=2");
    const int r = lt::rank();
    EXPECT_EQ(mesh.coordinate("data"), r / 2);
    EXPECT_EQ(mesh.coordinate("tensor"), r % 2);
    EXPECT_EQ(mesh.group("tensor").ranks(), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    EXPECT_EQ(mesh.group("data").ranks(), (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_EQ(mesh.group("tensor").rank(), r % 2);
    EXPECT_EQ(mesh.rank_at({1, 0}), 2);
    auto t = ::torch::full({3}, static_cast<double>(r), ::torch::kFloat64);
    auto in_tensor = lt::allreduce(
        t, "mesh.t", {.op = lt::ReduceOp::kSum, .process_set = mesh.group("tensor").id()});
    EXPECT_EQ(in_tensor[0].item<double>(), (r / 2 * 2) * 2 + 1);
    auto in_data = lt::allreduce(
        t, "mesh.d", {.op = lt::ReduceOp::kSum, .process_set = mesh.group("data").id()});
    EXPECT_EQ(in_data[0].item<double>(), (r % 2) * 2 + 2);
    auto scattered =
        lt::reduce_scatter(::torch::arange(4, ::torch::kFloat64), "mesh.rs",
                           {.op = lt::ReduceOp::kSum, .process_set = mesh.group("data").id()});
    EXPECT_TRUE(scattered.equal(
        ::torch::arange(4, ::torch::kFloat64).narrow(0, 2 * mesh.coordinate("data"), 2) * 2));
    // A group this rank is not in: it still takes part in creating it.
    auto odd = Group::create({1, 3});
    EXPECT_EQ(odd.is_member(), r % 2 == 1);
    EXPECT_EQ(odd.group_rank_of(3), 1);
    EXPECT_THROW(Group::create({0, 0}), InvalidArgument);
    EXPECT_THROW(Group::create({0, 4}), InvalidArgument);
  });
}

}  // namespace
}  // namespace lockstep::parallel
