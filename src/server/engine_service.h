// EngineService: the Engine on a thread of its own (the engine is single-threaded; see
// src/engine/README.md). HTTP handler threads submit jobs (one engine request per prompt)
// through a queue and read each job's token and finish events from the job's own channel,
// fed by the engine's on_token / on_finish. Cancellation and shutdown go through the same
// queue; the engine thread publishes its metrics and latency histograms after every step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "server/metrics.h"

namespace hydragen::server {

struct JobEvent {
  bool finished = false;  // a sample's Completion (else one token)
  int prompt = 0;         // which of the job's requests
  engine::TokenEvent token;
  engine::Completion completion;
};

// One HTTP request's engine work: its requests' events, in the order the engine made them.
class Job {
 public:
  // The events queued now, waiting up to `timeout` for one when there is none.
  std::vector<JobEvent> take(std::chrono::milliseconds timeout);
  // Every sample has finished and its events were taken.
  bool done();
  std::chrono::steady_clock::time_point arrival() const { return arrival_; }

 private:
  friend class EngineService;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<JobEvent> events_;
  int unfinished_ = 0;  // samples without their finish event
  // The engine thread's own: its requests, and per sample the time of its last token.
  std::vector<engine::GenerationRequest> requests_;
  std::vector<engine::RequestId> ids_;
  std::vector<std::vector<std::chrono::steady_clock::time_point>> last_token_;
  std::vector<std::vector<bool>> has_token_;
  std::chrono::steady_clock::time_point arrival_ = std::chrono::steady_clock::now();
  int samples_ = 0;
};

struct ServiceLimits {
  // Sequences (prompts x n) accepted and not finished, at most max_running + max_queue; a job
  // past that is refused (503).
  std::int64_t max_running = 256;
  std::int64_t max_queue = 1024;
};

class EngineService {
 public:
  // `options`' on_token / on_finish are the service's; the rest (attention, budgets, detokenize) is kept.
  EngineService(engine::ModelRunner& runner, engine::EngineOptions options, ServiceLimits limits,
                ServerMetrics& metrics);
  ~EngineService();
  EngineService(const EngineService&) = delete;
  EngineService& operator=(const EngineService&) = delete;

  // Queues the requests as one job; ApiError 503 when the queue is full or the service stops.
  std::shared_ptr<Job> submit(std::vector<engine::GenerationRequest> requests);
  // Cancels every sample of the job not finished yet (its pages back within a step).
  void cancel(const std::shared_ptr<Job>& job);
  // Stops accepting jobs; lets those in run until `deadline` from now, then cancels the rest,
  // and returns once the engine thread has ended.
  void shutdown(std::chrono::milliseconds deadline);
  std::int64_t outstanding() const;

 private:
  void loop();
  void on_token(const engine::TokenEvent& e);
  void on_finish(const engine::Completion& c);
  void deliver(Job& job, JobEvent event);

  engine::ModelRunner& runner_;
  engine::EngineOptions options_;
  ServiceLimits limits_;
  ServerMetrics& metrics_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::shared_ptr<Job>> pending_;
  std::vector<std::shared_ptr<Job>> cancels_;
  std::int64_t outstanding_ = 0;  // sequences accepted, not finished
  bool stopping_ = false;
  std::chrono::steady_clock::time_point deadline_;

  // The engine thread's own.
  struct Owner {
    std::shared_ptr<Job> job;
    int prompt = 0;
  };
  std::unordered_map<engine::RequestId, Owner> owners_;
  engine::RequestId next_id_ = 0;
  std::unique_ptr<engine::Engine> engine_;
  std::thread thread_;
};

}  // namespace hydragen::server
