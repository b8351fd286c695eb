"""A step of a model served by llama-server, with its tool call constrained by mm's grammar.

llama-server's OpenAI endpoint refuses a grammar beside ``tools`` and, with no
``tools``, the model is left to guess the tools' format from a description mm
would have to write in each model's own words. So a constrained step uses
llama-server's own two endpoints instead:

1. ``POST /apply-template`` with the OpenAI body, tools included: the server
   renders the prompt with the model's own chat template, so the model reads
   its tools in the format it was trained on (Qwen's ``<tools>`` block, a Llama
   template's, whatever the GGUF ships), and past calls and results as it
   knows them. Nothing is generated; it takes milliseconds.
2. ``POST /completion`` with that prompt and the grammar of
   mmd/models/grammar.py: the step is words, or one valid call that ends the
   step. The call comes back as text; recovery (mmd/models/recovery.py)
   turns it into a call, as for any local model.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from mmd.models import grammar
from mmd.models._http import MAX_TOKENS, Accumulator, HttpModel, decode_json, short
from mmd.models.base import Choice, Completion, Lead, ModelError, OnRetry, OnText, Timings


async def constrained_step(
    http: HttpModel,
    root: str,
    chat_body: dict[str, Any],
    tools: list[Any],
    *,
    on_text: OnText | None,
    on_retry: OnRetry | None,
    lead: Lead = "free",
) -> Completion:
    """One streamed step: the chat body rendered by the server's template, then completed under the grammar.

    *chat_body* is the OpenAI request (messages, tools, max_tokens, temperature, cache_prompt).
    Errors: ModelError as for any step; one naming /apply-template when the server cannot render.
    """
    rendered = await http.post_json(root + "/apply-template", _template_body(chat_body), on_retry)
    prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
    if not isinstance(prompt, str):
        raise ModelError(f"{http.label}: /apply-template answered without a prompt: {short(rendered)}")
    body: dict[str, Any] = {
        "prompt": prompt,
        "grammar": grammar.call_grammar(tools, lead=lead),
        "stream": True,
        "n_predict": chat_body.get("max_tokens", -1),
        "cache_prompt": bool(chat_body.get("cache_prompt", True)),
    }
    if "temperature" in chat_body:
        body["temperature"] = chat_body["temperature"]
    told = instructions(prompt, chat_body.get("messages"))
    return await http.post(
        body, lambda: CompletionStream(on_text, http.label, told), on_retry, url=root + "/completion"
    )


# Characters in a row of the model's instructions a reply must repeat to count as repeating them. Measured
# with the 1.5B on contrib/eval: after a call that worked it sometimes went on with its chat template's tool
# preamble and the tools' JSON ("You may call one or more functions to assist with the user query. …") for
# 400 tokens, 20 s, before mm asked it again for an answer. An answer that quotes a description does so
# for a phrase, not for this long a run of the prompt's text, JSON and all.
ECHO_RUN = 160


def instructions(prompt: str, messages: Any) -> str:
    """The part of a rendered *prompt* before the first user message: the system message, the tools as
    the template shows them, the template's own words. "" when the first user message is not found."""
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, msgspec.Raw):  # a form kept encoded (openai.Wire)
            message = msgspec.json.decode(message)
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            at = prompt.find(content) if isinstance(content, str) and content else -1
            return prompt[:at] if at > 0 else ""
    return ""


# Share of the model's first-token probability the options must hold together for its pick to count: below
# it, the model would rather answer the request itself than name an option ("pong", a haiku), and the
# grammar would only force its hand. Measured with bench/bench_skillpick.py (docs/loops-and-recovery.md).
MIN_OPTION_MASS = 0.25
# Top tokens llama-server reports the probability of, for the mass above.
_N_PROBS = 20


async def constrained_choice(
    http: HttpModel, root: str, chat_body: dict[str, Any], options: list[str], default: str
) -> Choice:
    """One of *options* as the model picks it greedily, or *default* when the model would rather say something
    else: its first token puts less than MIN_OPTION_MASS on the options' first tokens.

    *chat_body* is the OpenAI request (messages); rendered by the server's template, then completed under a
    grammar of the options with the top tokens' probabilities. Errors: ModelError as for any step.
    """
    rendered = await http.post_json(root + "/apply-template", _template_body(chat_body), None)
    prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
    if not isinstance(prompt, str):
        raise ModelError(f"{http.label}: /apply-template answered without a prompt: {short(rendered)}")
    body = {
        "prompt": prompt,
        "grammar": grammar.choice_grammar(options),
        "n_predict": 8 + max(len(o) for o in options),
        "temperature": 0,
        "n_probs": _N_PROBS,
        "cache_prompt": bool(chat_body.get("cache_prompt", True)),
    }
    answer = await http.post_json(root + "/completion", body, None)
    if not isinstance(answer, dict):
        raise ModelError(f"{http.label}: /completion answered {short(answer)}")
    text = answer.get("content")
    picked = text.strip() if isinstance(text, str) else ""
    if picked not in options:
        return Choice(option=default)
    probabilities = answer.get("completion_probabilities")
    mass = option_mass(probabilities, options)
    if mass is not None and mass < MIN_OPTION_MASS:
        return Choice(option=default)
    return Choice(option=picked, probability=option_mass(probabilities, [picked]))


def option_mass(probabilities: Any, options: list[str]) -> float | None:
    """The probability the first generated token's top tokens put on a start of one of *options* (tokens
    that begin an option: "release" and "re" for "release-ops"); None when the server sent none."""
    if not isinstance(probabilities, list) or not probabilities or not isinstance(probabilities[0], dict):
        return None
    top = probabilities[0].get("top_logprobs") or probabilities[0].get("top_probs")
    if not isinstance(top, list):
        return None
    mass = 0.0
    for entry in top:
        if not isinstance(entry, dict):
            continue
        token, logprob = entry.get("token"), entry.get("logprob")
        if (
            isinstance(token, str)
            and token.strip()
            and isinstance(logprob, int | float)
            and not isinstance(logprob, bool)
            and math.isfinite(logprob)
            and any(o.startswith(token) for o in options)
        ):
            mass += math.exp(min(logprob, 0.0))
    return min(mass, 1.0)


def _template_body(chat_body: dict[str, Any]) -> dict[str, Any]:
    keep = ("messages", "tools")
    return {k: v for k, v in chat_body.items() if k in keep}


class CompletionStream(Accumulator):
    """Parses llama-server's ``/completion`` events: ``content`` deltas, then one with ``stop``.

    With *told* (the prompt's instructions, :func:`instructions`), a reply whose last ECHO_RUN characters
    are a run of them is cut there, finish reason ``"echo"``: the model is repeating its prompt.
    """

    def __init__(self, on_text: OnText | None, label: str, told: str = "") -> None:
        super().__init__(on_text, label)
        self._told = told
        self._tail = ""  # the reply's last ECHO_RUN characters

    def feed(self, event: str, data: str) -> bool:
        return self._chunk(decode_json(data, self.label))

    def feed_body(self, obj: Any) -> None:
        self._chunk(obj)

    def _chunk(self, obj: Any) -> bool:
        obj = self.checked(obj)
        content = obj.get("content") or ""
        self.add_text(content)
        if self._told and content:
            self._tail = (self._tail + content)[-ECHO_RUN:]
            if len(self._tail) == ECHO_RUN and self._tail in self._told:
                self.finish_reason, self.cut = "echo", True
                return True
        if not obj.get("stop"):
            return False
        self.usage(obj.get("tokens_evaluated"), obj.get("tokens_predicted"))
        self.timings = timings(obj.get("timings")) or self.timings
        self.finish_reason = "length" if obj.get("stop_type") == "limit" else "stop"
        return True


def timings(obj: Any) -> Timings | None:
    """llama-server's ``timings`` object (``cache_n``, ``prompt_n``, ``prompt_ms``, ``predicted_n``,
    ``predicted_ms``) as Timings; None when there is none. A field that is missing or not a
    non-negative number counts as 0 (``cache_n`` is missing in older builds), as does a count past
    MAX_TOKENS: the report is only informational, and 10**40 could not be stored with the step."""
    if not isinstance(obj, dict):
        return None

    def number(key: str) -> float:
        value = obj.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return 0.0
        try:
            value = float(value)
        except OverflowError:  # an int past any float
            return 0.0
        return max(value, 0.0) if math.isfinite(value) else 0.0

    def tokens(key: str) -> int:
        value = number(key)
        return int(value) if value <= MAX_TOKENS else 0

    cached = tokens("cache_n")
    return Timings(
        prompt_tokens=tokens("prompt_n") + cached,
        cached_tokens=cached,
        prompt_ms=number("prompt_ms"),
        gen_tokens=tokens("predicted_n"),
        gen_ms=number("predicted_ms"),
    )
