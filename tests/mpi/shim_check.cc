// An MPI program that checks the semantics of MPI_Allreduce / MPI_Iallreduce and the waits, with or without
// libkarma_mpi.so preloaded: results against the rank-order reduction each rank computes itself (bit for bit
// under the shim), non-commutative ops, mixed waits and tests, sub-communicators, pass-through types.
//   mpirun -np N shim_check [--rounds R]     exit 0 and "ok" on every rank, else a message and exit 1
#include <dlfcn.h>
#include <mpi.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "include/karma/karma.h"

namespace {

int g_rank = 0, g_size = 1;
bool g_shim = false;  // libkarma_mpi.so is there: results must be the rank-order fold bit for bit
int g_failures = 0;

void Expect(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "rank %d: FAIL: %s\n", g_rank, what.c_str());
  ++g_failures;
}

// Rank r's contribution to element i of tensor t in round k: distinct floats whose sums round differently
// depending on the order they are added in.
float Value(int r, int k, int t, int i) {
  const uint32_t h = static_cast<uint32_t>((r + 1) * 2654435761u ^ (k * 40503u + t * 97u + i * 7919u));
  return std::ldexp(static_cast<float>(h % 100000) - 50000.0f, -static_cast<int>((h >> 20) % 12));
}

std::vector<float> Contribution(int r, int k, int t, int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = Value(r, k, t, i);
  return v;
}

// ((x_0 + x_1) + x_2) + ...: what the shim computes; any order within a relative tolerance otherwise.
std::vector<float> RankOrderSum(int k, int t, int n, const std::vector<int>& ranks) {
  std::vector<float> acc = Contribution(ranks[0], k, t, n);
  for (size_t j = 1; j < ranks.size(); ++j) {
    const std::vector<float> x = Contribution(ranks[j], k, t, n);
    for (int i = 0; i < n; ++i) acc[static_cast<size_t>(i)] += x[static_cast<size_t>(i)];
  }
  return acc;
}

bool SameSums(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (g_shim ? std::memcmp(&got[i], &want[i], sizeof(float)) != 0
               : std::fabs(got[i] - want[i]) > 1e-5f * (std::fabs(want[i]) + 1e4f)) {
      return false;
    }
  }
  return true;
}

std::vector<int> AllRanks(int size) {
  std::vector<int> r(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) r[static_cast<size_t>(i)] = i;
  return r;
}

// A 2x2 matrix of 32-bit integers (wrapping): the product is associative and not commutative.
struct Mat {
  uint32_t a, b, c, d;
};
void MatMul(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* x = static_cast<Mat*>(in);
  auto* y = static_cast<Mat*>(inout);
  for (int i = 0; i < *len; ++i) {  // inout = in * inout
    const Mat p = x[i], q = y[i];
    y[i] = {p.a * q.a + p.b * q.c, p.a * q.b + p.b * q.d, p.c * q.a + p.d * q.c, p.c * q.b + p.d * q.d};
  }
}
// Sum of floats 8 bytes apart (the type of the pass-through case).
void StridedAdd(void* in, void* inout, int* len, MPI_Datatype*) {
  for (int i = 0; i < *len; ++i) static_cast<float*>(inout)[2 * i] += static_cast<float*>(in)[2 * i];
}
Mat MatOf(int r, int i) {
  return {static_cast<uint32_t>(r + 2), static_cast<uint32_t>(3 * r + i), static_cast<uint32_t>(i + 1), 5u};
}

void BlockingCases() {
  // In place and out of place; odd sizes that do not divide among the ranks; count 0.
  for (int n : {1, 3, 1000, 4099}) {
    std::vector<float> v = Contribution(g_rank, 0, n, n);
    MPI_Allreduce(MPI_IN_PLACE, v.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    Expect(SameSums(v, RankOrderSum(0, n, n, AllRanks(g_size))), "blocking in-place sum of " + std::to_string(n));
    const std::vector<float> send = Contribution(g_rank, 0, n, n);
    std::vector<float> recv(static_cast<size_t>(n), -1.0f);
    MPI_Allreduce(send.data(), recv.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    Expect(SameSums(recv, RankOrderSum(0, n, n, AllRanks(g_size))), "blocking sum of " + std::to_string(n));
    Expect(send == Contribution(g_rank, 0, n, n), "the send buffer changed");
  }
  float untouched = 7;
  MPI_Allreduce(MPI_IN_PLACE, &untouched, 0, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  Expect(untouched == 7, "count 0 wrote the buffer");

  // Integer max and a non-commutative user op on a derived (contiguous) type: rank order is MPI's rule.
  std::vector<int32_t> m = {g_rank, -g_rank, 3 * g_rank % 5};
  MPI_Allreduce(MPI_IN_PLACE, m.data(), 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  Expect(m[0] == g_size - 1 && m[1] == 0, "integer max");
  MPI_Datatype mat_type;
  MPI_Type_contiguous(4, MPI_UINT32_T, &mat_type);
  MPI_Type_commit(&mat_type);
  MPI_Op mat_mul;
  MPI_Op_create(MatMul, 0, &mat_mul);
  std::vector<Mat> mats = {MatOf(g_rank, 0), MatOf(g_rank, 1)};
  MPI_Allreduce(MPI_IN_PLACE, mats.data(), 2, mat_type, mat_mul, MPI_COMM_WORLD);
  for (int i = 0; i < 2; ++i) {
    Mat want = MatOf(0, i);
    for (int r = 1; r < g_size; ++r) {
      Mat x = MatOf(r, i);
      int one = 1;
      MatMul(&want, &x, &one, nullptr);  // x = want * x
      want = x;
    }
    Expect(std::memcmp(&mats[static_cast<size_t>(i)], &want, sizeof(Mat)) == 0, "non-commutative op in rank order");
  }
  MPI_Op_free(&mat_mul);
  MPI_Type_free(&mat_type);

  // A float with an extent of two (elements 8 bytes apart) cannot be packed: passed through, still correct.
  MPI_Datatype strided;
  MPI_Type_create_resized(MPI_FLOAT, 0, 2 * sizeof(float), &strided);
  MPI_Type_commit(&strided);
  MPI_Op strided_add;
  MPI_Op_create(StridedAdd, 1, &strided_add);
  std::vector<float> s(6, 0.0f);
  for (int i = 0; i < 6; ++i) s[static_cast<size_t>(i)] = static_cast<float>(g_rank * 10 + i);
  std::vector<float> sum(6, -1.0f);
  MPI_Allreduce(s.data(), sum.data(), 3, strided, strided_add, MPI_COMM_WORLD);
  const float base = static_cast<float>(10 * g_size * (g_size - 1) / 2);
  Expect(sum[0] == base && sum[2] == base + 2 * g_size && sum[4] == base + 4 * g_size && sum[1] == -1.0f,
         "strided type");
  MPI_Op_free(&strided_add);
  MPI_Type_free(&strided);
}

// One "iteration": tensors of several sizes issued as a backward pass would, other MPI traffic in between, then
// completed in one of several ways.
void Round(int k, MPI_Comm comm, const std::vector<int>& ranks, int my) {
  static const int kSizes[] = {64, 1, 4096, 100, 7, 65536, 300, 5};
  constexpr int kTensors = 8;
  std::vector<std::vector<float>> bufs;
  std::vector<MPI_Request> reqs(kTensors);
  for (int t = 0; t < kTensors; ++t) {
    bufs.push_back(Contribution(ranks[static_cast<size_t>(my)], k, t, kSizes[t]));
    MPI_Iallreduce(MPI_IN_PLACE, bufs.back().data(), kSizes[t], MPI_FLOAT, MPI_SUM, comm, &reqs[static_cast<size_t>(t)]);
    if (t == 3) {  // the application's own collective and point-to-point traffic in the middle of the round
      int token = my == 0 ? 42 + k : 0;
      MPI_Bcast(&token, 1, MPI_INT, 0, comm);
      Expect(token == 42 + k, "bcast in the middle of a round");
    }
  }
  switch (k % 4) {
    case 0:
      MPI_Waitall(kTensors, reqs.data(), MPI_STATUSES_IGNORE);
      break;
    case 1:
      for (int t = kTensors - 1; t >= 0; --t) MPI_Wait(&reqs[static_cast<size_t>(t)], MPI_STATUS_IGNORE);
      break;
    case 2: {
      int left = kTensors;
      while (left > 0) {
        int index = -1;
        MPI_Status st;
        MPI_Waitany(kTensors, reqs.data(), &index, &st);
        Expect(index >= 0 && reqs[static_cast<size_t>(index)] == MPI_REQUEST_NULL, "waitany index");
        --left;
      }
      break;
    }
    default: {
      int flag = 0;
      while (!flag) MPI_Testall(kTensors, reqs.data(), &flag, MPI_STATUSES_IGNORE);
      break;
    }
  }
  for (int t = 0; t < kTensors; ++t) {
    Expect(reqs[static_cast<size_t>(t)] == MPI_REQUEST_NULL, "request not freed");
    Expect(SameSums(bufs[static_cast<size_t>(t)], RankOrderSum(k, t, kSizes[t], ranks)),
           "round " + std::to_string(k) + " tensor " + std::to_string(t));
  }
}

// Memory hooks as a runtime would install them: counted, and every buffer handed over must be one the program
// passed to an allreduce.
struct HookCounts {
  std::atomic<int> to_host{0}, sync{0}, to_device{0}, foreign{0};
  std::vector<std::pair<const char*, size_t>> buffers;  // set before the round, read by the shim's threads
};
bool Known(const HookCounts& h, const void* p, size_t bytes) {
  for (const auto& [b, n] : h.buffers) {
    if (static_cast<const char*>(p) >= b && static_cast<const char*>(p) + bytes <= b + n) return true;
  }
  return false;
}
void HookToHost(void* ctx, const void* p, size_t bytes) {
  auto* h = static_cast<HookCounts*>(ctx);
  h->to_host++;
  if (!Known(*h, p, bytes)) h->foreign++;
}
void HookSync(void* ctx) { static_cast<HookCounts*>(ctx)->sync++; }
void HookToDevice(void* ctx, const void* p, size_t bytes) {
  auto* h = static_cast<HookCounts*>(ctx);
  h->to_device++;
  if (!Known(*h, p, bytes)) h->foreign++;
}

void MemoryHooksCase() {
  auto set = reinterpret_cast<karma_status (*)(const karma_dp_memory_hooks*)>(
      dlsym(RTLD_DEFAULT, "karma_dp_set_memory_hooks"));
  Expect(set != nullptr, "karma_dp_set_memory_hooks is not exported");
  if (set == nullptr) return;
  static HookCounts counts;
  std::vector<std::vector<float>> bufs;
  for (int t = 0; t < 3; ++t) {
    bufs.push_back(Contribution(g_rank, 500, t, 1000));
    counts.buffers.push_back({reinterpret_cast<const char*>(bufs.back().data()), bufs.back().size() * sizeof(float)});
  }
  const karma_dp_memory_hooks hooks{&counts, HookToHost, HookSync, HookToDevice};
  Expect(set(&hooks) == KARMA_OK, "installing memory hooks");
  std::vector<MPI_Request> reqs(3);
  for (int t = 0; t < 3; ++t) {
    MPI_Iallreduce(MPI_IN_PLACE, bufs[static_cast<size_t>(t)].data(), 1000, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                   &reqs[static_cast<size_t>(t)]);
  }
  MPI_Waitall(3, reqs.data(), MPI_STATUSES_IGNORE);
  Expect(set(nullptr) == KARMA_OK, "removing memory hooks");
  for (int t = 0; t < 3; ++t) {
    Expect(SameSums(bufs[static_cast<size_t>(t)], RankOrderSum(500, t, 1000, AllRanks(g_size))), "hooked round");
  }
  // Each reduced gradient went to the host before and back to the device after (no host update here).
  Expect(counts.to_host == 3 && counts.to_device == 3 && counts.sync >= 1 && counts.foreign == 0,
         "memory hooks: " + std::to_string(counts.to_host) + " to host, " + std::to_string(counts.to_device) +
             " to device, " + std::to_string(counts.sync) + " syncs, " + std::to_string(counts.foreign) +
             " foreign buffers");
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 12;
  bool expect_merge = false;  // --expect-merge: the cost model given must merge some allreduces
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--expect-merge") == 0) expect_merge = true;
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  auto stats_fn = reinterpret_cast<karma_status (*)(karma_dp_stats*)>(dlsym(RTLD_DEFAULT, "karma_dp_get_stats"));
  karma_dp_stats stats{};
  g_shim = stats_fn != nullptr && stats_fn(&stats) == KARMA_OK && stats.active;

  BlockingCases();
  if (g_shim) MemoryHooksCase();
  for (int k = 0; k < rounds; ++k) Round(k, MPI_COMM_WORLD, AllRanks(g_size), g_rank);

  // A sub-communicator (the even and the odd ranks), freed and made again: the shim duplicates each.
  for (int again = 0; again < 2; ++again) {
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &half);
    int hr = 0, hs = 1;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hs);
    std::vector<int> members;
    for (int r = g_rank % 2; r < g_size; r += 2) members.push_back(r);
    Expect(static_cast<int>(members.size()) == hs, "split size");
    for (int k = 0; k < 3; ++k) Round(100 + 10 * again + k, half, members, hr);
    MPI_Comm_free(&half);
  }

  if (g_shim) {
    stats_fn(&stats);
    Expect(stats.calls > 0 && stats.planned_rounds > 0, "no round followed a plan");
    if (expect_merge) {
      Expect(stats.groups < stats.calls, "no allreduces were merged (" + std::to_string(stats.groups) +
                                             " groups for " + std::to_string(stats.calls) + " calls)");
    }
    if (g_rank == 0) {
      std::printf("shim: %llu calls in %llu groups, %llu rounds (%llu planned), alpha %.1f us\n",
                  static_cast<unsigned long long>(stats.calls), static_cast<unsigned long long>(stats.groups),
                  static_cast<unsigned long long>(stats.rounds), static_cast<unsigned long long>(stats.planned_rounds),
                  stats.alpha_s * 1e6);
    }
  }
  int failures = g_failures;
  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  if (g_rank == 0) std::printf(failures == 0 ? "ok\n" : "FAILED (%d)\n", failures);
  return failures == 0 ? 0 : 1;
}
