"""Shared by the eval-ops actions: append the argv this action received to argv.log, one JSON line.

`mm eval` judges a run only from this file: the program's name, then its
arguments, exactly as the operating system passed them. The log is
$MM_ARGV_LOG when set, else argv.log in the working directory.
"""

import json
import os
import sys


def record() -> list[str]:
    argv = [os.path.basename(sys.argv[0]), *sys.argv[1:]]
    with open(os.environ.get("MM_ARGV_LOG", "argv.log"), "a", encoding="utf-8") as log:
        log.write(json.dumps({"argv": argv}) + "\n")
    return sys.argv[1:]
