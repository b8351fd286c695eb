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

from mmd.models import grammar
from mmd.models._http import Accumulator, HttpModel, decode_json, excerpt
from mmd.models.base import Completion, ModelError, OnRetry, OnText, Timings


async def constrained_step(
    http: HttpModel,
    root: str,
    chat_body: dict[str, Any],
    tools: list[Any],
    *,
    on_text: OnText | None,
    on_retry: OnRetry | None,
    words_first: bool = False,
) -> Completion:
    """One streamed step: the chat body rendered by the server's template, then completed under the grammar.

    *chat_body* is the OpenAI request (messages, tools, max_tokens, temperature, cache_prompt).
    Errors: ModelError as for any step; one naming /apply-template when the server cannot render.
    """
    rendered = await http.post_json(root + "/apply-template", _template_body(chat_body), on_retry)
    prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
    if not isinstance(prompt, str):
        raise ModelError(f"{http.label}: /apply-template answered without a prompt: {excerpt(str(rendered))}")
    body: dict[str, Any] = {
        "prompt": prompt,
        "grammar": grammar.call_grammar(tools, words_first=words_first),
        "stream": True,
        "n_predict": chat_body.get("max_tokens", -1),
        "cache_prompt": bool(chat_body.get("cache_prompt", True)),
    }
    if "temperature" in chat_body:
        body["temperature"] = chat_body["temperature"]
    return await http.post(
        body, lambda: CompletionStream(on_text, http.label), on_retry, url=root + "/completion"
    )


def _template_body(chat_body: dict[str, Any]) -> dict[str, Any]:
    keep = ("messages", "tools")
    return {k: v for k, v in chat_body.items() if k in keep}


class CompletionStream(Accumulator):
    """Parses llama-server's ``/completion`` events: ``content`` deltas, then one with ``stop``."""

    def feed(self, event: str, data: str) -> bool:
        return self._chunk(decode_json(data, self.label))

    def feed_body(self, obj: Any) -> None:
        self._chunk(obj)

    def _chunk(self, obj: Any) -> bool:
        obj = self.checked(obj)
        self.add_text(obj.get("content") or "")
        if not obj.get("stop"):
            return False
        self.input_tokens = _count(obj.get("tokens_evaluated")) or self.input_tokens
        self.output_tokens = _count(obj.get("tokens_predicted")) or self.output_tokens
        self.timings = timings(obj.get("timings")) or self.timings
        self.finish_reason = "length" if obj.get("stop_type") == "limit" else "stop"
        return True


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def timings(obj: Any) -> Timings | None:
    """llama-server's ``timings`` object (``cache_n``, ``prompt_n``, ``prompt_ms``, ``predicted_n``,
    ``predicted_ms``) as Timings; None when there is none. A field that is missing or not a
    non-negative number counts as 0 (``cache_n`` is missing in older builds)."""
    if not isinstance(obj, dict):
        return None

    def number(key: str) -> float:
        value = obj.get(key)
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        return max(float(value), 0.0) if ok else 0.0

    cached = int(number("cache_n"))
    return Timings(
        prompt_tokens=int(number("prompt_n")) + cached,
        cached_tokens=cached,
        prompt_ms=number("prompt_ms"),
        gen_tokens=int(number("predicted_n")),
        gen_ms=number("predicted_ms"),
    )
