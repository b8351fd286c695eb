#!/usr/bin/env bash
# A Claude Code-style PreToolUse guard: refuse `rm -rf /`-like shell commands.
#
# Reads the hook's JSON on stdin ({tool_name, tool_input: {command}, ...}),
# exits 2 with the reason on stderr for a recursive rm of /, /*, ~ or $HOME
# (or anything with --no-preserve-root), and exits 0 for everything else.
# Runs unchanged as a Claude Code hook (tool "Bash") and as an mm hook (tool "bash").
# No jq: python3 reads the two fields. An example of a guard, not a sandbox.
set -u

input=$(cat)
field() {
    python3 -c '
import json, sys
value = json.loads(sys.argv[1])
for key in sys.argv[2:]:
    value = value.get(key) if isinstance(value, dict) else None
print(value if isinstance(value, str) else "", end="")
' "$input" "$@"
}

case "$(field tool_name)" in
bash | Bash) ;;
*) exit 0 ;;
esac
command=$(field tool_input command | tr -s '[:space:]' ' ')

rm_word='(^|[^[:alnum:]_./-])rm '
recursive=' (-[[:alnum:]]*[rR][[:alnum:]]*|--recursive)( |$)'
root_target=' ("?/\*?"?|"?~/?"?|"?\$HOME/?"?|"?\$\{HOME\}/?"?)( |$|;|&|\||\))'

if grep -Eq -- '--no-preserve-root' <<<"$command" ||
    { grep -Eq -- "$rm_word" <<<"$command" &&
        grep -Eq -- "$recursive" <<<"$command" &&
        grep -Eq -- "$root_target" <<<"$command"; }; then
    echo "Blocked by guard.sh: this command removes / or the home folder recursively ($command)." \
        "Name the exact folder to delete instead." >&2
    exit 2
fi
exit 0
