"""Slack mrkdwn helpers. Slack parses `&`, `<` and `>` as control characters (links,
mentions such as `<!channel>`), so every user-supplied string (service, model,
deploy tag, evidence) is escaped before it goes into a mrkdwn text."""

_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def escape(text: str) -> str:
    return text.translate(_ESCAPES)


def code(text: str) -> str:
    """Inline code of a user string; a backtick inside would end the span early."""
    return "`" + escape(text.replace("`", "'")) + "`"


def link(url: str, label: str) -> str:
    """`<url|label>`. The URL is already percent-encoded (no `|` or `>`); its `&` are
    escaped like any other, which Slack decodes."""
    return f"<{escape(url)}|{escape(label)}>"


def clip(text: str, limit: int) -> str:
    """At most `limit` characters, marking the cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"
