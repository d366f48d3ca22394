// The gradient exchange over MPI of the trainer apps' *_mpi variants (the only code that uses MPI).
#pragma once

#include <memory>

#include "common/trainer.h"

namespace apps {

std::unique_ptr<GradientExchange> MakeMpiExchange(const ExchangeOptions& options);

}  // namespace apps
