// `hydragen serve`: flags -> model, tokenizer, chat template -> ServerStack; serves until
// SIGINT or SIGTERM, then stops accepting, lets what runs finish within --shutdown-timeout
// (cancelling the rest) and exits 0.
#include "serve.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "cli_parse.h"
#include "device_choice.h"
#include "hydragen/error.h"
#include "model/presets.h"
#include "model_flags.h"
#include "server/server_stack.h"
#include "tokenizer/tokenizer.h"

namespace hydragen::cli {

namespace {

struct ServeOptions : ModelFlags {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string served_model_name;
  std::int64_t max_running = 256;
  std::int64_t max_queue = 1024;
  std::int64_t max_step_tokens = 2048;
  std::string chat_template;
  double shutdown_timeout = 30;
  std::int64_t max_body_bytes = std::int64_t{16} << 20;
};

void run_serve(const ServeOptions& o) {
  check_model_flags(o);
  if (!o.chat_template.empty() && !std::filesystem::is_regular_file(o.chat_template))
    usage_error("--chat-template: '", o.chat_template, "' is not a file");
  const std::string device = pick_device(o.device);
  HG_CHECK(o.model_dir.empty() || std::filesystem::is_directory(o.model_dir), "-m: '", o.model_dir,
           "' is not a directory");
  const ModelConfig config = o.model_dir.empty() ? load_preset(o.random_preset) : load_model_config(o.model_dir);
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::int32_t> eos;
  if (!o.model_dir.empty()) {
    tokenizer = load_model_tokenizer(o.model_dir, config.vocab_size);
    eos = model_eos_ids(o.model_dir, tokenizer.get(), config.vocab_size);
  }
  // The model's template (or --chat-template); a model without one serves completions only.
  std::optional<chat::ChatTemplateSource> chat_template;
  if (!o.chat_template.empty() || !o.model_dir.empty()) {
    try {
      chat_template = chat::load_chat_template(o.model_dir, o.chat_template);
    } catch (const chat::TemplateError&) {
      throw;
    } catch (const Error& e) {
      if (!o.chat_template.empty()) throw;
      std::fprintf(stderr, "serve: no chat template (%s): /v1/chat/completions answers 400; give --chat-template FILE\n",
                   e.what());
    }
  }
  if (chat_template && !tokenizer) usage_error("--chat-template: the model has no tokenizer to encode the chat with");

  const auto runner = make_model_runner(o, device, config, runner_options_of(o));
  server::StackOptions stack;
  stack.served_model_name = !o.served_model_name.empty() ? o.served_model_name
                            : !o.model_dir.empty() ? std::filesystem::path(o.model_dir).lexically_normal().filename().string()
                                                   : o.random_preset;
  if (stack.served_model_name.empty()) stack.served_model_name = "hydragen";
  stack.http.host = o.host;
  stack.http.port = o.port;
  stack.http.api_key = o.api_key;
  stack.http.max_body_bytes = static_cast<std::size_t>(o.max_body_bytes);
  stack.limits.max_running = std::min(o.max_running, o.max_batch);
  stack.limits.max_queue = o.max_queue;
  stack.engine.attention = parse_mode(o.attention);
  stack.engine.max_step_tokens = o.max_step_tokens;
  stack.engine.max_running = stack.limits.max_running;
  stack.eos_ids = eos;
  stack.shutdown_deadline = std::chrono::milliseconds(static_cast<std::int64_t>(o.shutdown_timeout * 1000));

  // SIGINT / SIGTERM are taken by sigwait here, never delivered to another thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  server::ServerStack server(*runner, tokenizer.get(), chat_template, stack);
  const int port = server.start();
  std::fprintf(stderr, "serve: model '%s' on %s (%s attention, %lld KV pages of %d tokens)\n",
               stack.served_model_name.c_str(), runner->device_name().c_str(), o.attention.c_str(),
               static_cast<long long>(runner->kv_pages()), runner->page_size());
  std::fprintf(stderr, "serve: listening on http://%s:%d\n", o.host.c_str(), port);
  std::fflush(stderr);
  int signal = 0;
  sigwait(&signals, &signal);
  std::fprintf(stderr, "serve: %s: stopping (at most %.0f s for the requests running)\n",
               signal == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_timeout);
  server.shutdown();
  std::fprintf(stderr, "serve: stopped\n");
}

}  // namespace

void register_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  ServeOptions* p = o.get();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "An OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics.\n"
      "Binds 127.0.0.1 by default. SIGINT/SIGTERM: stop accepting, finish or cancel what runs, exit 0.");
  add_model_source_flags(*cmd, *o);
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option_function<std::string>(
         "--port", [p](const std::string& t) { p->port = static_cast<int>(parse_integer(t, "--port", 0, 65535)); },
         "Port (0: an ephemeral one, printed at start)")
      ->type_name("N")
      ->default_str("8000");
  cmd->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' on /v1/ endpoints");
  cmd->add_option("--served-model-name", o->served_model_name, "The model's name in the API (default: the directory's)");
  cmd->add_option_function<std::string>(
         "--max-running", [p](const std::string& t) { p->max_running = parse_integer(t, "--max-running", 1, 1 << 20); },
         "Most sequences running at once")
      ->type_name("N")
      ->default_str("256");
  cmd->add_option_function<std::string>(
         "--max-queue", [p](const std::string& t) { p->max_queue = parse_integer(t, "--max-queue", 0, 1 << 24); },
         "Most sequences waiting beyond --max-running; past it requests get 503")
      ->type_name("N")
      ->default_str("1024");
  cmd->add_option_function<std::string>(
         "--max-step-tokens",
         [p](const std::string& t) { p->max_step_tokens = parse_integer(t, "--max-step-tokens", 1, 1 << 24); },
         "Rows of one step (decode rows first, prefill chunks in the rest)")
      ->type_name("N")
      ->default_str("2048");
  cmd->add_option("--chat-template", o->chat_template, "A Jinja chat template file instead of the model's");
  cmd->add_option_function<std::string>(
         "--shutdown-timeout", [p](const std::string& t) { p->shutdown_timeout = parse_float(t, "--shutdown-timeout"); },
         "Seconds the requests running may take after SIGINT/SIGTERM before they are cancelled")
      ->type_name("S")
      ->default_str("30");
  cmd->add_option_function<std::string>(
         "--max-body", [p](const std::string& t) { p->max_body_bytes = parse_bytes(t, "--max-body"); },
         "Largest request body (413 past it)")
      ->type_name("SIZE")
      ->default_str("16M");
  add_engine_flags(*cmd, *o, "KV pool size (e.g. 20G, 512M); default: 1 GiB (CPU), the free memory after the weights (CUDA)");
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace hydragen::cli
