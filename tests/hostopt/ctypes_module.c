/* Empty translation unit of the test-only module that carries the host-optimizer C API for ctypes. */
#include "include/karma/karma.h"
