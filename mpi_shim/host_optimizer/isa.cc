// Which instruction sets the kernels were built for and the CPU can run, and the choice among them.
#include <string>

#include "mpi_shim/host_optimizer/host_optimizer.h"

namespace karma::hostopt {

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAuto: return "auto";
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

Result<Isa> ParseIsa(std::string_view text) {
  for (Isa isa : {Isa::kAuto, Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (text == IsaName(isa)) return isa;
  }
  return InvalidArgument("unknown instruction set '" + std::string(text) + "': expected auto|scalar|avx2|avx512");
}

bool IsaSupported(Isa isa) {
  switch (isa) {
    case Isa::kAuto:
    case Isa::kScalar:
      return true;
#if KARMA_HOSTOPT_X86
    // GCC's checks include the OS's XSAVE state (XCR0), not only the CPUID bits.
    case Isa::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma");
#else
    case Isa::kAvx2:
    case Isa::kAvx512:
      return false;
#endif
  }
  return false;
}

Isa BestIsa() {
  if (IsaSupported(Isa::kAvx512)) return Isa::kAvx512;
  if (IsaSupported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

const KernelTable& KernelsFor(Isa isa) {
#if KARMA_HOSTOPT_X86
  if (isa == Isa::kAvx512) return Avx512Kernels();
  if (isa == Isa::kAvx2) return Avx2Kernels();
#endif
  return ScalarKernels();
}

}  // namespace karma::hostopt
