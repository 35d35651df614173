// OpenAI chat-completions messages in the form Hugging Face templates are written for, as vLLM
// hands them over: a content given as a list of text parts becomes one string (the texts joined
// by "\n"), and a tool call's function.arguments given as a JSON string becomes the object it
// holds (templates print it with tojson). Everything else is passed through unchanged.
#pragma once

#include <nlohmann/json.hpp>

namespace hydragen::chat {

// Throws hydragen::Error naming the field ("messages[1].content[0].type", ...) for a message
// that is not an object, a part that is not {"type": "text", "text": str} (images, audio), or
// arguments that are not a JSON object: the request's fault (HTTP 400).
nlohmann::ordered_json template_messages(const nlohmann::ordered_json& messages);

}  // namespace hydragen::chat
