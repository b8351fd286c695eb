"""Shared by the three demo actions: append the argv a script received to a log, one JSON line each.

The log is $MM_ARGV_LOG, else argv.log in the working directory. Tests and
`mm eval` judge a run only from this file, never from the model's text.
"""

import json
import os
import sys


def record(name: str) -> list[str]:
    args = sys.argv[1:]
    entry = {"tool": name, "argv": args, "idempotency_key": os.environ.get("MM_IDEMPOTENCY_KEY")}
    with open(os.environ.get("MM_ARGV_LOG", "argv.log"), "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")
    return args
