"""How roles talk: the layer under every protocol.

* :mod:`~fedsec.protocol.wire` -- the versioned byte frame of every message;
* :mod:`~fedsec.protocol.binding` -- one binding context (session, protocol, round, step,
  sender, recipient, index; request ids answered once; nonces) against replays and splices;
* :mod:`~fedsec.protocol.fields` -- typed readers of another role's fields that raise
  :class:`~fedsec.errors.ProtocolError`;
* :mod:`~fedsec.protocol.accounting` -- a role's clock and a run's bytes;
* :mod:`~fedsec.protocol.network` -- the in-process network that carries, counts and lets
  tests intercept the bytes between roles;
* :mod:`~fedsec.protocol.roles` -- which role method receives which message kind.

It imports only the ground modules (:mod:`fedsec.errors`) and the standard library/numpy.
"""

from fedsec.protocol import accounting, binding, fields, network, roles, wire
from fedsec.protocol.accounting import Accounting, Clock
from fedsec.protocol.binding import Binding, Context, ReplayRefused
from fedsec.protocol.network import Envelope, Network
from fedsec.protocol.roles import handlers, receives

__all__ = ["wire", "binding", "fields", "accounting", "network", "roles", "Accounting",
           "Clock", "Binding", "Context", "ReplayRefused", "Envelope", "Network", "receives",
           "handlers"]
