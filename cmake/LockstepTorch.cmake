# LibTorch, found once; every target that includes <torch/torch.h> calls
# lockstep_use_torch() so it links torch and reuses one precompiled header
# (a file including torch.h otherwise costs ~20 s of a 2-core machine).
find_package(Torch REQUIRED)
# Debian's TorchConfig puts -D_GLIBCXX_USE_CXX11_ABI etc. into TORCH_CXX_FLAGS.
separate_arguments(LOCKSTEP_TORCH_FLAGS UNIX_COMMAND "${TORCH_CXX_FLAGS}")

# A pip or conda LibTorch (2.x) carries copies of libraries lockstep also
# uses, in its own include directory (docs/gpu.md). Debian's LibTorch installs
# into the system include directory beside the system's fmt, so neither
# applies there and CPU builds do not change.
#  - fmt: its fmt headers (fmt 12 in LibTorch 2.11) can shadow the fmt
#    lockstep links, so torch translation units use fmt header-only: whichever
#    fmt they see, they need no fmt library (lockstep's headers pass only
#    std::string_view between layers, never fmt types).
#  - protobuf: libtorch_cpu.so exports its own protobuf (3.13 in 2.11), and a
#    second one in the same process clashes, so the data layer's protobuf
#    (tf.train.Example records) defaults to off (src/data/CMakeLists.txt).
get_target_property(_fmt_include_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
set(LOCKSTEP_TORCH_BUNDLES_FMT OFF)
set(LOCKSTEP_TORCH_BUNDLES_PROTOBUF OFF)
foreach(_dir IN LISTS TORCH_INCLUDE_DIRS)
  if(_dir IN_LIST _fmt_include_dirs OR _dir MATCHES "^/usr/(local/)?include/?$")
    continue()
  endif()
  if(EXISTS "${_dir}/fmt/format.h")
    set(LOCKSTEP_TORCH_BUNDLES_FMT ON)
  endif()
  if(EXISTS "${_dir}/google/protobuf/message.h")
    set(LOCKSTEP_TORCH_BUNDLES_PROTOBUF ON)
  endif()
endforeach()
if(LOCKSTEP_TORCH_BUNDLES_FMT)
  list(APPEND LOCKSTEP_TORCH_FLAGS -DFMT_HEADER_ONLY=1)
endif()
message(STATUS "lockstep LibTorch ${Torch_VERSION}: bundles fmt ${LOCKSTEP_TORCH_BUNDLES_FMT}, "
               "protobuf ${LOCKSTEP_TORCH_BUNDLES_PROTOBUF}")

# Two anchors: GCC refuses a precompiled header built with -fPIC in a
# -fPIE compile (and vice versa), and libraries get -fPIC while executables
# get -fPIE, so each kind reuses the header built with its own flags.
set(_pch_src ${CMAKE_BINARY_DIR}/lockstep_torch_pch.cc)
set(_pch_main ${CMAKE_BINARY_DIR}/lockstep_torch_pch_main.cc)
if(NOT EXISTS ${_pch_src})
  file(WRITE ${_pch_src} "// anchor for the shared torch precompiled header\n")
endif()
if(NOT EXISTS ${_pch_main})
  file(WRITE ${_pch_main} "int main() { return 0; }\n")
endif()
add_library(lockstep_torch_pch OBJECT ${_pch_src})
add_executable(lockstep_torch_pch_exe ${_pch_main})
set(_pch_anchors lockstep_torch_pch lockstep_torch_pch_exe)

# LibTorch test executables (every target under tests/) compile at -O0 -g1
# in an optimized build: their code is glue around the libraries under test,
# which keep the build type's flags, and the main build's from-scratch time
# is most of CI's. Measured on one test unity file (torch_local_test, one
# core): 36.5 s at -O2 -g, 16.7 s at -O0 -g1 with its own precompiled header
# (GCC refuses an -O2 header in an -O0 compile: __OPTIMIZE__), and the
# test binary ran its 47 tests in the same time. -DLOCKSTEP_FAST_TESTS=OFF
# compiles them like everything else.
option(LOCKSTEP_FAST_TESTS "Compile LibTorch test executables at -O0 -g1 in optimized builds" ON)
set(LOCKSTEP_TORCH_TEST_FLAGS "")
if(LOCKSTEP_FAST_TESTS AND NOT LOCKSTEP_SANITIZE AND CMAKE_BUILD_TYPE MATCHES "^(RelWithDebInfo|Release)$")
  set(LOCKSTEP_TORCH_TEST_FLAGS -O0 -g1)
endif()
add_executable(lockstep_torch_pch_test ${_pch_main})
target_compile_options(lockstep_torch_pch_test PRIVATE ${LOCKSTEP_TORCH_TEST_FLAGS})
list(APPEND _pch_anchors lockstep_torch_pch_test)

set_target_properties(lockstep_torch_pch_exe lockstep_torch_pch_test PROPERTIES
                      RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/pch)
foreach(anchor IN LISTS _pch_anchors)
  target_link_libraries(${anchor} PRIVATE ${TORCH_LIBRARIES})
  target_compile_options(${anchor} PRIVATE ${LOCKSTEP_TORCH_FLAGS})
  target_precompile_headers(${anchor} PRIVATE <torch/torch.h>)
endforeach()

# Even with that header a torch source costs about 6 s of CPU before its first
# line (loading the 0.8 GB header, emitting torch's inline functions again),
# so a LibTorch target, like every target, compiles its sources 8 to a file
# (LOCKSTEP_UNITY, a CMake unity build). Measured in CPU time on one core:
# lars, lamb, larc and novograd.cc took 47.6 s compiled apart and 15.7 s as one.
function(lockstep_use_torch target)
  target_link_libraries(${target} PUBLIC ${TORCH_LIBRARIES})
  target_compile_options(${target} PRIVATE ${LOCKSTEP_TORCH_FLAGS})
  get_target_property(_type ${target} TYPE)
  get_target_property(_dir ${target} SOURCE_DIR)
  string(FIND "${_dir}/" "${PROJECT_SOURCE_DIR}/tests/" _in_tests)
  set(_test_exe OFF)
  if(_type STREQUAL "EXECUTABLE" AND _in_tests EQUAL 0)
    set(_test_exe ON)
    target_compile_options(${target} PRIVATE ${LOCKSTEP_TORCH_TEST_FLAGS})
  endif()
  if(NOT LOCKSTEP_SANITIZE)
    if(_test_exe)
      target_precompile_headers(${target} REUSE_FROM lockstep_torch_pch_test)
    elseif(_type STREQUAL "EXECUTABLE")
      target_precompile_headers(${target} REUSE_FROM lockstep_torch_pch_exe)
    else()
      target_precompile_headers(${target} REUSE_FROM lockstep_torch_pch)
    endif()
  endif()
endfunction()
