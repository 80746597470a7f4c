"""HESV's and SecretSV's roles on the protocol layer: which message kinds each role
decodes (its ``@receives`` marks), and runners that only relay bytes (they never read or
write a role's private state)."""

from __future__ import annotations

import ast
import inspect
import textwrap

from fedsec.protocol.roles import handlers
from fedsec.shapley import hesv, secretsv


def test_every_decoder_is_marked() -> None:
    assert handlers(hesv.HESVServer) == {
        "hesv/data": "receive_data", "hesv/model": "receive_model",
        "hesv/activated": "step", "hesv/predicted": "step", "hesv/count": "step"}
    assert handlers(hesv.HESVClient) == {"hesv/layer": "decrypt_layer", "hesv/diff": "count"}
    common = {"secretsv/session": "join", "secretsv/data": "receive_data",
              "secretsv/model": "receive_model", "secretsv/triple": "open_share",
              "secretsv/open": "beaver", "secretsv/reshare": "receive_share"}
    assert handlers(secretsv.SecretSVPrincipal) == {
        **common, "secretsv/hello": "gather", "secretsv/labels": "label_mask",
        "secretsv/label-diff": "compare"}
    assert handlers(secretsv.SecretSVAuxiliary) == {
        **common, "secretsv/batches": "receive_order", "secretsv/eval": "open_eval",
        "secretsv/labels": "label_diff", "secretsv/label-mask": "label_diff"}
    assert handlers(secretsv.SecretSVClient) == {"secretsv/session": "join",
                                                 "secretsv/output": "reconstruct"}
    assert handlers(secretsv.Dealer) == {"secretsv/session": "join",
                                         "secretsv/triple-request": "triple"}


def _private_accesses(fn: object) -> list[str]:
    """``x._name`` in ``fn``'s source for any ``x`` but ``self`` (a runner reaching into a
    role's private state)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))  # type: ignore[arg-type]
    return [f"{ast.unparse(node.value)}.{node.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")]


def test_runners_only_relay_bytes() -> None:
    """The in-process runners call roles' public methods and move bytes over the network;
    every piece of role state is private (a leading underscore) and never touched."""
    runners = [hesv.hesv_shapley, hesv._key_setup, secretsv.secretsv_shapley,  # noqa: SLF001
               secretsv.open_session, *(getattr(secretsv.SecretSVRun, m) for m in (
                   "upload_round", "end_round", "evaluate", "clocks"))]
    for fn in runners:
        assert _private_accesses(fn) == [], fn
    for role in (hesv.HESVServer, hesv.HESVClient, secretsv.SecretSVPrincipal,
                 secretsv.SecretSVAuxiliary, secretsv.SecretSVClient, secretsv.Dealer):
        public = {k for k in vars(role) if not k.startswith("_")}
        for base in role.__mro__[1:-1]:
            public |= {k for k in vars(base) if not k.startswith("_")}
        # methods and read-only properties only: no public data attribute but the clock
        assert all(callable(getattr(role, k)) or isinstance(getattr(role, k), property)
                   for k in public), role
        assigned = set()
        for klass in role.__mro__[:-1]:
            for fn in vars(klass).values():
                if not inspect.isfunction(fn):
                    continue
                tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
                assigned |= {t.attr for node in ast.walk(tree)
                             if isinstance(node, ast.Assign | ast.AnnAssign)
                             for t in (node.targets if isinstance(node, ast.Assign)
                                       else [node.target])
                             if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                             and t.value.id == "self"}
        assert {a for a in assigned if not a.startswith("_")} == {"clock"}, role
