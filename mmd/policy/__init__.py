"""Policy around tool calls: consent and ``preToolCall`` / ``postToolCall`` hooks; both return verdicts."""
