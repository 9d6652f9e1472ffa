# NCCL on CUDA buffers (docs/backends.md): ON with LOCKSTEP_WITH_CUDA
# (cmake/LockstepCuda.cmake: the CUDA toolkit and NCCL both found).
if(LOCKSTEP_WITH_CUDA)
  target_sources(lockstep_comm PRIVATE
    transport/nccl/nccl_runtime.cc
    transport/nccl/nccl_watchdog.cc
    transport/nccl/nccl_bootstrap.cc
    transport/nccl/nccl_backend.cc
    transport/nccl/nccl_collectives.cc
    transport/nccl/nccl_transport.cc)
  lockstep_use_cuda(lockstep_comm)
  lockstep_register_transport(nccl)
endif()
