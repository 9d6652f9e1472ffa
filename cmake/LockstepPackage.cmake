# Installs headers, libraries and an exported CMake package so that another
# project can `find_package(lockstep)` and link lockstep::comm, lockstep::torch...
include(CMakePackageConfigHelpers)
get_property(_targets GLOBAL PROPERTY LOCKSTEP_EXPORTED_TARGETS)
install(TARGETS ${_targets} EXPORT lockstepTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/lockstep DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT lockstepTargets NAMESPACE lockstep::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
configure_package_config_file(cmake/lockstepConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/lockstepConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/lockstepConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/lockstepConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/lockstepConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lockstep)

# The default build is RelWithDebInfo, whose archives are mostly DWARF
# (liblockstep_torch.a: 160 MB, 1.6 MB without), and every consumer program
# linked it in (58-65 MB each; issue 30.6). Installed archives and programs
# carry no debug info unless LOCKSTEP_INSTALL_DEBUG_INFO=ON. Runs last: this
# file is included after every add_subdirectory (CMP0082).
option(LOCKSTEP_INSTALL_DEBUG_INFO "Keep debug info in the installed libraries and programs" OFF)
if(NOT LOCKSTEP_INSTALL_DEBUG_INFO AND CMAKE_STRIP)
  install(CODE "
    set(_prefix \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}\")
    file(GLOB _files \"\${_prefix}/${CMAKE_INSTALL_LIBDIR}/liblockstep_*.a\"
                     \"\${_prefix}/${CMAKE_INSTALL_BINDIR}/lockstep*\")
    foreach(_file IN LISTS _files)
      execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug \"\${_file}\" RESULT_VARIABLE _rc)
      if(NOT _rc EQUAL 0)
        message(WARNING \"could not strip the debug info of \${_file}\")
      endif()
    endforeach()")
endif()
