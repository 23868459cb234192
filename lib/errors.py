"""The one error type a stage turns into `exit 2` with a single clear line."""


class StageError(Exception):
    """Bad input or a missing prerequisite: the message says what and how to fix it."""
