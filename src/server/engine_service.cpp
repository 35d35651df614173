#include "server/engine_service.h"

#include <utility>

#include "hydragen/error.h"
#include "server/api_error.h"

namespace hydragen::server {

namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

std::vector<JobEvent> Job::take(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (events_.empty()) ready_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<JobEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

bool Job::done() {
  std::lock_guard lock(mutex_);
  return unfinished_ == 0 && events_.empty();
}

EngineService::EngineService(engine::ModelRunner& runner, engine::EngineOptions options, ServiceLimits limits,
                             ServerMetrics& metrics)
    : runner_(runner), options_(std::move(options)), limits_(limits), metrics_(metrics) {
  options_.on_token = [this](const engine::TokenEvent& e) { on_token(e); };
  options_.on_finish = [this](const engine::Completion& c) { on_finish(c); };
  engine_ = std::make_unique<engine::Engine>(runner_, options_);
  metrics_.publish(engine_->metrics());
  thread_ = std::thread([this] { loop(); });
}

EngineService::~EngineService() { shutdown(std::chrono::milliseconds(0)); }

std::shared_ptr<Job> EngineService::submit(std::vector<engine::GenerationRequest> requests) {
  auto job = std::make_shared<Job>();
  for (const auto& r : requests) job->samples_ += std::max(1, r.n);
  job->unfinished_ = job->samples_;
  job->requests_ = std::move(requests);
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw ApiError(503, "the server is shutting down", "", "server_error");
    if (outstanding_ + job->samples_ > limits_.max_running + limits_.max_queue)
      throw ApiError(503, "the server's queue is full; retry later", "", "server_error", "queue_full");
    outstanding_ += job->samples_;
    pending_.push_back(job);
  }
  wake_.notify_one();
  return job;
}

void EngineService::cancel(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard lock(mutex_);
    cancels_.push_back(job);
  }
  wake_.notify_one();
}

void EngineService::shutdown(std::chrono::milliseconds deadline) {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      stopping_ = true;
      deadline_ = Clock::now() + deadline;
    } else {
      deadline_ = std::min(deadline_, Clock::now() + deadline);
    }
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

std::int64_t EngineService::outstanding() const {
  std::lock_guard lock(mutex_);
  return outstanding_;
}

void EngineService::loop() {
  bool busy = false;
  bool cancelled_all = false;
  for (;;) {
    std::vector<std::shared_ptr<Job>> jobs, cancels;
    {
      std::unique_lock lock(mutex_);
      while (!busy && pending_.empty() && cancels_.empty()) {
        if (stopping_) return;
        wake_.wait(lock);
      }
      jobs.swap(pending_);
      cancels.swap(cancels_);
      if (stopping_ && !cancelled_all && Clock::now() >= deadline_) {
        cancelled_all = true;
        for (const auto& [id, owner] : owners_) engine_->cancel(id);
      }
    }
    try {
      for (const auto& job : jobs) {
        for (std::size_t p = 0; p < job->requests_.size(); ++p) {
          const engine::RequestId expected = next_id_++;
          owners_[expected] = Owner{job, static_cast<int>(p)};
          job->ids_.push_back(expected);
          job->last_token_.emplace_back(static_cast<std::size_t>(std::max(1, job->requests_[p].n)));
          job->has_token_.emplace_back(static_cast<std::size_t>(std::max(1, job->requests_[p].n)), false);
          const engine::RequestId id = engine_->submit(job->requests_[p]);
          HG_CHECK(id == expected, "EngineService: the engine numbered a request ", id, ", expected ", expected);
        }
        busy = true;
      }
      for (const auto& job : cancels)
        for (engine::RequestId id : job->ids_) engine_->cancel(id);
      if (cancelled_all)
        for (const auto& [id, owner] : owners_) engine_->cancel(id);
      busy = engine_->step() || !cancels.empty();
    } catch (const std::exception& e) {
      // The engine failed (a device error): every job still open ends with the error.
      std::fprintf(stderr, "error: engine: %s\n", e.what());
      for (auto& [id, owner] : owners_) {
        Job& job = *owner.job;
        for (int s = 0; s < std::max(1, job.requests_[static_cast<std::size_t>(owner.prompt)].n); ++s) {
          JobEvent ev;
          ev.finished = true, ev.prompt = owner.prompt;
          ev.completion.request = id, ev.completion.sample = s, ev.completion.finish_reason = "error";
          ev.completion.error = std::string("engine failure: ") + e.what();
          deliver(job, std::move(ev));
        }
      }
      owners_.clear();
      std::lock_guard lock(mutex_);
      stopping_ = true;
      outstanding_ = 0;
      return;
    }
    metrics_.publish(engine_->metrics());
  }
}

void EngineService::deliver(Job& job, JobEvent event) {
  {
    std::lock_guard lock(job.mutex_);
    if (event.finished) job.unfinished_ -= 1;
    job.events_.push_back(std::move(event));
  }
  job.ready_.notify_all();
}

void EngineService::on_token(const engine::TokenEvent& e) {
  const Owner& owner = owners_.at(e.request);
  Job& job = *owner.job;
  const auto p = static_cast<std::size_t>(owner.prompt), s = static_cast<std::size_t>(e.sample);
  if (job.has_token_[p][s]) metrics_.observe_itl(seconds(e.time - job.last_token_[p][s]));
  else metrics_.observe_ttft(seconds(e.time - job.arrival_));
  job.has_token_[p][s] = true;
  job.last_token_[p][s] = e.time;
  JobEvent ev;
  ev.prompt = owner.prompt;
  ev.token = e;
  deliver(job, std::move(ev));
}

void EngineService::on_finish(const engine::Completion& c) {
  auto it = owners_.find(c.request);
  HG_CHECK(it != owners_.end(), "EngineService: a completion of unknown request ", c.request);
  const std::shared_ptr<Job> job = it->second.job;
  JobEvent ev;
  ev.finished = true;
  ev.prompt = it->second.prompt;
  ev.completion = c;
  bool last = false;
  {
    std::lock_guard lock(job->mutex_);
    last = job->unfinished_ == 1;
  }
  if (last) {  // its room in the queue is back before its client hears it is done
    metrics_.observe_request(seconds(Clock::now() - job->arrival_));
    for (engine::RequestId id : job->ids_) owners_.erase(id);
    std::lock_guard lock(mutex_);
    outstanding_ -= job->samples_;
  }
  deliver(*job, std::move(ev));
}

}  // namespace hydragen::server
