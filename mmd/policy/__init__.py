"""Policy around a turn: consent, and hooks with Claude Code's contract; both return verdicts."""
