"""Policy around tool calls: ``preToolCall`` / ``postToolCall`` hooks (docs/hooks.md).

Kept free of imports: the config package imports :mod:`mmd.policy.spec`,
and :mod:`mmd.policy.hooks` imports the tools, which import the config.
"""
