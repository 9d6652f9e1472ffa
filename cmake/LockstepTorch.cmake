# LibTorch, found once; every target that includes <torch/torch.h> calls
# lockstep_use_torch() so it links torch and reuses one precompiled header
# (a file including torch.h otherwise costs ~20 s of a 2-core machine).
find_package(Torch REQUIRED)
# Debian's TorchConfig puts -D_GLIBCXX_USE_CXX11_ABI etc. into TORCH_CXX_FLAGS.
separate_arguments(LOCKSTEP_TORCH_FLAGS UNIX_COMMAND "${TORCH_CXX_FLAGS}")

set(_pch_src ${CMAKE_BINARY_DIR}/lockstep_torch_pch.cc)
if(NOT EXISTS ${_pch_src})
  file(WRITE ${_pch_src} "// anchor for the shared torch precompiled header\n")
endif()
add_library(lockstep_torch_pch OBJECT ${_pch_src})
target_link_libraries(lockstep_torch_pch PUBLIC ${TORCH_LIBRARIES})
target_compile_options(lockstep_torch_pch PUBLIC ${LOCKSTEP_TORCH_FLAGS})
target_precompile_headers(lockstep_torch_pch PRIVATE <torch/torch.h>)

function(lockstep_use_torch target)
  target_link_libraries(${target} PUBLIC ${TORCH_LIBRARIES})
  target_compile_options(${target} PRIVATE ${LOCKSTEP_TORCH_FLAGS})
  if(NOT LOCKSTEP_SANITIZE)
    target_precompile_headers(${target} REUSE_FROM lockstep_torch_pch)
  endif()
endfunction()
