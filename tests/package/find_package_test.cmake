# Installs the build into a scratch prefix, then configures, builds and runs
# a separate project that only does find_package(lockstep) on a C++17
# default, and (with LibTorch) a C++17 LibTorch program using lockstep::torch:
# both need the exported cxx_std_20. Both are configured with the CMake
# packages of lockstep's private dependencies hidden (issue 16.11: the
# package used to find_dependency() every one of them).
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(LAST_OUTPUT "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)

# Installed archives and programs carry no debug info (issue 30.6: 1.1 GB
# installed, 58-65 MB per consumer program).
if(NOT INSTALL_DEBUG_INFO AND READELF)
  file(GLOB installed ${WORK_DIR}/prefix/lib*/liblockstep_*.a ${WORK_DIR}/prefix/bin/lockstep)
  foreach(file IN LISTS installed)
    run(${READELF} -S --wide ${file})
    if(LAST_OUTPUT MATCHES "\\.debug_info")
      message(FATAL_ERROR "${file} was installed with its debug info")
    endif()
  endforeach()
endif()

# Protobuf cannot be hidden here: Debian's TorchConfig finds it itself. The
# check on the installed files below covers it.
set(private_packages nlohmann_json CLI11 OpenSSL ZLIB JPEG PNG HDF5 MPI Gloo)
set(hide_private "")
foreach(package IN LISTS private_packages)
  list(APPEND hide_private -DCMAKE_DISABLE_FIND_PACKAGE_${package}=ON)
endforeach()
file(GLOB package_files ${WORK_DIR}/prefix/lib*/cmake/lockstep/*.cmake)
foreach(file IN LISTS package_files)
  file(READ ${file} text)
  foreach(name nlohmann_json CLI11 OpenSSL ZLIB protobuf Protobuf JPEG PNG MPI gloo Gloo)
    if(text MATCHES "find_dependency\\(${name}|[^a-z_]${name}::|LINK_ONLY:${name}>")
      message(FATAL_ERROR "${file} still requires the private dependency ${name}")
    endif()
  endforeach()
endforeach()

run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G Ninja ${hide_private}
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
if(NOT LAST_OUTPUT MATCHES "sum=42")
  message(FATAL_ERROR "consumer printed '${LAST_OUTPUT}', expected sum=42")
endif()
message(STATUS "consumer: ${LAST_OUTPUT}")

if(NOT WITH_TORCH)
  return()
endif()
run(${CMAKE_COMMAND} -S ${CONSUMER_TORCH17_DIR} -B ${WORK_DIR}/build_torch17 -G Ninja
    ${hide_private} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)  # unoptimised: compiles faster
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build_torch17)
run(${WORK_DIR}/build_torch17/consumer_torch17)
if(NOT LAST_OUTPUT MATCHES "answer=42 sum=3")
  message(FATAL_ERROR "consumer_torch17 printed '${LAST_OUTPUT}', expected answer=42 sum=3")
endif()
message(STATUS "C++17 LibTorch consumer (Torch and lockstep only): ${LAST_OUTPUT}")
