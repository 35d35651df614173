#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

namespace hydragen {

ThreadPool::ThreadPool(int workers) {
  for (int i = 1; i < std::max(workers, 1); ++i) threads_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("HYDRAGEN_THREADS")) return std::max(1, std::atoi(env));
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }());
  return pool;
}

// Claims indices one at a time until none are left; records the first exception.
void ThreadPool::run_tasks() {
  std::unique_lock lock(mutex_);
  while (next_ < total_) {
    const std::int64_t i = next_++;
    lock.unlock();
    try {
      (*body_)(i);
    } catch (...) {
      lock.lock();
      if (!error_) error_ = std::current_exception();
      next_ = total_;  // stop handing out work
      ++finished_;
      continue;
    }
    lock.lock();
    ++finished_;
  }
}

void ThreadPool::worker_loop() {
  std::uint64_t seen = 0;
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    ++active_;
    lock.unlock();
    run_tasks();
    lock.lock();
    --active_;
    done_.notify_all();
  }
}

void ThreadPool::parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& body) {
  if (n <= 0) return;
  if (threads_.empty() || n == 1) {
    for (std::int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    next_ = 0;
    total_ = n;
    finished_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_tasks();
  std::unique_lock lock(mutex_);
  // Every claimed index must finish and every worker must leave run_tasks before the body
  // (a reference to the caller's function) goes out of scope.
  done_.wait(lock, [&] { return active_ == 0 && next_ >= total_; });
  body_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace hydragen
