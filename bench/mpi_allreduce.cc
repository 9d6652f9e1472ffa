// Open MPI's MPI_Allreduce over the same sizes and with the same statistics
// as `lockstep bench allreduce`, for the side-by-side comparison in
// compare_mpi.sh. Prints the same JSON keys (backend "openmpi").
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

size_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  std::string unit = end;
  if (unit == "KiB" || unit == "K")
    v *= 1024;
  else if (unit == "MiB" || unit == "M")
    v *= 1024 * 1024;
  else if (unit == "GiB" || unit == "G")
    v *= 1024.0 * 1024 * 1024;
  return static_cast<size_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t lo = 8, hi = 256u << 20;
  double seconds = 0.25;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--sizes")) {
      std::string s = argv[i + 1];
      auto c = s.find(':');
      lo = parse_size(s.substr(0, c).c_str());
      hi = c == std::string::npos ? lo : parse_size(s.substr(c + 1).c_str());
    } else if (!std::strcmp(argv[i], "--seconds")) {
      seconds = std::atof(argv[i + 1]);
    }
  }
  for (size_t bytes = std::max<size_t>(lo, 4); bytes <= hi; bytes *= 2) {
    size_t count = bytes / 4;
    std::vector<float> in(count, 1.0f), out(count);
    for (int i = 0; i < 3; ++i)
      MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < 3; ++i)
      MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    long iters = std::clamp<long>(
        static_cast<long>(seconds / std::max((MPI_Wtime() - t0) / 3, 1e-9)), 5, 20000);
    MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    std::vector<double> times(static_cast<size_t>(iters));
    for (auto& t : times) {
      double s = MPI_Wtime();
      MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      t = (MPI_Wtime() - s) * 1e6;
    }
    MPI_Allreduce(MPI_IN_PLACE, times.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_MAX,
                  MPI_COMM_WORLD);
    std::sort(times.begin(), times.end());
    double median = times[times.size() / 2];
    double p99 = times[std::min(times.size() - 1, times.size() * 99 / 100)];
    double algbw = bytes / (median * 1e3);
    double busbw = algbw * (size > 1 ? 2.0 * (size - 1) / size : 1.0);
    if (rank == 0)
      std::printf(
          "{\"op\":\"allreduce\",\"backend\":\"openmpi\",\"np\":%d,\"dtype\":\"f32\",\"bytes\":%zu,"
          "\"median_us\":%.3f,\"p99_us\":%.3f,\"algbw_gbps\":%.4f,\"busbw_gbps\":%.4f}\n",
          size, bytes, median, p99, algbw, busbw);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
