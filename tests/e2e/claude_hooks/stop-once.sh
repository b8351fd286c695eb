#!/bin/bash
INPUT=$(cat)
if [ "$(echo "$INPUT" | jq -r '.stop_hook_active')" = "true" ]; then
  exit 0  # Allow Claude to stop
fi
echo '{"decision": "block", "reason": "Must be provided when Claude is blocked from stopping"}'
