# CUDA and NCCL, found, never required (docs/gpu.md, docs/backends.md).
#
# Defines
#   LOCKSTEP_WITH_CUDA   option; default ON when the CUDA toolkit (CUDAToolkit)
#                        AND NCCL are both found AND there is a use for them
#                        (the LibTorch found has CUDA; without LibTorch: a GPU
#                        driver, /dev/nvidiactl), OFF otherwise. ON without
#                        the toolkit or NCCL is a configure error naming what
#                        is missing.
#   LOCKSTEP_NCCL_INCLUDE_DIR, LOCKSTEP_NCCL_LIBRARY   cache: where nccl.h and
#                        the library were found (set them to override).
#   LOCKSTEP_NCCL_VERSION  "2.28.9", read from nccl.h (empty if unknown).
#   lockstep::nccl_lib   imported target (include dir + library), when found.
#   CUDA::cudart         from find_package(CUDAToolkit), when found.
#   lockstep_use_cuda(<target>)  links CUDA::cudart and lockstep::nccl_lib
#                        privately and adds LOCKSTEP_WITH_CUDA=1; a no-op when
#                        LOCKSTEP_WITH_CUDA is OFF.
#
# NCCL is looked for, in order: the NCCL_ROOT / NCCL_HOME cache variables or
# environment variables; the Python wheel `nvidia-nccl` (pip install
# nvidia-nccl-cu*; its lib/ holds only libnccl.so.2, no libnccl.so link);
# CUDA's own prefix; the usual system paths. Include this file after
# LibTorch is found (a CUDA LibTorch finds the toolkit itself first).
include_guard(GLOBAL)

find_package(CUDAToolkit QUIET)

# The wheel's prefix, from the Python that pip would use. Silent when there is
# no Python or no wheel.
function(_lockstep_nccl_wheel_prefix out)
  set(${out} "" PARENT_SCOPE)
  find_program(_lockstep_python NAMES python3 python)
  if(NOT _lockstep_python)
    return()
  endif()
  execute_process(
    COMMAND ${_lockstep_python} -c
            "import nvidia.nccl as m; print(list(m.__path__)[0])"
    OUTPUT_VARIABLE prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(rc EQUAL 0 AND IS_DIRECTORY "${prefix}")
    set(${out} "${prefix}" PARENT_SCOPE)
  endif()
endfunction()

set(_nccl_hints "")
foreach(var NCCL_ROOT NCCL_HOME)
  if(${var})
    list(APPEND _nccl_hints "${${var}}")
  endif()
  if(DEFINED ENV{${var}})
    list(APPEND _nccl_hints "$ENV{${var}}")
  endif()
endforeach()
if(NOT LOCKSTEP_NCCL_INCLUDE_DIR OR NOT LOCKSTEP_NCCL_LIBRARY)
  _lockstep_nccl_wheel_prefix(_nccl_wheel)
  if(_nccl_wheel)
    list(APPEND _nccl_hints "${_nccl_wheel}")
  endif()
endif()
if(CUDAToolkit_FOUND)
  list(APPEND _nccl_hints ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_DIR})
endif()

find_path(LOCKSTEP_NCCL_INCLUDE_DIR nccl.h
  HINTS ${_nccl_hints} PATH_SUFFIXES include
  DOC "Directory holding nccl.h")
# libnccl.so.2 by its full name: the wheel ships no unversioned link.
# NAMES_PER_DIR: both names in one prefix before the next, so the library
# comes from the prefix the header came from (a toolkit may ship its own).
find_library(LOCKSTEP_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
  HINTS ${_nccl_hints} PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu
  DOC "The NCCL shared library (libnccl.so or libnccl.so.2)")

set(LOCKSTEP_NCCL_VERSION "")
if(LOCKSTEP_NCCL_INCLUDE_DIR AND EXISTS "${LOCKSTEP_NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${LOCKSTEP_NCCL_INCLUDE_DIR}/nccl.h" _nccl_defs
       REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${part} +([0-9]+)" _m "${_nccl_defs}")
    set(_nccl_${part} "${CMAKE_MATCH_1}")
  endforeach()
  if(NOT _nccl_MAJOR STREQUAL "")
    set(LOCKSTEP_NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
  endif()
endif()

# 2.14: non-blocking communicators and ncclCommFinalize (the transport's
# "never a hang" rests on them).
set(_nccl_found OFF)
if(LOCKSTEP_NCCL_INCLUDE_DIR AND LOCKSTEP_NCCL_LIBRARY)
  if(LOCKSTEP_NCCL_VERSION AND LOCKSTEP_NCCL_VERSION VERSION_LESS 2.14)
    message(STATUS "lockstep CUDA: NCCL ${LOCKSTEP_NCCL_VERSION} at ${LOCKSTEP_NCCL_INCLUDE_DIR} "
                   "is older than 2.14; not used")
  else()
    set(_nccl_found ON)
  endif()
endif()
# Default ON needs a use for it too: a LibTorch built with CUDA, or (for a
# build without LibTorch) a GPU driver on this machine. A CPU LibTorch beside
# an installed toolkit (a CPU CI image with CUDA for compile checks) stays
# OFF, so CPU builds do not change.
set(_cuda_use OFF)
if(LOCKSTEP_WITH_TORCH AND (TORCH_CUDA_LIBRARIES OR TARGET torch_cuda OR TARGET c10_cuda))
  set(_cuda_use ON)
elseif(NOT LOCKSTEP_WITH_TORCH AND EXISTS /dev/nvidiactl)
  set(_cuda_use ON)
endif()
set(_cuda_default OFF)
if(CUDAToolkit_FOUND AND _nccl_found AND _cuda_use)
  set(_cuda_default ON)
endif()
option(LOCKSTEP_WITH_CUDA "Build the CUDA parts: the NCCL transport, device buffers"
       ${_cuda_default})

if(LOCKSTEP_WITH_CUDA)
  if(NOT CUDAToolkit_FOUND)
    message(FATAL_ERROR "LOCKSTEP_WITH_CUDA is ON but no CUDA toolkit was found: set "
            "CUDAToolkit_ROOT (e.g. /usr/local/cuda) or turn the option off")
  endif()
  if(NOT _nccl_found)
    message(FATAL_ERROR "LOCKSTEP_WITH_CUDA is ON but NCCL was not found (nccl.h: "
            "${LOCKSTEP_NCCL_INCLUDE_DIR}, library: ${LOCKSTEP_NCCL_LIBRARY}): set NCCL_ROOT "
            "(or NCCL_HOME) to its prefix, or `pip install nvidia-nccl-cu13`, or turn the "
            "option off")
  endif()
  if(NOT TARGET lockstep::nccl_lib)
    add_library(lockstep::nccl_lib SHARED IMPORTED GLOBAL)
    set_target_properties(lockstep::nccl_lib PROPERTIES
      IMPORTED_LOCATION "${LOCKSTEP_NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${LOCKSTEP_NCCL_INCLUDE_DIR}")
  endif()
  message(STATUS "lockstep CUDA: toolkit ${CUDAToolkit_VERSION} (${CUDAToolkit_LIBRARY_DIR}), "
                 "NCCL ${LOCKSTEP_NCCL_VERSION} (${LOCKSTEP_NCCL_LIBRARY})")
else()
  set(_tk_found OFF)
  if(CUDAToolkit_FOUND)
    set(_tk_found ON)
  endif()
  message(STATUS "lockstep CUDA: off (toolkit found: ${_tk_found}, NCCL found: "
                 "${_nccl_found}, CUDA LibTorch or GPU driver: ${_cuda_use})")
endif()

function(lockstep_use_cuda target)
  if(NOT LOCKSTEP_WITH_CUDA)
    return()
  endif()
  # Private: the installed package records the library files, so a consumer
  # need not find CUDA or NCCL itself (cmake/LockstepPrivateDeps.cmake).
  lockstep_link_private(${target} CUDA::cudart lockstep::nccl_lib)
  target_compile_definitions(${target} PRIVATE LOCKSTEP_WITH_CUDA=1)
endfunction()
