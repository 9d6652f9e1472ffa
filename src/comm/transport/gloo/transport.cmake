# Gloo, TCP between hosts (docs/backends.md): ON when libgloo is found.
find_package(Gloo QUIET)
option(LOCKSTEP_WITH_GLOO "Build the Gloo (TCP) backend" ${Gloo_FOUND})
if(LOCKSTEP_WITH_GLOO)
  find_package(Gloo REQUIRED)
  target_sources(lockstep_comm PRIVATE
    transport/gloo/gloo_store.cc
    transport/gloo/gloo_backend.cc
    transport/gloo/gloo_collectives.cc
    transport/gloo/gloo_errors.cc
    transport/gloo/gloo_transport.cc)
  lockstep_link_private(lockstep_comm gloo)
  # The launcher's authenticated store (layer below comm), when it is built.
  option(LOCKSTEP_GLOO_RENDEZVOUS "Gloo rendezvous through lockstep's store (else file store only)" ON)
  if(TARGET lockstep_rendezvous AND LOCKSTEP_GLOO_RENDEZVOUS)
    target_link_libraries(lockstep_comm PRIVATE lockstep::rendezvous)
    target_compile_definitions(lockstep_comm PRIVATE LOCKSTEP_HAVE_RENDEZVOUS)
  endif()
  lockstep_register_transport(gloo)
endif()
