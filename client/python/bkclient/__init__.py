"""A Python 3 reference client of the bookie (standard library only), written from
docs/protocol.md, docs/replication.md and docs/metadata.md. See client/python/README.md."""

from .client import NAME, Client, Writer  # noqa: F401
from .errors import *  # noqa: F401,F403
