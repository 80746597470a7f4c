"""ClientApp: a party (or other role) of any fedsec protocol on this SuperNode.

Logic in :mod:`fedsec.runtime.flower_apps`, which routes each message to its protocol.
"""

from fedsec.runtime.flower_apps import build_client_app

app = build_client_app()
