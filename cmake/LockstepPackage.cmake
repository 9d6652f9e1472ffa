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
