// The kernels of both trainers: bias + activation, dropout, residual adds, MSE loss, bias gradients, optimizers.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/trainer.h"

namespace apps::kernels {

// Activations are column-major [rows x cols]: rows = features, cols = samples.
constexpr float kLeak = 0.01f;
constexpr float kKeep = 0.9f;  // dropout keeps 90%

inline void Range(simcuda_cost* c, const void* p, int64_t floats) {
  simcuda_add_range(c, p, static_cast<size_t>(floats) * sizeof(float));
}

// z += b (per row); a = leaky_relu(z). The layer's expensive part in virtual time (see g_flops_per_element).
struct BiasActFwd {
  static constexpr const char* kName = "bias_act_fwd";
  static void Body(int64_t rows, int64_t cols, const float* b, float* z, float* a) {
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t i = 0; i < rows; ++i) {
        const float v = z[i + j * rows] + b[i];
        z[i + j * rows] = v;
        a[i + j * rows] = v > 0 ? v : kLeak * v;
      }
    }
  }
  static void Cost(simcuda_cost* c, int64_t rows, int64_t cols, const float* b, float* z, float* a) {
    const double n = static_cast<double>(rows * cols);
    c->flops = n * g_flops_per_element;
    c->bytes = 12 * n;
    Range(c, b, rows);
    Range(c, z, rows * cols);
    Range(c, a, rows * cols);
  }
};

// dz = dy * mask * leaky_relu'(z): the backward of BiasActFwd followed by Dropout (mask may be null).
struct BiasActBwd {
  static constexpr const char* kName = "bias_act_bwd";
  static void Body(int64_t n, const float* dy, const float* mask, const float* z, float* dz) {
    for (int64_t i = 0; i < n; ++i) {
      const float g = mask != nullptr ? dy[i] * mask[i] : dy[i];
      dz[i] = z[i] > 0 ? g : kLeak * g;
    }
  }
  static void Cost(simcuda_cost* c, int64_t n, const float* dy, const float* mask, const float* z, float* dz) {
    c->flops = 2 * static_cast<double>(n) * g_flops_per_element;  // gradients for input and weights
    c->bytes = (mask != nullptr ? 16.0 : 12.0) * static_cast<double>(n);
    Range(c, dy, n);
    if (mask != nullptr) Range(c, mask, n);
    Range(c, z, n);
    Range(c, dz, n);
  }
};

// mask = (keep ? 1 / kKeep : 0), from a hash of (seed, offset + index); y = x * mask. `offset` is where this
// shard's elements start in the global batch, so a shard draws the mask the whole batch would.
struct Dropout {
  static constexpr const char* kName = "dropout";
  static void Body(int64_t n, int64_t offset, uint64_t seed, const float* x, float* mask, float* y) {
    for (int64_t i = 0; i < n; ++i) {
      const float u = Uniform(seed, 0, static_cast<uint64_t>(offset + i));
      mask[i] = u * 0.5f + 0.5f < kKeep ? 1.0f / kKeep : 0.0f;
      y[i] = x[i] * mask[i];
    }
  }
  static void Cost(simcuda_cost* c, int64_t n, int64_t offset, uint64_t seed, const float* x, float* mask, float* y) {
    c->flops = 4 * static_cast<double>(n);
    c->bytes = 12 * static_cast<double>(n);
    Range(c, x, n);
    Range(c, mask, n);
    Range(c, y, n);
  }
};

// y = z + b (per row) + r: the end of a residual block (z already holds W2 * a).
struct BiasResidual {
  static constexpr const char* kName = "bias_residual";
  static void Body(int64_t rows, int64_t cols, const float* b, const float* r, float* z) {
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t i = 0; i < rows; ++i) z[i + j * rows] += b[i] + r[i + j * rows];
    }
  }
  static void Cost(simcuda_cost* c, int64_t rows, int64_t cols, const float* b, const float* r, float* z) {
    c->flops = 2 * static_cast<double>(rows * cols);
    c->bytes = 12 * static_cast<double>(rows * cols);
    Range(c, b, rows);
    Range(c, r, rows * cols);
    Range(c, z, rows * cols);
  }
};

// z += b (per row): a linear layer's bias, without activation.
struct Bias {
  static constexpr const char* kName = "bias";
  static void Body(int64_t rows, int64_t cols, const float* b, float* z) {
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t i = 0; i < rows; ++i) z[i + j * rows] += b[i];
    }
  }
  static void Cost(simcuda_cost* c, int64_t rows, int64_t cols, const float* b, float* z) {
    c->flops = static_cast<double>(rows * cols);
    c->bytes = 8 * static_cast<double>(rows * cols);
    Range(c, b, rows);
    Range(c, z, rows * cols);
  }
};

// y = a + b.
struct Add {
  static constexpr const char* kName = "add";
  static void Body(int64_t n, const float* a, const float* b, float* y) {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
  }
  static void Cost(simcuda_cost* c, int64_t n, const float* a, const float* b, float* y) {
    c->flops = static_cast<double>(n);
    c->bytes = 12 * static_cast<double>(n);
    Range(c, a, n);
    Range(c, b, n);
    Range(c, y, n);
  }
};

// y += x.
struct Accumulate {
  static constexpr const char* kName = "accumulate";
  static void Body(int64_t n, const float* x, float* y) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
  }
  static void Cost(simcuda_cost* c, int64_t n, const float* x, float* y) {
    c->flops = static_cast<double>(n);
    c->bytes = 12 * static_cast<double>(n);
    Range(c, x, n);
    Range(c, y, n);
  }
};

// db[i] = sum over samples of dz[i, j], in sample order.
struct RowSum {
  static constexpr const char* kName = "row_sum";
  static void Body(int64_t rows, int64_t cols, const float* dz, float* db) {
    for (int64_t i = 0; i < rows; ++i) db[i] = 0;
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t i = 0; i < rows; ++i) db[i] += dz[i + j * rows];
    }
  }
  static void Cost(simcuda_cost* c, int64_t rows, int64_t cols, const float* dz, float* db) {
    c->flops = static_cast<double>(rows * cols);
    c->bytes = 4 * static_cast<double>(rows * cols);
    Range(c, dz, rows * cols);
    Range(c, db, rows);
  }
};

// Mean squared error over a global batch of `norm` elements, of which this shard holds n:
// loss = sum((y - t)^2) / (2 norm); dy = (y - t) / norm. The shards' losses and gradients add up to the batch's.
struct MseLoss {
  static constexpr const char* kName = "mse_loss";
  static void Body(int64_t n, int64_t norm, const float* y, const float* t, float* loss, float* dy) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float d = y[i] - t[i];
      sum += static_cast<double>(d) * d;
      dy[i] = d / static_cast<float>(norm);
    }
    *loss = static_cast<float>(sum / (2.0 * static_cast<double>(norm)));
  }
  static void Cost(simcuda_cost* c, int64_t n, int64_t norm, const float* y, const float* t, float* loss, float* dy) {
    c->flops = 4 * static_cast<double>(n);
    c->bytes = 12 * static_cast<double>(n);
    Range(c, y, n);
    Range(c, t, n);
    Range(c, loss, 1);
    Range(c, dy, n);
  }
};

// v = mu * v + g; w -= lr * v.
struct SgdMomentum {
  static constexpr const char* kName = "sgd_momentum";
  static void Body(int64_t n, float lr, float mu, const float* g, float* v, float* w) {
    for (int64_t i = 0; i < n; ++i) {
      v[i] = mu * v[i] + g[i];
      w[i] -= lr * v[i];
    }
  }
  static void Cost(simcuda_cost* c, int64_t n, float lr, float mu, const float* g, float* v, float* w) {
    c->flops = 4 * static_cast<double>(n);
    c->bytes = 20 * static_cast<double>(n);
    Range(c, g, n);
    Range(c, v, n);
    Range(c, w, n);
  }
};

// Adam with bias correction; c1 = 1 - beta1^t and c2 = 1 - beta2^t come from the host.
struct Adam {
  static constexpr const char* kName = "adam";
  static void Body(int64_t n, float lr, float c1, float c2, const float* g, float* m, float* v, float* w) {
    constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f;
    for (int64_t i = 0; i < n; ++i) {
      m[i] = kBeta1 * m[i] + (1 - kBeta1) * g[i];
      v[i] = kBeta2 * v[i] + (1 - kBeta2) * g[i] * g[i];
      w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + kEps);
    }
  }
  static void Cost(simcuda_cost* c, int64_t n, float lr, float c1, float c2, const float* g, float* m, float* v,
                   float* w) {
    c->flops = 12 * static_cast<double>(n);
    c->bytes = 28 * static_cast<double>(n);
    Range(c, g, n);
    Range(c, m, n);
    Range(c, v, n);
    Range(c, w, n);
  }
};

}  // namespace apps::kernels
