"""The registry of Lua scripts in ``lua/``, and how a script is called.

Callers do not call scripts by name: each script has one typed call in the
store's slot modules (queue_slot.py, request_slot.py, periodic_slot.py,
webhook_slot.py), which orders its KEYS and ARGV and decodes its answer;
they call `Scripts.run`, directly or on a round trip (trip.py).

Each file is ``name-N.lua`` where N is its number of KEYS, or
``name-N+Pn.lua`` for a script that serves n >= 1 groups of P keys after N
fixed ones (several requests of one slot); the registry is built from the
directory listing and each call's key count is checked. Calls go
through redis-py ``Script`` objects (EVALSHA, falling back on NOSCRIPT).
Files starting with ``_`` hold shared helpers: a line ``--@include _x.lua``
is replaced by that file's text when the script is loaded, less the
helpers the script never calls, and Redis gets it without comments
(`resolve`).
"""
from __future__ import annotations

import enum
import functools
import re
from pathlib import Path
from typing import Callable, NamedTuple

from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

LUA_DIR = Path(__file__).resolve().parents[3] / "lua"
_NAME = re.compile(r"^(?P<name>[a-z_]+)-(?P<nkeys>\d+)(?:\+(?P<per>\d+)n)?\.lua$")
_INCLUDE = re.compile(r"^--@include (?P<file>_[a-z_]+\.lua)$", re.M)


class Code(enum.IntEnum):
    """Negative integers that scripts return on refusal; see each `return -N`."""

    NOT_FOUND = -1  # the request (or item) does not exist
    FINISHED = -2  # the request is already completed, failed, cancelled or expired
    NOT_HELD = -3  # the token or item is no longer held by this worker
    FINALIZED = -4  # items were added to a request that is already finalized
    EXISTS = -5  # a request with this id exists already


class ScriptError(Exception):
    def __init__(self, script: str, code: Code):
        super().__init__(f"{script}: {code.name.lower().replace('_', ' ')}")
        self.code = code


class Scripts:
    """Loads every script once and calls them with a key-count check."""

    def __init__(self, redis, lua_dir: Path = LUA_DIR):
        self.redis = redis
        self._scripts = {}
        self._nkeys = {}
        for path in sorted(lua_dir.glob("[!_]*.lua")):
            m = _NAME.match(path.name)
            if not m:
                raise ValueError(f"lua/{path.name}: name must be name-NKEYS.lua or name-NKEYS+PERn.lua")
            name = m["name"]
            self._scripts[name] = redis.register_script(resolve(path))
            self._nkeys[name] = (int(m["nkeys"]), int(m["per"] or 0))
        try:
            self.load()
        except (ConnectionError, TimeoutError, RedisConnectionError, RedisTimeoutError):
            pass  # loaded on first use instead (NOSCRIPT fallback)

    def load(self, names=None) -> None:
        """SCRIPT LOAD the given scripts (all by default; on a cluster, on every
        node, one by one); on one server in one round trip: a worker's start
        loaded 120 scripts one round trip each, about 15 ms of its launch."""
        names = list(names or self._scripts)
        if isinstance(self.redis, RedisCluster):
            for name in names:
                self.redis.script_load(self._scripts[name].script)
            return
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.script_load(self._scripts[name].script)
        pipe.execute()

    def names(self) -> list[str]:
        return sorted(self._scripts)

    def _check_keys(self, name: str, keys: list[str]) -> None:
        fixed, per = self._nkeys[name]
        extra = len(keys) - fixed
        if (extra != 0) if not per else (extra <= 0 or extra % per):
            wanted = f"{fixed} + {per}n (n >= 1)" if per else str(fixed)
            raise TypeError(f"{name} takes {wanted} keys, got {len(keys)}")

    def nkeys(self, name: str) -> tuple[int, int]:
        """(fixed keys, keys per group; 0 for none) as the file name says."""
        return self._nkeys[name]

    def run(self, trip, name: str, keys: list[str], args: list, decode: Callable):
        """The one way the typed calls reach a script: now, returning its
        answer as `decode` makes it (`decode` raises ScriptError for a
        refusal, see `refusable`), or on `trip` (trip.py), returning an
        Answer whose value is decoded once the trip ran."""
        if trip is not None:
            return trip.script(name, keys, args, decode)
        return decode(self.call(name, keys, args))

    def call(self, name: str, keys: list[str], args: list, client=None):
        """Run a script now (EVALSHA, loading it on NOSCRIPT): its raw answer."""
        self._check_keys(name, keys)
        return self._scripts[name](keys=keys, args=args, client=client)

    def __call__(self, name: str, keys: list[str], args: list, client=None):
        """A raw call by name (tests, and a console); the engine uses the typed calls."""
        result = self.call(name, keys, args, client)
        if isinstance(result, int) and result < 0:
            raise ScriptError(name, Code(result))
        return result

    def pipe(self, pipe, name: str, keys: list[str], args: list) -> int:
        """Queue a script call (EVALSHA) on a pipeline run by `execute`;
        returns its place in the pipeline's answers. Unlike redis-py's own
        pipelined scripts, this costs no SCRIPT EXISTS round trip per
        pipeline."""
        self._check_keys(name, keys)
        pipe.evalsha(self._scripts[name].sha, len(keys), *keys, *args)
        at = len(pipe.command_stack) - 1
        if not hasattr(pipe, "_qa_calls"):
            pipe._qa_calls = {}
        pipe._qa_calls[at] = (name, keys, args)
        return at

    def execute(self, pipe) -> list:
        """Run a pipeline. Script calls that met NOSCRIPT (Redis restarted or
        was flushed) are loaded and run again, in their order; any other error
        is raised."""
        calls = getattr(pipe, "_qa_calls", {})
        results = pipe.execute(raise_on_error=False)
        missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError) and i in calls]
        if missing:
            self.load({calls[i][0] for i in missing})
            retry = self.redis.pipeline(transaction=False)
            for i in missing:
                name, keys, args = calls[i]
                retry.evalsha(self._scripts[name].sha, len(keys), *keys, *args)
            for i, result in zip(missing, retry.execute(raise_on_error=False)):
                results[i] = result
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results


def resolve(path: Path) -> str:
    """The script's text with each ``--@include`` line replaced (one level),
    as Redis gets it: without the helpers it never calls (`pruned`), and
    without comments or indentation (`stripped`)."""
    text = path.read_text()
    parts = _INCLUDE.split(text)  # the script's own text, then each included file's name and the text after it
    return pruned(*(_piece((path.parent / part).read_text() if k % 2 else part) for k, part in enumerate(parts)))


_HELPER = re.compile(r"^local function ([A-Za-z_]\w*)\(")
_WORD = re.compile(r"[A-Za-z_]\w*")


class Piece(NamedTuple):
    """A file's text (or a stretch of a script's) stripped, read once per
    process: its lines, its top-level helpers (name, first line, last line,
    the names they use) and the names the rest of it uses."""

    lines: tuple[str, ...]
    helpers: tuple[tuple[str, int, int, frozenset], ...]
    uses: frozenset


@functools.lru_cache(maxsize=512)
def _piece(source: str) -> Piece:
    """Cached by text: every script includes the same few files, and every
    Store of a process resolves the same scripts."""
    lines, code = source.split("\n"), stripped(source).split("\n")
    helpers = tuple((name, i, j, frozenset(_WORD.findall("\n".join(code[i:j + 1]))))
                    for name, i, j in _helpers(lines, code))
    inside = {k for _, i, j, _ in helpers for k in range(i, j + 1)}
    rest = "\n".join(line for k, line in enumerate(code) if k not in inside)
    return Piece(tuple(code), helpers, frozenset(_WORD.findall(rest)))


def pruned(*pieces: Piece) -> str:
    """The pieces joined, without the top-level ``local function``s that the
    rest does not reach, their lines blanked: a helper stays when the
    script's own code names it, or a helper that stays does. Every call of a
    script makes a closure of each helper it defines: the shared files' 39
    cost a take about 5 µs of Redis time a call, the 16 it calls half of
    that. A helper runs from its ``local function`` line to the first line
    that is ``end`` unindented (one written on one line ends there). A name
    counts wherever it appears as a word, strings included: in doubt, a
    helper stays."""
    names: dict[str, frozenset] = {}
    for piece in pieces:
        names.update((name, uses) for name, _, _, uses in piece.helpers)
    todo, kept = set().union(*(piece.uses for piece in pieces)) & names.keys(), set()
    while todo:
        name = todo.pop()
        kept.add(name)
        todo |= (names[name] & names.keys()) - kept
    return "".join(_kept_text(piece, kept) for piece in pieces)


def _kept_text(piece: Piece, kept: set[str]) -> str:
    lines = list(piece.lines)
    for name, i, j, _ in piece.helpers:
        if name not in kept:
            lines[i:j + 1] = [""] * (j + 1 - i)
    return "\n".join(lines)


def _helpers(lines: list[str], code: list[str]) -> list[tuple[str, int, int]]:
    """(name, first line, last line) of each top-level local function; `code`
    is `lines` stripped (a one-line helper closes every block it opens)."""
    found = []
    for i, line in enumerate(lines):
        if m := _HELPER.match(line):
            opened = len(re.findall(r"\b(?:function|if|do)\b", code[i]))
            j = i if opened == len(re.findall(r"\bend\b", code[i])) else next(
                (k for k in range(i + 1, len(lines)) if re.match(r"end\b", lines[k])), len(lines) - 1)
            found.append((m[1], i, j))
    return found


_LONG_OPEN = re.compile(r"\[(=*)\[")


def stripped(source: str) -> str:
    """Lua `source` without its comments and each line's outer blanks, its
    line breaks kept so that an error's ``user_script:N`` still names the
    line; strings are kept as they are. Redis 7 counts every loaded body in
    ``used_memory`` and a worker sends all of them at its start: comments
    and indentation were nearly half of the text."""
    out, code, i, n = [], [], 0, len(source)
    while i < n:
        c = source[i]
        quoted = c in "'\"" or (c == "[" and _LONG_OPEN.match(source, i))
        if quoted:
            out.append(_EDGES.sub("\n", "".join(code)))
            code = []
            end = _string_end(source, i) if c != "[" else _long_end(source, i)
            out.append(source[i:end])
        elif source.startswith("--", i):
            end = _comment_end(source, i + 2)
            code.append("\n" * source.count("\n", i, end) or " ")
        else:
            found = _SPECIAL.search(source, i + 1)
            end = found.start() if found else n
            code.append(source[i:end])
        i = end
    out.append(_EDGES.sub("\n", "".join(code)))
    return "".join(out).strip(" \t")


_EDGES = re.compile(r"[ \t]*\n[ \t]*")
_SPECIAL = re.compile(r"['\"\-\[]")  # where a string or a comment may begin


def _long_end(source: str, i: int) -> int:
    """Where the long bracket (``[[``, ``[==[``) opening at `i` closes."""
    m = _LONG_OPEN.match(source, i)
    end = source.find("]" + m[1] + "]", m.end())
    return len(source) if end < 0 else end + len(m[1]) + 2


def _string_end(source: str, i: int) -> int:
    """Where the quoted string opening at `i` ends (past its quote)."""
    quote, j = source[i], i + 1
    while j < len(source) and source[j] != quote and source[j] != "\n":
        j += 2 if source[j] == "\\" else 1
    return j + 1


def _comment_end(source: str, i: int) -> int:
    """Where the comment whose text starts at `i` (after its ``--``) ends:
    at the line's end, or past the long bracket it opens."""
    if _LONG_OPEN.match(source, i):
        return _long_end(source, i)
    end = source.find("\n", i)
    return len(source) if end < 0 else end


def check(name: str, result):
    """Raise the mapped error for a negative integer answer from a pipeline."""
    if isinstance(result, int) and result < 0:
        raise ScriptError(name, Code(result))
    return result


def refusable(name: str, decode: Callable | None = None) -> Callable:
    """A decoder for script `name` whose negative answers are refusals
    (ScriptError with its Code); any other answer is decoded by `decode`."""
    def decoded(raw):
        if raw.__class__ is int and raw < 0:
            raise ScriptError(name, Code(raw))
        return raw if decode is None else decode(raw)

    decoded.__qualname__ = f"refusable({name!r})"
    return decoded
