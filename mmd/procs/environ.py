"""What a child of the daemon gets of the daemon's environment: everything but the secrets.

The daemon holds the provider API keys in its environment (README: "keys never
go in files, logs or the store"). A child that inherited them could print them
(``env``), and what a tool prints goes to the store and to the next model
request. So every child's environment is built here, by the supervisor's one
spawn function, and leaves out every variable that holds a secret:

- the names mm itself uses for secrets, registered with :func:`withhold` when a
  config is read: each provider's ``api_key_env``, the variables MCP headers
  and credential-looking MCP ``env:`` entries refer to;
- the names that look like secrets (:func:`looks_secret`): a ``_``-separated
  word KEY, TOKEN, SECRET, PASSWORD, CREDENTIALS, AUTH, DSN, PWD... (``OPENAI_API_KEY``,
  ``GITHUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``SENTRY_DSN``, ``MYSQL_PWD``), or PASSWORD, PASSWD, SECRET,
  APIKEY inside a word (``PGPASSWORD``). Codex leaves out ``*KEY*``,
  ``*SECRET*`` and ``*TOKEN*`` by default; matching whole words instead keeps
  ``KEYTIMEOUT`` or ``TOKENIZERS_PARALLELISM`` while catching the same keys.

An agent hands one on explicitly with ``pass_env: [NAME]``. The variables mm
sets for the call (``MM_SESSION_ID``, ``MM_IDEMPOTENCY_KEY``...) and a declared
tool's literal ``env:`` are added after the filter: they are mm's own, not the
daemon's.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Iterable, Mapping

# Words of a variable's name (split at "_", upper-cased) that mark it as holding a secret.
SECRET_WORDS = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWORDS",
        "PASSWD",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "COOKIE",
        "COOKIES",
        "PAT",
        "AUTH",  # ANTHROPIC_AUTH, NPM_CONFIG__AUTH, DOCKER_AUTH_CONFIG
        "AUTHTOKEN",  # NGROK_AUTHTOKEN, npm's //registry/:_authToken
        "DSN",  # SENTRY_DSN: a URL that carries its key
        "PWD",  # MYSQL_PWD (PWD itself is ESSENTIAL)
    }
)
# Parts that mark a secret even inside a longer word: PGPASSWORD, MYSECRET, OPENAIAPIKEY.
SECRET_PARTS = ("PASSWORD", "PASSWD", "SECRET", "APIKEY")
# Never withheld, whatever a config names: no child works without them, and none holds a secret.
ESSENTIAL = frozenset({"PATH", "HOME", "PWD", "SHELL", "USER", "LOGNAME", "TERM", "LANG", "TMPDIR", "TZ"})
# Names a secret word is part of that hold no secret, only where one is kept: the ssh agent's socket (a
# command the model runs may push with your keys through it, as from your shell; its keys stay in the agent).
NOT_SECRET = frozenset({"SSH_AUTH_SOCK", "OLDPWD"})

# Names a config read by this daemon uses for secrets. It only grows: a name that
# held a key once stays withheld for the daemon's life, even after the config changes.
_withheld: set[str] = set()


@functools.lru_cache(maxsize=1024)  # asked for every variable of every spawn; the names are few and repeat
def looks_secret(name: str) -> bool:
    """Whether the variable *name* looks like it holds a secret (see the module docstring)."""
    upper = name.upper()
    if upper in ESSENTIAL or upper in NOT_SECRET:
        return False
    return any(word in SECRET_WORDS for word in upper.split("_")) or any(p in upper for p in SECRET_PARTS)


def withhold(names: Iterable[str]) -> None:
    """Leave the variables *names* out of every child spawned from now on (unless passed on).

    Errors: none; essential names (PATH, HOME...) are never withheld.
    """
    _withheld.update(n for n in names if n and n not in ESSENTIAL)


def is_secret(name: str) -> bool:
    """Whether *name* is left out of a child's environment unless passed on explicitly."""
    return name in _withheld or looks_secret(name)


def child_environment(
    extra: Mapping[str, str],
    *,
    inherit: bool = True,
    pass_env: Collection[str] = (),
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one child: the daemon's without its secrets, then *extra*.

    With ``inherit=False`` nothing of the daemon's environment is taken (an MCP
    stdio server builds its own small one) except the names in *pass_env*.
    A name in *pass_env* is handed on even when it looks like a secret: the
    agent file asked for it. *environ* defaults to ``os.environ``.

    Errors: none.
    """
    source = os.environ if environ is None else environ
    if inherit:
        kept = _daemon_kept() if environ is None else None
        if kept is None:
            kept = {k: v for k, v in source.items() if not is_secret(k)}
        base = {**kept, **{k: source[k] for k in pass_env if k in source}}
    else:
        base = {k: source[k] for k in pass_env if k in source}
    return {**base, **extra}


# The daemon's environment less its secrets, and what it was made from: os.environ's raw bytes and
# how many names were withheld (that set only grows). A spawn compares the two (a C-level dict
# comparison) instead of decoding and judging every variable again: 40 variables cost ~500 Python
# calls, a quarter of a tool call's supervision.
_kept_cache: tuple[dict[bytes, bytes], int, dict[str, str]] | None = None


def _daemon_kept() -> dict[str, str] | None:
    global _kept_cache
    raw = getattr(os.environ, "_data", None)  # CPython's bytes mapping behind os.environ
    if not isinstance(raw, dict):
        return None
    cached = _kept_cache
    if cached is not None and cached[1] == len(_withheld) and cached[0] == raw:
        return cached[2]
    kept = {k: v for k, v in os.environ.items() if not is_secret(k)}
    _kept_cache = (dict(raw), len(_withheld), kept)
    return kept


def absolute_path(value: str) -> tuple[str, list[str]]:
    """The PATH *value* with only its absolute folders, in order, and the entries left out (an empty
    entry, ``.``, ``bin``, ``./node_modules/.bin``). None left: the C library's default folders.

    A relative entry names a folder of whatever folder a lookup starts from, and mm starts its children in
    the project: with ``.`` or an empty entry (``PATH=/usr/bin:``, a trailing colon) in the daemon's PATH,
    the ``bash`` of a bash call, the ``git`` of an undo snapshot, a hook's program, and each program a
    child names in turn, were a cloned repository's own ``./bash``, ``./git``, ``./jq``, run with your
    rights before you trusted anything of it."""
    parts = value.split(os.pathsep)
    kept = [p for p in parts if os.path.isabs(p)]
    return os.pathsep.join(kept) or "/usr/bin:/bin", [p for p in parts if not os.path.isabs(p)]


def keep_absolute_path() -> list[str]:
    """Leave only the absolute folders in the daemon's own PATH (:func:`absolute_path`), which every lookup
    of a program reads (posix_spawnp, Popen, shutil.which) and every child inherits; the entries left out.

    Errors: none."""
    value = os.environ.get("PATH")
    if value is None:
        return []
    kept, dropped = absolute_path(value)
    if dropped:
        os.environ["PATH"] = kept
    return dropped
