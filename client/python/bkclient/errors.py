"""Errors of the client. Each carries the driver contract's code (docs/conformance.md,
"Error codes"), so that an application and the conformance driver tell them apart the same
way."""


class BKError(Exception):
    """A failed operation; code is one of the codes of docs/conformance.md."""

    code = "other"

    def __init__(self, message="", code=None):
        super().__init__(message)
        if code is not None:
            self.code = code


class Fenced(BKError):
    """Another client took the ledger over (a bookie answered Fenced, or the metadata left
    OPEN)."""
    code = "fenced"


class Unauthorized(BKError):
    """A bookie refused the master key or the client's authentication."""
    code = "unauthorized"


class NoSuchLedger(BKError):
    """The ledger's metadata does not exist."""
    code = "no_such_ledger"


class NotEnoughBookies(BKError):
    """Too few live bookies for an ensemble or a replacement."""
    code = "not_enough_bookies"


class LedgerClosed(BKError):
    """An append to a closed or closing ledger."""
    code = "ledger_closed"


class BeyondLAC(BKError):
    """A read past the LAC of an open ledger."""
    code = "beyond_lac"


class RecoveryIncomplete(BKError):
    """Recovery could neither prove an entry present nor prove it absent; nothing closed."""
    code = "recovery_incomplete"


class Timeout(BKError):
    """A bookie request had no answer within the request timeout: unknown outcome, never a
    negative."""
    code = "timeout"


class BookieUnavailable(BKError):
    """A bookie could not be reached, or its connection broke: unknown outcome."""
    code = "bookie_unavailable"


class UnsupportedVersion(BookieUnavailable):
    """The bookie speaks no protocol version the client speaks: do not use it."""


class ReadFailed(BKError):
    """No replica returned a valid copy of an entry."""
    code = "read_failed"


class MetadataUnavailable(BKError):
    code = "metadata_unavailable"


class BadStatus(BKError):
    """A bookie answered a status the operation cannot use."""

    def __init__(self, status, message=""):
        super().__init__(message)
        self.status = status
