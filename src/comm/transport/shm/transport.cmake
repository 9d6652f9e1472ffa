# Shared memory: always built (Linux only needs librt).
target_sources(lockstep_comm PRIVATE
  transport/shm/segment.cc
  transport/shm/sync.cc
  transport/shm/shm_backend.cc
  transport/shm/shm_collectives.cc
  transport/shm/shm_pipeline.cc
  transport/shm/shm_two_level.cc
  transport/shm/numa.cc
  transport/shm/shm_cma.cc
  transport/shm/cma.cc
  transport/shm/shm_transport.cc)
target_link_libraries(lockstep_comm PRIVATE rt)
lockstep_register_transport(shm)
