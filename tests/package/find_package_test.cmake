# Installs the build into a scratch prefix, then configures, builds and runs
# a separate project that only does find_package(lockstep) on a C++17
# default, and (with LibTorch) compiles a C++17 LibTorch project using
# lockstep/torch headers: both need the exported cxx_std_20.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(LAST_OUTPUT "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G Ninja
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
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build_torch17)
message(STATUS "C++17 LibTorch consumer compiled as C++20")
