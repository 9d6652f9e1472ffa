# Warnings and sanitizers shared by every lockstep target.
add_library(lockstep_warnings INTERFACE)
target_compile_options(lockstep_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter)
# clang checks the LOCKSTEP_GUARDED_BY / LOCKSTEP_REQUIRES annotations
# (include/lockstep/base/mutex.h); CI's fuzz build (scripts/fuzz.sh) is a
# clang build that compiles comm and engine, so a lock misuse fails CI. GCC has no such analysis (the macros expand to nothing).
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(lockstep_warnings INTERFACE -Wthread-safety -Werror=thread-safety)
endif()

if(LOCKSTEP_SANITIZE)
  add_compile_options(-fsanitize=${LOCKSTEP_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${LOCKSTEP_SANITIZE})
endif()

include(LockstepPrivateDeps)

# lockstep_library(<layer> SOURCES ... PUBLIC_DEPS ... PRIVATE_DEPS ...): one
# library per layer, exported as lockstep::<layer>; PRIVATE_DEPS stay out of
# the installed package's requirements (cmake/LockstepPrivateDeps.cmake). Every target carries cxx_std_20 in its usage
# requirements: the public headers need C++20 (docs/package.md), so CMake
# compiles a consumer as C++20 whatever its CMAKE_CXX_STANDARD says.
function(lockstep_library layer)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(lockstep_${layer} ${ARG_SOURCES})
  add_library(lockstep::${layer} ALIAS lockstep_${layer})
  set_target_properties(lockstep_${layer} PROPERTIES EXPORT_NAME ${layer}
                        OUTPUT_NAME lockstep_${layer})
  target_compile_features(lockstep_${layer} PUBLIC cxx_std_20)
  target_include_directories(lockstep_${layer} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(lockstep_${layer} PUBLIC ${ARG_PUBLIC_DEPS})
  lockstep_link_private(lockstep_${layer} ${ARG_PRIVATE_DEPS})
  target_link_libraries(lockstep_${layer} PRIVATE $<BUILD_INTERFACE:lockstep_warnings>)
  set_property(GLOBAL APPEND PROPERTY LOCKSTEP_EXPORTED_TARGETS lockstep_${layer})
endfunction()
