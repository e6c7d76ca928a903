# Install rules, the exported CMake package (find_package(tessera)) and a pkg-config file.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS tessera tessera_warnings EXPORT tesseraTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/tessera DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/tessera/config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessera)
install(EXPORT tesseraTargets NAMESPACE tessera:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tessera)

configure_package_config_file(cmake/tesseraConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tesseraConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tessera)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tesseraConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tesseraConfig.cmake ${PROJECT_BINARY_DIR}/tesseraConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tessera)

# pkg-config: relocatable (prefix from ${pcfiledir}) and usable from plain C. The library is static,
# so its dependencies go to Libs: OpenBLAS, oneDNN (when built with it), the OpenMP runtime CMake found (gomp, pthread with
# GCC), the C++ runtime and libm (a C program linked by gcc lacks them), CUDA's runtime.
# One ".." per component of <libdir>/pkgconfig (lib/pkgconfig -> ../..); absolute install dirs
# (a distribution layout) are written as they are and the file is then not relocatable.
string(REGEX REPLACE "[^/]+" ".." TESSERA_PC_PREFIX "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
set(TESSERA_PC_PREFIX "\${pcfiledir}/${TESSERA_PC_PREFIX}")
set(TESSERA_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
set(TESSERA_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(TESSERA_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(TESSERA_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(TESSERA_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(TESSERA_PC_LIBS "-lopenblas")
if(TESSERA_WITH_ONEDNN)
  get_filename_component(dnnl_dir "${TESSERA_DNNL_LIBRARY}" DIRECTORY)
  string(APPEND TESSERA_PC_LIBS " -L${dnnl_dir} -ldnnl")
endif()
foreach(lib IN LISTS OpenMP_CXX_LIB_NAMES)
  string(APPEND TESSERA_PC_LIBS " -l${lib}")
endforeach()
if(TESSERA_WITH_CUDA)
  string(APPEND TESSERA_PC_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -lcudart")
endif()
string(APPEND TESSERA_PC_LIBS " -lstdc++ -lm")
configure_file(cmake/tessera.pc.in ${PROJECT_BINARY_DIR}/tessera.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tessera.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
