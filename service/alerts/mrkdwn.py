"""How data goes into a Slack message: every user-supplied string (service, model,
deploy tag, segment names, evidence lines, anything from records or events) renders
as inert data, whatever it holds. The rest of `service.alerts` uses these functions
and nothing else for that.

What Slack does with a text (docs.slack.dev: "Formatting message text", "Text
object"; api.slack.com/reference/surfaces/formatting):

* `&`, `<` and `>` are control characters: `<...>` makes links and mentions
  (`<!channel>`, `<@U..>`, `<#C..>`), so they are sent as `&amp;`, `&lt;`, `&gt;`.
  mrkdwn has no other escape: no backslash before `*`, `_`, `~`, a backtick or `>`.
* Inside inline code (one backtick on each side) nothing is formatted: no bold,
  italic, strike, quote, list or emoji shortcode.
* A newline is a line break, in mrkdwn and in plain_text.
* Unless a mrkdwn text object says `verbatim: true`, Slack's server links bare URLs,
  email addresses and conversation names and parses some mentions in the text it
  receives; the documentation does not exempt code spans. With `verbatim` it only
  renders the formatting and the `<...>` that were sent, so our own links still work.
* plain_text (headers) is not parsed; `emoji: false` keeps `:shortcodes:` as text.

So:

1. Every mrkdwn text object of a message is `verbatim` (`message._mrkdwn`).
2. A name is an inline code span (`code`): shown as typed, in monospace, and
   nothing in it formats. What could end the span or the line is replaced: a
   backtick by its look-alike U+02CB; control and invisible format characters
   (newlines, tabs, U+2028, bidi overrides, zero-width characters) by the escapes
   a reader knows (`\\n`, `\\u202e`); whitespace at either end likewise (Slack may
   not open or close a span next to a space); and `&<>` are escaped. A name is
   shown as typed, not with look-alike characters, because readers compare it
   with their dashboards, logs and deploy tooling.
3. Other data inside our sentences (an evidence line in a form this module does
   not recognise; a cause, event kind or source outside the known ones) is `plain`:
   the same escapes and, since mrkdwn cannot escape them, the formatting characters
   swapped for look-alikes: `*` U+2217, `~` U+223C, a backtick U+02CB, `_` U+02CD
   where it touches a word's edge, the colons of a `:shortcode:` U+A789.
   Underscores inside a word (`unique_prefix_ratio`) never format and stay. For
   use inside a line: a `>` at the start of one would quote it.
4. plain_text gets only the escapes of invisible characters (`visible`).
5. `clip_mrkdwn` cuts between spans, links and entities, never inside one: the rest
   of a cut-open code span would be formatted.

`verbatim` alone would not do: it stops automatic links, not formatting or line
breaks. Look-alikes for names would not either: a name must read as typed.

What this does not cover: the message's top-level `text`, the fallback that
notifications show, is no text object, so it takes no `verbatim` (and incoming
webhooks are reported to ignore `parse`); Slack may turn a URL written inside a
name into a link there. Names are rendered there exactly as in the blocks (one
line, in code spans, escaped), and the channel shows the blocks, not `text`. An
emoji written as a character (not a shortcode) is part of the name and shows, inside
its span."""

import re
import unicodedata

_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
# Control (Cc), format (Cf: bidi overrides, zero-width, soft hyphen), surrogate,
# private-use and unassigned code points, and the line and paragraph separators.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_BACKTICK = "\u02cb"  # modifier letter grave accent
_LOOKALIKES = str.maketrans(
    {
        "*": "\u2217",  # asterisk operator
        "~": "\u223c",  # tilde operator
        "`": _BACKTICK,
    }
)
# An underscore that touches a word's edge can open or close italics.
_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# The colons around a shortcode (`:rotating_light:`), after underscores are handled.
_SHORTCODE = re.compile(r":([^\s:]+):")
_MODIFIER_COLON = "\ua789"


def escape(text: str) -> str:
    """`&<>` as entities, for text that is otherwise ours (a URL, a link label)."""
    return text.translate(_ESCAPES)


def _escaped(char: str) -> str:
    """`\\n`, `\\x1b`, `\\u202e`: the character as a Python string escape."""
    if char in _NAMED:
        return _NAMED[char]
    point = ord(char)
    if point < 0x100:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


def visible(text: str) -> str:
    """Control and invisible characters as escapes: nothing breaks the line or hides.
    Enough for plain_text, which Slack does not parse; the first step of the others."""
    return "".join(_escaped(c) if unicodedata.category(c) in _INVISIBLE else c for c in text)


def code(text: str) -> str:
    """A user string as an inline code span (module docstring, 2)."""
    shown = visible(text).replace("`", _BACKTICK)
    core = shown.strip()
    if not core:
        return "`" + ("".join(map(_escaped, shown)) or '""') + "`"
    head = shown[: len(shown) - len(shown.lstrip())]
    tail = shown[len(shown.rstrip()) :]
    edges = "".join(map(_escaped, head)), "".join(map(_escaped, tail))
    return "`" + escape(edges[0] + core + edges[1]) + "`"


def plain(text: str) -> str:
    """Data inside a sentence of ours as text that formats nothing (module docstring, 3)."""
    shown = _EDGE_UNDERSCORE.sub("\u02cd", visible(text).translate(_LOOKALIKES))
    shown = _SHORTCODE.sub(lambda m: f"{_MODIFIER_COLON}{m[1]}{_MODIFIER_COLON}", shown)
    return escape(shown)


def link(url: str, label: str) -> str:
    """`<url|label>`. The URL is already percent-encoded (no `|` or `>`); its `&` are
    escaped like any other, which Slack decodes."""
    return f"<{escape(url)}|{escape(label)}>"


def clip(text: str, limit: int) -> str:
    """At most `limit` characters, marking the cut. For raw strings and plain_text."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def clip_mrkdwn(text: str, limit: int) -> str:
    """`clip` for mrkdwn built here: the cut moves back to before a code span, link
    or entity it would leave open. Backticks only delimit spans here (`code` and
    `plain` replace them in data), `<` only opens links and `&` only entities."""
    if len(text) <= limit:
        return text
    kept = text[: max(limit - 1, 0)]
    while True:
        if kept.count("`") % 2:
            kept = kept[: kept.rindex("`")]
        elif kept.rfind("<") > kept.rfind(">"):
            kept = kept[: kept.rindex("<")]
        elif kept.rfind("&") > kept.rfind(";"):
            kept = kept[: kept.rindex("&")]
        else:
            return kept + "…"
