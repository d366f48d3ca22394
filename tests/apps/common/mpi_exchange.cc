// The *_mpi variants' data parallelism: rank r computes shard r, and each gradient is summed over
// MPI_COMM_WORLD with MPI_Iallreduce as soon as it is final, as a framework's data-parallel wrapper does.
#include <dlfcn.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/mpi_exchange.h"

namespace apps {
namespace {

class MpiExchange : public GradientExchange {
 public:
  explicit MpiExchange(const ExchangeOptions& o) : options_(o) {
    int argc = o.argc;
    char** argv = o.argv;
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
      std::fprintf(stderr, "MPI_Init failed\n");
      std::exit(1);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (options_.fail_rank < 0) options_.fail_rank = size_ - 1;
  }
  ~MpiExchange() override { MPI_Finalize(); }

  int first_shard() const override { return rank_; }
  int local_shards() const override { return 1; }
  int total_shards() const override { return size_; }
  int rank() const override { return rank_; }

  void Ready(Context& c, int, Param& p) override {
    // MPI knows nothing of CUDA streams: the gradient must be complete before MPI may read it. The device
    // pointer itself goes to MPI, as with a CUDA-aware MPI (simcuda's and KARMA's managed memory are host
    // accessible).
    Check(cudaStreamSynchronize(c.stream()), "cudaStreamSynchronize");
    MaybeFail();
    MPI_Request r;
    if (MPI_Iallreduce(MPI_IN_PLACE, p.g, static_cast<int>(p.n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r) !=
        MPI_SUCCESS) {
      std::fprintf(stderr, "rank %d: MPI_Iallreduce failed\n", rank_);
      std::exit(1);
    }
    requests_.push_back(r);
  }

  void Finish(Context&) override {
    MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    requests_.clear();
    ++iter_;
    calls_ = 0;
  }

  float ReduceLoss(float local) override {
    MPI_Allreduce(MPI_IN_PLACE, &local, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return local;
  }

  bool AttachHostOptimizer(void* optimizer) override {
    auto attach = reinterpret_cast<int (*)(void*)>(dlsym(RTLD_DEFAULT, "karma_dp_attach_optimizer"));
    return attach != nullptr && attach(optimizer) == 0;
  }

 private:
  // --fail: in the middle of a backward pass, after some allreduces are under way.
  void MaybeFail() {
    if (options_.fail.empty() || rank_ != options_.fail_rank || iter_ != options_.fail_iter || calls_++ != 4) return;
    std::fprintf(stderr, "rank %d: failing on purpose (%s) in iteration %d\n", rank_, options_.fail.c_str(), iter_);
    std::fflush(stderr);
    if (options_.fail == "abort") std::abort();
    if (options_.fail == "exit") _exit(3);
    raise(SIGSTOP);  // hang: stopped, neither dead nor progressing
  }

  ExchangeOptions options_;
  int rank_ = 0, size_ = 1;
  int iter_ = 0, calls_ = 0;
  std::vector<MPI_Request> requests_;
};

}  // namespace

std::unique_ptr<GradientExchange> MakeMpiExchange(const ExchangeOptions& options) {
  return std::make_unique<MpiExchange>(options);
}

}  // namespace apps
