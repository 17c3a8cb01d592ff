"""User-facing errors.

Every error that is the user's to fix (bad input, bad config, a foreign or truncated checkpoint)
is raised as a :class:`TXLError` subclass. The command line prints its message as one line and
exits with status 2; library callers can catch it like any exception.
"""


class TXLError(Exception):
    """Base class of errors caused by user input; the message is one line, ready to print."""

    exit_code = 2


class ConfigError(TXLError, ValueError):
    """A configuration value is out of range or inconsistent."""


class CheckpointError(TXLError):
    """A checkpoint or state dict is missing, truncated, foreign or does not match the config."""


class DataError(TXLError):
    """A corpus, vocabulary or input file is missing, empty, undecodable or unknown."""


class MissingExtraError(TXLError, ImportError):
    """An optional dependency (an extra of the package) is not installed; the message names the extra."""


def one_line(exc, first: bool = False, limit: int = 500) -> str:
    """The message of ``exc`` (an exception, or a message's text) fit for one error line: whitespace collapsed
    (with ``first``, only its first line is kept), cut to ``limit`` characters; an exception without a message
    gives its type name."""
    text = str(exc).strip()
    if first:
        text = text.split("\n", 1)[0]
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return text or type(exc).__name__
