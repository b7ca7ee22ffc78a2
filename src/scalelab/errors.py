"""The two ways scalelab stops on purpose; every layer raises them, the entry points print them in one line."""


class UsageError(Exception):
    """Bad input the user can fix: printed as one line, exit code 2."""


class RunFailed(Exception):
    """A run that started and did not complete (its partial result is on disk): one line, exit code 1."""
