# Third-party libraries the build uses; scripts/setup.sh installs the Debian packages that provide them.
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)   # JSON: karma-graph import, --json output, Chrome trace export
find_package(CLI11 2.1 REQUIRED)            # command-line parsing of karma-trace and the trainer apps
find_package(fmt 9 REQUIRED)                # text formatting
find_package(Boost 1.74 REQUIRED)           # header-only parts: CRC-32 (ktrace records), ICL, Interprocess

# The CUDA 13 toolkit: headers only at build time; nothing here needs a driver.
set(KARMA_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit root")
set(KARMA_CUDA_INCLUDE "${KARMA_CUDA_ROOT}/include")
if(NOT EXISTS "${KARMA_CUDA_INCLUDE}/cuda_runtime_api.h")
  message(FATAL_ERROR "CUDA toolkit headers not found under ${KARMA_CUDA_INCLUDE} (set KARMA_CUDA_ROOT)")
endif()
