"""Exceptions shared by the child and the staged package (kept import-free: it runs in the sandbox)."""


class ForbiddenCall(BaseException):
    """A forbidden function was called (a BaseException, so ``except Exception`` does not hide it)."""


class IsolationUnavailable(RuntimeError):
    """The requested isolation cannot be set up here (the message says how to get it)."""
