// The HDF5 source against corrupt files from fuzz/corpus/hdf5 (each one a
// fuzzer find, or crafted from an h5py file): every one is refused at open
// with an Error naming the file, and none crashes the process.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "lockstep/base/error.h"
#include "lockstep/data/source.h"

namespace lockstep::data {
namespace {

std::string corrupt_open_error(const SourceSpec& spec) {
  try {
    open_source(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The fuzzer's second find: a chunk index giving a 32-byte chunk a stored
// size of 3.5 GB, which libhdf5 allocated to read it.
TEST(SourceCorruptHdf5, ChunkStoredSizeBeyondTheFileIsRefusedAtOpen) {
  std::string h5 = std::string(LOCKSTEP_HDF5_CORPUS) + "/corrupt-chunk-size.h5";
  std::string error = corrupt_open_error({{h5}});
  EXPECT_NE(error.find(h5), std::string::npos) << error;
  EXPECT_NE(error.find("dataset '/images' claims 3495952492 stored bytes in a file of 8011"),
            std::string::npos)
      << error;
}

// CI's fuzzer find: labels never written read as the fill value, and a fill
// message shorter than the dtype (4 bytes for int64 here, crafted from an
// h5py file) made libhdf5 read past its own buffer. Refused at open.
TEST(SourceCorruptHdf5, FillValueShorterThanTheDtypeIsRefusedAtOpen) {
  std::string h5 = std::string(LOCKSTEP_HDF5_CORPUS) + "/short-fill-value.h5";
  std::string error = corrupt_open_error({{h5}});
  EXPECT_NE(error.find(h5), std::string::npos) << error;
  EXPECT_NE(error.find("dataset '/labels' promises 64 bytes but the file stores 0: it was "
                       "created but never (fully) written"),
            std::string::npos)
      << error;
}

// A fuzzer find (after the fill-value fix): the chunk index of unfiltered
// int64 labels gives their second chunk 1 stored byte; libhdf5 read it into
// a buffer of that size and copied a whole 32-byte chunk out of it.
TEST(SourceCorruptHdf5, UnfilteredChunkShorterThanAChunkIsRefusedAtOpen) {
  std::string h5 = std::string(LOCKSTEP_HDF5_CORPUS) + "/short-chunk.h5";
  std::string error = corrupt_open_error({{h5}});
  EXPECT_NE(error.find(h5), std::string::npos) << error;
  EXPECT_NE(error.find("dataset '/labels' stores 1 bytes for the chunk at element 4, where an "
                       "uncompressed chunk holds 32: its chunk index is corrupt"),
            std::string::npos)
      << error;
}

// A fuzzer find: a 2 KB file whose root group's local heap claims 1.4 GB.
// libhdf5 allocates that much to read it (a lazy mmap that the failed read
// never touches), and the open is an Error naming the file as corrupt, not
// a missing dataset (scripts/fuzz.sh says what the allocation cost under
// ASan).
TEST(SourceCorruptHdf5, HugeLocalHeapIsAnErrorNamingTheFileCorrupt) {
  std::string h5 = std::string(LOCKSTEP_HDF5_CORPUS) + "/huge-local-heap.h5";
  std::string error = corrupt_open_error({{h5}});
  EXPECT_NE(error.find(h5 + ": cannot look up the image dataset '/images'"), std::string::npos)
      << error;
  EXPECT_NE(error.find("the file is corrupt"), std::string::npos) << error;
}

// Note [HDF5 probe] at work: a symbol table whose local heap is corrupt (a
// fuzzer find) makes libhdf5 1.10 read through NULL in H5G__stab_lookup. The probe
// process dies of it, the open is an Error naming the file, and a SIGSEGV
// handler of the program (a crash reporter) never runs for it: the probe
// resets the handlers before it touches the file.
int g_crash_pipe = -1;

void crash_reporter(int) {
  [[maybe_unused]] ssize_t n = ::write(g_crash_pipe, "x", 1);
  ::_exit(99);
}

TEST(SourceCorruptHdf5, MetadataThatCrashesLibhdf5IsAnErrorAndNoCrashHandlerRuns) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
  g_crash_pipe = fds[1];
  struct sigaction reporter {
  }, previous{};
  reporter.sa_handler = crash_reporter;
  ASSERT_EQ(::sigaction(SIGSEGV, &reporter, &previous), 0);
  std::string h5 = std::string(LOCKSTEP_HDF5_CORPUS) + "/probe-null-heap.h5";
  std::string error = corrupt_open_error({{h5}});
  ::sigaction(SIGSEGV, &previous, nullptr);
  char byte = 0;
  ssize_t reported = ::read(fds[0], &byte, 1);
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_NE(error.find(h5), std::string::npos) << error;
  EXPECT_NE(error.find("libhdf5 crashed (Segmentation fault) reading the file's metadata in a "
                       "probe process"),
            std::string::npos)
      << error;
  EXPECT_EQ(reported, -1) << "the program's SIGSEGV handler ran for the probe's crash";
}

}  // namespace
}  // namespace lockstep::data
