"""The base of every error this package raises on purpose; it imports nothing, so every layer may use it."""


class EtrError(Exception):
    """Every project error says what was wrong and where, in one line."""
