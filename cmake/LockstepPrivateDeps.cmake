# Private dependencies of lockstep's static libraries, kept out of the
# installed package (docs/package.md, issue 16.11).
#
# A static archive's private dependencies still end up in its exported link
# interface (as $<LINK_ONLY:ZLIB::ZLIB>), so every consumer would have to
# find_package(ZLIB), Protobuf, OpenSSL... just to define those names.
# lockstep_link_private() links the dependency's target in the build tree,
# and exports instead the library files it resolves to here: a consumer's
# linker gets the same files, and the package config finds only what the
# public headers need (Threads, fmt, Torch). Header-only dependencies
# (CLI11, nlohmann_json) resolve to no file and vanish from the package.

# Targets the package config finds itself (cmake/lockstepConfig.cmake.in):
# exported by name.
set(LOCKSTEP_PACKAGE_TARGETS fmt::fmt Threads::Threads)

# The files (and plain names or flags) that linking <item> adds, in link
# order. Only imported targets are expanded; anything else is kept as is.
function(_lockstep_link_items item out)
  set(items "")
  if(item MATCHES "^\\$<LINK_ONLY:(.*)>$")
    set(item "${CMAKE_MATCH_1}")
  endif()
  if(NOT TARGET "${item}")
    if(item MATCHES "\\$<")
      message(FATAL_ERROR "lockstep_link_private: cannot export '${item}' "
              "(a generator expression): link it with target_link_libraries instead")
    endif()
    set(${out} "${item}" PARENT_SCOPE)
    return()
  endif()
  if(item IN_LIST LOCKSTEP_PACKAGE_TARGETS)
    set(${out} "${item}" PARENT_SCOPE)
    return()
  endif()
  set(real "${item}")
  get_target_property(aliased "${item}" ALIASED_TARGET)
  if(aliased)
    set(real "${aliased}")
  endif()
  get_target_property(imported "${real}" IMPORTED)
  if(NOT imported)  # one of lockstep's own targets: exported by the package
    set(${out} "${item}" PARENT_SCOPE)
    return()
  endif()
  set(item "${real}")
  get_target_property(type "${item}" TYPE)
  if(NOT type STREQUAL "INTERFACE_LIBRARY")
    _lockstep_imported_location("${item}" loc)
    list(APPEND items "${loc}")
  endif()
  foreach(prop INTERFACE_LINK_LIBRARIES INTERFACE_LINK_OPTIONS)
    get_target_property(deps "${item}" ${prop})
    if(NOT deps)
      continue()
    endif()
    foreach(dep IN LISTS deps)
      _lockstep_link_items("${dep}" dep_items)
      list(APPEND items ${dep_items})
    endforeach()
  endforeach()
  set(${out} "${items}" PARENT_SCOPE)
endfunction()

# IMPORTED_LOCATION, else the one for this build type, else the first
# configuration the target was imported with.
function(_lockstep_imported_location target out)
  get_target_property(loc "${target}" IMPORTED_LOCATION)
  if(NOT loc)
    string(TOUPPER "${CMAKE_BUILD_TYPE}" config)
    get_target_property(configs "${target}" IMPORTED_CONFIGURATIONS)
    if(configs AND NOT config IN_LIST configs)
      list(GET configs 0 config)
    endif()
    get_target_property(loc "${target}" IMPORTED_LOCATION_${config})
  endif()
  if(NOT loc)
    message(FATAL_ERROR "lockstep_link_private: ${target} has no IMPORTED_LOCATION; "
            "cannot export the file it links")
  endif()
  set(${out} "${loc}" PARENT_SCOPE)
endfunction()

# lockstep_link_private(<target> <dep>...): <target> links each <dep>
# privately; the installed package records the files instead of the names.
function(lockstep_link_private target)
  foreach(dep IN LISTS ARGN)
    _lockstep_link_items("${dep}" items)
    if(items STREQUAL dep)
      target_link_libraries(${target} PRIVATE ${dep})
      continue()
    endif()
    target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:${dep}>)
    foreach(file IN LISTS items)
      set_property(TARGET ${target} APPEND PROPERTY INTERFACE_LINK_LIBRARIES
                   "$<INSTALL_INTERFACE:$<LINK_ONLY:${file}>>")
    endforeach()
  endforeach()
endfunction()
