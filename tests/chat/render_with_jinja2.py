#!/usr/bin/env python3
"""Renders the chat-template cases with jinja2 exactly as transformers' apply_chat_template does
and writes what jinja2 gives to tests/fixtures/chat/jinja2_expected.json, which the C++ test
ChatTemplateJinja2 compares hydragen's renders against, byte for byte.

Cases: every fixture template (fixtures.json) x every conversation (conversations.json), and the
language cases (language_cases.txt), all in tests/fixtures/chat. Each expected result is the
output text, or the error jinja2 raised ("raised": true when it is the template's own
raise_exception, whose message hydragen must give too).

    render_with_jinja2.py           write jinja2_expected.json
    render_with_jinja2.py --check   exit 1 when jinja2_expected.json is not what jinja2 renders now
"""
import argparse
import copy
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXTURES = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "chat"))
EXPECTED = os.path.join(FIXTURES, "jinja2_expected.json")
NOW = datetime.datetime(2024, 7, 26, 9, 5, 7)  # strftime_now's time on both sides


class Raised(jinja2.exceptions.TemplateError):
    """raise_exception(...) from the template itself."""


def make_env():
    """transformers' _compile_jinja_template: the sandbox, trim_blocks, lstrip_blocks,
    loopcontrols, {% generation %}, raise_exception, strftime_now and its own tojson."""

    class AssistantTracker(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise Raised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, template, context):
    """{"output": text} or {"error": "Type: message", "raised": bool}."""
    try:
        return {"output": env.from_string(template).render(**context)}
    except Raised as e:
        return {"error": str(e), "raised": True}
    except Exception as e:  # noqa: BLE001 - every other failure is a failure of the case
        return {"error": f"{type(e).__name__}: {e}", "raised": False}


def language_cases():
    """language_cases.txt: "### name", the template's lines (or "--- template json" and the
    template as one JSON string, for characters such as "\\r"), then optionally "--- context"
    and a JSON object."""
    with open(os.path.join(FIXTURES, "language_cases.txt"), encoding="utf-8", newline="") as f:
        text = f.read()
    cases, name, part, lines = [], None, None, {}

    def flush():
        if name is not None:
            context = json.loads("\n".join(lines["context"])) if lines["context"] else {}
            template = "\n".join(lines["template"])
            if lines["template json"]:
                assert not template, f"{name}: a template and a template json"
                template = json.loads("\n".join(lines["template json"]))
            cases.append({"id": "lang/" + name, "template": template, "context": context})

    for line in text.split("\n"):
        if line.startswith("### "):
            flush()
            name, part, lines = line[4:].strip(), "template", {"template": [], "template json": [], "context": []}
        elif line in ("--- context", "--- template json") and name is not None:
            part = line[4:]
        elif name is not None:
            lines[part].append(line)
    flush()
    return cases


def openai_messages(messages):
    """What vLLM hands a template for OpenAI messages (chat::template_messages on the C++ side):
    text parts joined by newlines, tool-call arguments strings parsed."""
    out = copy.deepcopy(messages)
    for m in out:
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(part["text"] for part in m["content"])
        for call in m.get("tool_calls") or []:
            if isinstance(call["function"].get("arguments"), str):
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


def fixture_context(fixture, conversation):
    """What transformers passes: messages, tools, documents, add_generation_prompt, the special
    tokens, then the extra kwargs (chat::chat_context builds the same on the C++ side). An
    "openai" conversation's messages go through openai_messages first."""
    messages = conversation["messages"]
    context = {
        "messages": openai_messages(messages) if conversation.get("openai") else messages,
        "tools": conversation.get("tools"),
        "documents": None,
        "add_generation_prompt": conversation.get("add_generation_prompt", True),
        "bos_token": fixture["bos_token"],
        "eos_token": fixture["eos_token"],
    }
    context.update(conversation.get("extra", {}))
    return context


def expected_cases(env):
    with open(os.path.join(FIXTURES, "fixtures.json"), encoding="utf-8") as f:
        fixtures = json.load(f)
    with open(os.path.join(FIXTURES, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    cases = []
    for fx in fixtures:
        with open(os.path.join(FIXTURES, fx["file"]), encoding="utf-8", newline="") as f:
            template = f.read()
        for conv in conversations:
            case = {"id": f"{fx['file']}/{conv['name']}", "fixture": fx["file"], "conversation": conv["name"]}
            case.update(render(env, template, fixture_context(fx, conv)))
            cases.append(case)
    for case in language_cases():
        case.update(render(env, case["template"], case["context"]))
        cases.append(case)
    ids = [c["id"] for c in cases]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    args = ap.parse_args()

    cases = expected_cases(make_env())
    doc = {"jinja2": jinja2.__version__, "now": NOW.strftime("%Y-%m-%dT%H:%M:%S"), "cases": cases}
    counts = {k: sum(1 for c in cases if p(c)) for k, p in
              {"outputs": lambda c: "output" in c, "raised": lambda c: c.get("raised"),
               "other errors": lambda c: "error" in c and not c["raised"]}.items()}
    summary = f"{len(cases)} cases (jinja2 {jinja2.__version__}): " + ", ".join(f"{v} {k}" for k, v in counts.items())
    if not args.check:
        with open(EXPECTED, "w", encoding="utf-8", newline="\n") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {EXPECTED}: {summary}")
        return 0

    with open(EXPECTED, encoding="utf-8") as f:
        committed = json.load(f)
    stale = []
    if committed.get("now") != doc["now"]:
        stale.append("now")
    old = {c["id"]: c for c in committed.get("cases", [])}
    new = {c["id"]: c for c in cases}
    stale += [i for i in new if old.get(i) != new[i]] + [i for i in old if i not in new]
    if stale:
        print(f"{EXPECTED} is not what jinja2 {jinja2.__version__} renders for {len(stale)} cases "
              f"(first: {', '.join(stale[:5])}); run tests/chat/render_with_jinja2.py")
        return 1
    print(f"jinja2_expected.json is current: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
