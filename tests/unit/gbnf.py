"""A recogniser for GBNF, llama.cpp's grammar format, as far as mmd/models/grammar.py writes it.

``parse(text)`` reads a grammar the way llama.cpp's parser does (src/llama-grammar.cpp,
``llama_grammar_parser``) and refuses what it refuses: an unknown escape, an undefined rule, a
quantifier with nothing before it, a newline inside a rule outside parentheses (except after ``|``),
repetitions past its limit of 2000 rules, left recursion. Repetitions are rewritten into rules as
llama.cpp rewrites them, so its limit and its left-recursion check see the same rules.

``Grammar.accepts(text)`` then matches the whole of *text* the way llama.cpp constrains decoding: a
set of stacks of "what comes next", advanced one code point at a time (``llama_grammar_accept``), and
the text is complete when some stack is empty (where llama.cpp lets the model stop). Token
terminals (``<think>``, ``<[42]>``) are not supported: grammar.py writes none.

Only for tests: tests/unit/models/test_grammar.py reads grammar.py's grammars with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_REPETITIONS = 2000  # llama.cpp's MAX_REPETITION_THRESHOLD

_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


def _word_char(c: str) -> bool:
    return c != "" and (c in "-0123456789" or "a" <= c <= "z" or "A" <= c <= "Z")


class GrammarError(ValueError):
    """A grammar llama.cpp would refuse."""


@dataclass(frozen=True)
class Chars:
    """One code point: in *ranges* (inclusive), or not in them when *negated*. ``.`` is an empty negation."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    def matches(self, char: str) -> bool:
        code = ord(char)
        return any(low <= code <= high for low, high in self.ranges) != self.negated


@dataclass(frozen=True)
class Ref:
    rule: str


Element = Chars | Ref
Alternative = tuple[Element, ...]
Position = tuple[str, int, int]  # rule, alternative, element: what comes next
Stack = tuple[Position, ...]


@dataclass
class Grammar:
    rules: dict[str, tuple[Alternative, ...]]
    written: list[str] = field(default_factory=list)  # the rules the text defines, in order

    def accepts(self, text: str, rule: str = "root") -> bool:
        """Whether *rule* matches the whole of *text*."""
        if rule not in self.rules:
            raise GrammarError(f"no rule {rule!r}")
        stacks = self._advance({((rule, k, 0),) if alt else () for k, alt in enumerate(self.rules[rule])})
        for char in text:
            moved: set[Stack] = set()
            for stack in stacks:
                if not stack:
                    continue
                name, k, i = stack[-1]
                element = self.rules[name][k][i]
                assert isinstance(element, Chars)
                if element.matches(char):
                    moved.add(stack[:-1] + self._next(stack[-1]))
            stacks = self._advance(moved)
            if not stacks:
                return False
        return () in stacks

    def _next(self, position: Position) -> Stack:
        name, k, i = position
        return ((name, k, i + 1),) if i + 1 < len(self.rules[name][k]) else ()

    def _advance(self, stacks: set[Stack]) -> set[Stack]:
        """Expand rule references on top of each stack until a character (or nothing) is on top."""
        todo, seen, done = list(stacks), set(), set()
        while todo:
            stack = todo.pop()
            if stack in seen:
                continue
            seen.add(stack)
            if not stack:
                done.add(stack)
                continue
            name, k, i = stack[-1]
            element = self.rules[name][k][i]
            if isinstance(element, Chars):
                done.add(stack)
                continue
            rest = stack[:-1] + self._next(stack[-1])
            for j, alt in enumerate(self.rules[element.rule]):
                todo.append((*rest, (element.rule, j, 0)) if alt else rest)
        return done


def parse(text: str) -> Grammar:
    """Read *text* as llama.cpp does; GrammarError where llama.cpp would refuse it."""
    parser = _Parser(text)
    pos = parser.space(0, newline_ok=True)
    while pos < len(text):
        pos = parser.rule(pos)
    rules = parser.rules
    undefined = sorted(parser.symbols.keys() - rules.keys())
    if undefined:
        raise GrammarError(f"undefined rules: {', '.join(undefined)}")
    _check_left_recursion(rules)
    return Grammar(rules, parser.written)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.rules: dict[str, tuple[Alternative, ...]] = {}
        self.symbols: dict[str, int] = {}  # llama.cpp's symbol_ids: names seen and generated
        self.written: list[str] = []

    def at(self, pos: int, length: int = 1) -> str:
        return self.text[pos : pos + length]

    def symbol(self, name: str) -> str:
        self.symbols.setdefault(name, len(self.symbols))
        return name

    def generated(self, base: str) -> str:
        return self.symbol(f"{base}_{len(self.symbols)}")

    def space(self, pos: int, newline_ok: bool) -> int:
        while pos < len(self.text):
            c = self.text[pos]
            if c == "#":
                while pos < len(self.text) and self.text[pos] not in "\r\n":
                    pos += 1
            elif c in " \t" or (newline_ok and c in "\r\n"):
                pos += 1
            else:
                break
        return pos

    def name(self, pos: int) -> int:
        end = pos
        while _word_char(self.at(end)):
            end += 1
        if end == pos:
            raise GrammarError(f"expecting a name at {self.at(pos, 20)!r}")
        return end

    def integer(self, pos: int) -> tuple[int, int]:
        end = pos
        while self.at(end) and self.at(end) in "0123456789":
            end += 1
        if end == pos:
            raise GrammarError(f"expecting an integer at {self.at(pos, 20)!r}")
        return int(self.text[pos:end]), end

    def char(self, pos: int) -> tuple[int, int]:
        """One code point of a literal or a class, and where the next starts."""
        c = self.at(pos)
        if not c:
            raise GrammarError("unexpected end of input")
        if c != "\\":
            return ord(c), pos + 1
        e = self.at(pos + 1)
        if e in _HEX_ESCAPES:
            size = _HEX_ESCAPES[e]
            digits = self.at(pos + 2, size)
            if len(digits) != size or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise GrammarError(f"expecting {size} hex digits at {self.at(pos, 20)!r}")
            return int(digits, 16), pos + 2 + size
        if e and e in _ESCAPES:
            return ord(_ESCAPES[e]), pos + 2
        raise GrammarError(f"unknown escape at {self.at(pos, 20)!r}")

    def rule(self, pos: int) -> int:
        end = self.name(pos)
        name = self.symbol(self.text[pos:end])
        pos = self.space(end, newline_ok=False)
        if self.at(pos, 3) != "::=":
            raise GrammarError(f"expecting ::= at {self.at(pos, 20)!r}")
        pos, alternatives = self.alternates(self.space(pos + 3, newline_ok=True), name, nested=False)
        self.rules[name] = alternatives
        self.written.append(name)
        if self.at(pos, 2) == "\r\n":
            pos += 2
        elif self.at(pos) in ("\r", "\n"):
            pos += 1
        elif pos < len(self.text):
            raise GrammarError(f"expecting a newline or the end at {self.at(pos, 20)!r}")
        return self.space(pos, newline_ok=True)

    def alternates(self, pos: int, name: str, nested: bool) -> tuple[int, tuple[Alternative, ...]]:
        pos, first = self.sequence(pos, name, nested)
        alternatives = [first]
        while self.at(pos) == "|":
            pos, seq = self.sequence(self.space(pos + 1, newline_ok=True), name, nested)
            alternatives.append(seq)
        return pos, tuple(alternatives)

    def sequence(self, pos: int, name: str, nested: bool) -> tuple[int, Alternative]:
        seq: list[Element] = []
        last = 0  # where the item a quantifier applies to starts
        weight = 1  # llama.cpp's n_prev_rules: how many rules repeating that item repeats
        while pos < len(self.text):
            c = self.text[pos]
            if c == '"':
                last, weight = len(seq), 1
                pos += 1
                while self.at(pos) != '"':
                    code, pos = self.char(pos)
                    seq.append(Chars(((code, code),)))
                pos = self.space(pos + 1, nested)
            elif c == "[":
                last, weight = len(seq), 1
                element, pos = self.char_class(pos)
                if element.ranges:  # llama.cpp writes nothing for [] and [^]
                    seq.append(element)
                pos = self.space(pos, nested)
            elif c in "<!":
                raise GrammarError("token terminals are not supported here")
            elif _word_char(c):
                end = self.name(pos)
                last, weight = len(seq), 1
                seq.append(Ref(self.symbol(self.text[pos:end])))
                pos = self.space(end, nested)
            elif c == "(":
                before = len(self.symbols)
                group = self.generated(name)
                pos, self.rules[group] = self.alternates(
                    self.space(pos + 1, newline_ok=True), name, nested=True
                )
                if self.at(pos) != ")":
                    raise GrammarError(f"expecting ')' at {self.at(pos, 20)!r}")
                last, weight = len(seq), max(1, len(self.symbols) - before)
                seq.append(Ref(group))
                pos = self.space(pos + 1, nested)
            elif c == ".":
                last, weight = len(seq), 1
                seq.append(Chars((), negated=True))
                pos = self.space(pos + 1, nested)
            elif c in "*+?{":
                (low, high), pos = self.quantifier(pos, nested)
                weight = self.repeat(seq, last, weight, low, high, name)
            else:
                break
        return pos, tuple(seq)

    def char_class(self, pos: int) -> tuple[Chars, int]:
        pos += 1
        negated = self.at(pos) == "^"
        pos += negated
        ranges = []
        while self.at(pos) != "]":
            low, pos = self.char(pos)
            high = low
            if self.at(pos) == "-" and self.at(pos + 1) != "]":
                high, pos = self.char(pos + 1)
            ranges.append((low, high))
        return Chars(tuple(ranges), negated), pos + 1

    def quantifier(self, pos: int, nested: bool) -> tuple[tuple[int, int | None], int]:
        c = self.text[pos]
        pos = self.space(pos + 1, nested)
        if c != "{":
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[c], pos
        if not self.at(pos).isdigit():
            raise GrammarError(f"expecting an integer at {self.at(pos, 20)!r}")
        low, pos = self.integer(pos)
        pos = self.space(pos, nested)
        high: int | None = low
        if self.at(pos) == ",":
            pos = self.space(pos + 1, nested)
            high = None
            if self.at(pos).isdigit():
                high, pos = self.integer(pos)
                pos = self.space(pos, nested)
        if self.at(pos) != "}":
            raise GrammarError(f"expecting '}}' at {self.at(pos, 20)!r}")
        if low > MAX_REPETITIONS:
            raise GrammarError("more repetitions than llama.cpp allows")
        if high is not None and high > MAX_REPETITIONS:
            high = None  # llama.cpp reads a maximum past its limit as no maximum
        if high is not None and high < low:
            raise GrammarError(f"{{{low},{high}}}: the maximum is below the minimum")
        return (low, high), self.space(pos + 1, nested)

    def repeat(
        self, seq: list[Element], last: int, weight: int, low: int, high: int | None, name: str
    ) -> int:
        """Rewrite the item at seq[last:] repeated low..high times as llama.cpp does; the new weight.

        S{m,n} is S m times then n-m nested optional rules (R1 ::= S |, Rk ::= S Rk-1 |);
        S{m,} is S m times then R ::= S R |.
        """
        if last == len(seq):
            raise GrammarError("a quantifier with nothing before it")
        item = tuple(seq[last:])
        total = high if high else (low or 1)
        if weight * total > MAX_REPETITIONS:
            raise GrammarError("repetitions make more rules than llama.cpp allows")
        del seq[last:]
        seq.extend(item * low)
        previous = ""
        for i in range(1 if high is None else high - low):
            rule = self.generated(name)
            tail = (Ref(rule if high is None else previous),) if i > 0 or high is None else ()
            self.rules[rule] = (item + tail, ())
            previous = rule
        if previous:
            seq.append(Ref(previous))
        return weight * total


def _check_left_recursion(rules: dict[str, tuple[Alternative, ...]]) -> None:
    """llama.cpp's check (llama_grammar_detect_left_recursion): a rule that can reach itself before any
    character, passing only through rules with an empty alternative, is refused."""
    clean: set[str] = set()

    def reaches_itself(name: str, path: set[str]) -> bool:
        if name in path:
            return True
        if name in clean:
            return False
        path.add(name)
        for alt in rules[name]:
            for element in alt:
                if not isinstance(element, Ref):
                    break
                if reaches_itself(element.rule, path):
                    return True
                if () not in rules[element.rule]:
                    break
        path.discard(name)
        clean.add(name)
        return False

    for name in rules:
        if reaches_itself(name, set()):
            raise GrammarError(f"left recursion through {name}")
