// Internal: the checks the HDF5 source makes on a dataset's storage before
// its first H5Dread. Each one closes a way a corrupt or hostile file made
// libhdf5 allocate gigabytes, read past a buffer of its own, or read bytes
// from outside the file (Note [HDF5 storage checks]). Call with
// hdf5::library_mutex() held, like every libhdf5 call.
#pragma once

#include <hdf5.h>

#include <string>

namespace lockstep::data::hdf5 {

// Throws lockstep::Error naming `path` and dataset `name` (and what to do)
// when the dataset's data is not all inside the file, written, and of a
// size the file can hold.
void check_storage(const std::string& path, hid_t file, hid_t dataset, const std::string& name);

}  // namespace lockstep::data::hdf5
