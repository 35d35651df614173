// A small fixed thread pool with one blocking primitive, parallel_for. The calling thread
// works too, so a pool of N threads keeps N + 1 cores busy only when asked for N + 1.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hydragen {

class ThreadPool {
 public:
  // workers = total threads that run tasks, the caller included (>= 1).
  explicit ThreadPool(int workers);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int workers() const { return static_cast<int>(threads_.size()) + 1; }

  // Runs body(i) for i in [0, n), distributing indices dynamically; returns when all are
  // done. The first exception thrown by a body is rethrown here. Not reentrant.
  void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& body);

  // The process-wide pool, sized to the hardware threads (HYDRAGEN_THREADS overrides).
  static ThreadPool& global();

 private:
  void worker_loop();
  void run_tasks();

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::int64_t)>* body_ = nullptr;
  std::int64_t next_ = 0;
  std::int64_t total_ = 0;
  std::int64_t finished_ = 0;
  std::uint64_t generation_ = 0;
  int active_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
};

}  // namespace hydragen
