#include "server/server_stack.h"

namespace hydragen::server {

ServerStack::ServerStack(engine::ModelRunner& runner, const Tokenizer* tokenizer,
                         const std::optional<chat::ChatTemplateSource>& chat_template, StackOptions options)
    : options_(std::move(options)) {
  model_.name = options_.served_model_name;
  model_.tokenizer = tokenizer;
  if (chat_template) {
    template_.emplace(chat::Template::parse(chat_template->source));
    model_.chat_template = &*template_;
    model_.bos_token = chat_template->bos_token;
    model_.eos_token = chat_template->eos_token;
  }
  model_.eos_ids = options_.eos_ids;
  model_.context = runner.config().max_position_embeddings;
  model_.vocab = runner.config().vocab_size;
  model_.max_n = options_.max_n;
  model_.max_sequences = options_.limits.max_running + options_.limits.max_queue;
  engine::EngineOptions engine_options = options_.engine;
  engine_options.max_running = std::min(engine_options.max_running, options_.limits.max_running);
  if (tokenizer)
    engine_options.detokenize = [tokenizer](std::span<const std::int32_t> ids) { return tokenizer->decode(ids, true); };
  service_ = std::make_unique<EngineService>(runner, engine_options, options_.limits, metrics_);
  HttpOptions http = options_.http;
  if (http.threads <= 0)
    http.threads = static_cast<int>(std::min<std::int64_t>(options_.limits.max_running + options_.limits.max_queue + 8, 1024));
  http_ = std::make_unique<HttpServer>(*service_, model_, metrics_, http);
}

ServerStack::~ServerStack() { shutdown(); }

int ServerStack::start() {
  port_ = http_->bind();
  thread_ = std::thread([this] { http_->run(); });
  // stop() before the listener runs would be lost: wait for it (bounded).
  for (int i = 0; i < 2000 && !http_->running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return port_;
}

void ServerStack::shutdown() {
  if (stopped_) return;
  stopped_ = true;
  http_->refuse_new();
  service_->shutdown(options_.shutdown_deadline);
  http_->wait_idle(std::chrono::seconds(5));  // the streams write their last chunks
  http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace hydragen::server
