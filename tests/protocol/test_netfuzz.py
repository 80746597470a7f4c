"""The network fuzzer on a toy protocol: targets come from the network, violations are
found, refusals are not violations."""

from __future__ import annotations

from fedsec.errors import ProtocolError
from fedsec.protocol import Binding, Network, fields, receives, wire
from fedsec.testing.netfuzz import Fuzzable, declared, fuzz, record, targets

S = "12" * 16


class Client:
    def __init__(self, i: int) -> None:
        self._b = Binding(S, "toy", f"client:{i}")
        self._x = i + 1

    def submit(self) -> bytes:
        return wire.encode("toy/submit", self._b.bind({"x": self._x}, step="submit",
                                                       to="server"))

    @receives("toy/result")
    def finish(self, data: bytes) -> int:
        msg = wire.decode(data, expect="toy/result", max_bytes=1 << 12)
        self._b.check(msg.meta, step="result", sender="server", broadcast=True)
        return fields.integer(msg.meta, "sum", 0, 100)


class Server:
    def __init__(self, careless: bool) -> None:
        self._b = Binding(S, "toy", "server")
        self._careless = careless

    @receives("toy/submit")
    def aggregate(self, subs: list[tuple[str, bytes]]) -> bytes:
        total = 0
        for sender, data in subs:
            msg = wire.decode(data, expect="toy/submit", max_bytes=1 << 12)
            self._b.check(msg.meta, step="submit", sender=sender)
            # the careless server reads the field without the typed reader
            total += msg.meta["x"] if self._careless else fields.integer(msg.meta, "x", 0, 9)
        return wire.encode("toy/result", self._b.bind({"sum": total}, step="result", to="*"))


def toy(careless: bool) -> Fuzzable:
    def run(net: Network) -> list[int]:
        clients = [Client(i) for i in range(3)]
        server = Server(careless)
        names = [f"client:{i}" for i in range(3)]
        subs = net.gather_from(names, "server", [c.submit() for c in clients])
        got = net.broadcast("server", names, server.aggregate(subs))
        out = [c.finish(r) for c, r in zip(clients, got, strict=True)]
        if len(set(out)) != 1:
            raise ProtocolError("clients disagree")
        return out

    return Fuzzable("toy", run, {"client": Client, "server": Server},
                    oracle=lambda r: None if r[0] in range(0, 101) else "sum out of range")


def test_targets_come_from_the_network_and_match_the_declared_marks():
    net, result = record(toy(careless=False))
    assert result == [6, 6, 6]
    got = {(t.role, t.kind) for t in targets(toy(False), net)}
    assert got == declared(toy(False)) == {("server", "toy/submit"), ("client", "toy/result")}


def test_a_careful_protocol_has_no_violations():
    report = fuzz([toy(careless=False)], executions=60, seed=1)
    assert report.total == 120 and not report.violations
    refused = sum(c for o in report.outcomes.values() for k, c in o.items()
                  if k not in ("accepted", "missed"))
    assert refused > 60


def test_a_careless_decoder_is_caught():
    report = fuzz([toy(careless=True)], executions=400, seed=1)
    assert report.violations
    assert all(t.role == "server" for t, _, _ in report.violations)
    assert any("KeyError" in d or "TypeError" in d for _, _, d in report.violations)
