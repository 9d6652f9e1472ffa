# MPI (docs/backends.md): ON when an MPI library is found.
find_package(MPI QUIET COMPONENTS CXX)
option(LOCKSTEP_WITH_MPI "Build the MPI backend" ${MPI_CXX_FOUND})
if(LOCKSTEP_WITH_MPI)
  find_package(MPI REQUIRED COMPONENTS CXX)
  target_sources(lockstep_comm PRIVATE
    transport/mpi/mpi_runtime.cc
    transport/mpi/mpi_types.cc
    transport/mpi/mpi_watchdog.cc
    transport/mpi/mpi_backend.cc
    transport/mpi/mpi_collectives.cc
    transport/mpi/mpi_transport.cc)
  lockstep_link_private(lockstep_comm MPI::MPI_CXX)
  lockstep_register_transport(mpi)
endif()
