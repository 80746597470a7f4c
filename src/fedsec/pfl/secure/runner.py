"""Every Priv-PFL role in one process: a thin loop over a :class:`~fedsec.protocol.network.Network`.

:class:`SecurePFLSession` makes the identities, runs the signed key set-up (the server is
the set-up's aggregator, the decryptor the key holder) and the registrations, then
:meth:`SecurePFLSession.run_round` plays one round step by step as in
:mod:`fedsec.pfl.secure`. It moves bytes between roles named ``"client:<i>"``,
``"server"`` and ``"decryptor"`` and never reads or writes a role's state: every byte is
counted by the network (:attr:`SecurePFLSession.network`, where tests and benchmarks
plug in interceptors), every second of work by the role's own clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_real
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySetupAggregator, KeySetupParty
from fedsec.errors import ProtocolError
from fedsec.pfl.secure.client import SecurePFLClient
from fedsec.pfl.secure.common import (
    _MAX_CLIENTS,
    DECRYPTOR,
    DECRYPTOR_NAME,
    SERVER,
    FloatArray,
    SecurePFLConfig,
    client_name,
    client_role,
    margin_scale,
)
from fedsec.pfl.secure.decryptor import SecurePFLDecryptor
from fedsec.pfl.secure.server import SecurePFLServer
from fedsec.pfl.selection import SelectionResult
from fedsec.protocol import wire
from fedsec.protocol.accounting import Accounting, Clock
from fedsec.protocol.network import Network

__all__ = ["SecureRound", "SecurePFLSession"]


@dataclass
class SecureRound:
    """What one secure round produced and cost.

    Attributes
    ----------
    selection : SelectionResult
        Acceptance sets (Algorithm 1 over the valid clients).
    personalised : ndarray of shape (K, d)
        Each client's decrypted Eq. 2 model.
    valid : ndarray of bool, shape (K,)
        Clients that passed the norm checks.
    margin_scale : float
        ``M`` (model units): margins divided by it are compared.
    seconds : dict
        Wall time of ``upload`` (clients' padded uploads, the server's checks, the
        decryptor's encryptions of the pads), ``distances`` (Gram entries and the
        decryptor's refresh),
        ``comparison`` (sign evaluation and revealed bits), ``aggregation`` (Eq. 2, masks,
        decryption, clients' decoding) and ``total``.
    bytes_up, bytes_down : ndarray of int, shape (K,)
        Bytes each client sent (its upload) and received (its result), as the network
        counted them.
    server_bytes_in : int
        Bytes the server received this round (uploads and the decryptor's replies).
    sign_evaluations, pairs_checked : int
        Homomorphic sign evaluations and pairs whose bit was revealed.
    key_setup_bytes : dict
        Sizes of the session's key material.
    decryptor_bytes_in : int
        Bytes the decryptor received this round.
    revealed_bits : int
        Comparison bits the decryptor revealed this round (equals ``pairs_checked``).
    accounting : Accounting
        The round's bytes per (sender, receiver, kind), from the network, and the roles'
        seconds by kind of work, from their clocks.
    """

    selection: SelectionResult
    personalised: FloatArray
    valid: NDArray[np.bool_]
    margin_scale: float
    seconds: dict[str, float]
    bytes_up: NDArray[np.int64]
    bytes_down: NDArray[np.int64]
    server_bytes_in: int
    sign_evaluations: int
    pairs_checked: int
    key_setup_bytes: dict[str, int]
    decryptor_bytes_in: int = 0
    revealed_bits: int = 0
    accounting: Accounting = field(default_factory=Accounting)


def _role_of(name: str) -> str:
    """Network name of a roster name."""
    return DECRYPTOR if name == DECRYPTOR_NAME else client_role(int(name.rsplit("-", 1)[1]))


def _client_index(name: str, k: int) -> int | None:
    """``i`` of the network name ``"client:<i>"`` (``None`` for any other name)."""
    head, _, tail = name.partition(":")
    if head != "client" or not tail.isdigit() or int(tail) >= k or str(int(tail)) != tail:
        return None
    return int(tail)


def _since(before: dict[tuple[str, str, str], int], now: dict[tuple[str, str, str], int]
           ) -> dict[tuple[str, str, str], int]:
    return {key: n - before.get(key, 0) for key, n in now.items() if n != before.get(key, 0)}


@dataclass
class SecurePFLSession:
    """Every Priv-PFL role in one process, exchanging bytes over :attr:`network` (for the
    CLI, simulations and tests).

    Create with :meth:`create`; run rounds with :meth:`run_round`.
    """

    config: SecurePFLConfig
    clients: list[SecurePFLClient]
    server: SecurePFLServer
    decryptor: SecurePFLDecryptor
    key_setup_bytes: dict[str, int]
    network: Network

    @classmethod
    def create(cls, n_clients: int, config: SecurePFLConfig, *,
               network: Network | None = None,
               clients: Mapping[int, type[SecurePFLClient]] | None = None
               ) -> SecurePFLSession:
        """Identities, roster, the signed key set-up (decryptor = key holder), roles and
        the clients' result keys.

        Parameters
        ----------
        n_clients : int
        config : SecurePFLConfig
        network : Network, optional
            What carries the messages, from the key set-up on (default: a new
            :class:`~fedsec.protocol.network.Network`); pass one with ``record=True`` or
            interceptors to keep or rewrite the bytes (tests, benchmarks).
        clients : mapping of int to SecurePFLClient subclass, optional
            The role class client ``i`` runs (default :class:`SecurePFLClient`): a
            simulation of malicious clients names its attackers here.
        """
        k = check_int(n_clients, "n_clients", "SecurePFLSession.create", min_value=2,
                      max_value=_MAX_CLIENTS)
        if not isinstance(config, SecurePFLConfig):
            raise TypeError(f"The 'config' parameter of SecurePFLSession.create must be a "
                            f"SecurePFLConfig. Got {type(config).__name__} instead.")
        kinds = dict(clients or {})
        if any(not (isinstance(i, int) and 0 <= i < k and isinstance(c, type)
                    and issubclass(c, SecurePFLClient)) for i, c in kinds.items()):
            raise ValueError("The 'clients' parameter of SecurePFLSession.create must map "
                             "client indices to SecurePFLClient subclasses.")
        if network is not None and not isinstance(network, Network):
            raise TypeError(f"The 'network' parameter of SecurePFLSession.create must be a "
                            f"Network. Got {type(network).__name__} instead.")
        net = Network() if network is None else network
        ids = [Identity(client_name(i)) for i in range(k)] + [Identity(DECRYPTOR_NAME)]
        roster = Roster.of(ids)
        spec = config.key_spec()
        # the signed key set-up; the server is its aggregator
        parties = [KeySetupParty(i, roster, spec, min_parties=k + 1) for i in ids]
        agg = KeySetupAggregator(roster, spec, min_parties=k + 1,
                                 max_message_bytes=config.max_offer_bytes)
        names = [_role_of(p.name) for p in parties]
        holder, request = agg.request(net.gather(names, SERVER, [p.hello() for p in parties]))
        by_name = {p.name: p for p in parties}
        holder_name = agg.names[holder]
        offer = net.send(_role_of(holder_name), SERVER, by_name[holder_name].offer(
            net.send(SERVER, _role_of(holder_name), request)))
        deliveries = agg.accept(offer)
        order = [_role_of(n) for n in agg.names]
        delivered = net.scatter(SERVER, order, deliveries)
        confirms = net.gather(order, SERVER, [by_name[n].receive(d) for n, d in
                                              zip(agg.names, delivered, strict=True)])
        confirmed = net.broadcast(SERVER, order, agg.confirm(confirms))
        keys = {n: by_name[n].finish(c) for n, c in zip(agg.names, confirmed, strict=True)}
        assert agg.context is not None
        pub = wire.decode(offer, expect="keys/offer").blobs[0]
        parts = wire.decode(pub, expect="ckks/public").blobs
        client_delivery = max(len(d) for n, d in zip(agg.names, deliveries, strict=True)
                              if n != DECRYPTOR_NAME)
        ks_bytes = {"offer": len(offer), "public_key": len(parts[0]),
                    "relin_keys": len(parts[1]), "galois_keys": len(parts[2]),
                    "galois_key_count": 1, "client_delivery": client_delivery}
        roles = [kinds.get(i, SecurePFLClient)(i, keys[client_name(i)], ids[i], config,
                                               roster=roster) for i in range(k)]
        server = SecurePFLServer(agg.context, agg.session, k, config, roster=roster)
        decryptor = SecurePFLDecryptor(keys[DECRYPTOR_NAME], roster, config,
                                       identity=ids[-1])
        # step 0: the decryptor's seed key (relayed by the server), the clients' result keys
        announce = net.send(DECRYPTOR, SERVER, decryptor.announce())
        for c, a in zip(roles, net.broadcast(SERVER, [c.name for c in roles], announce),
                        strict=True):
            c.receive_decryptor_key(a)
        for c in roles:
            reg = net.send(c.name, SERVER, c.register())
            server.register(reg)
            decryptor.register(net.send(SERVER, DECRYPTOR, reg))
        return cls(config, roles, server, decryptor, ks_bytes, net)

    @property
    def n_clients(self) -> int:
        return len(self.clients)

    def _clocks(self) -> list[Clock]:
        return [*(c.clock for c in self.clients), self.server.clock, self.decryptor.clock]

    def run_round(self, models: NDArray[Any], sigmas: NDArray[Any], *, alpha: float,
                  norm_bound: float, round_index: int) -> SecureRound:
        """One secure selection and aggregation round.

        Parameters
        ----------
        models : array of shape (K, d)
            Each client's ``w_i^{t+1/2}`` (client ``i`` sees only row ``i``).
        sigmas : array of shape (K,)
            ``sigma_i(t)`` (public).
        alpha : float
            Eq. 2's weight of the own model.
        norm_bound : float
            The round's public norm bound ``B``.
        round_index : int
            Rounds must increase within a session.

        Notes
        -----
        An upload the server refuses (``ProtocolError``) leaves that client invalid this
        round; the round needs two accepted uploads.
        """
        w = np.asarray(models, dtype=np.float64)
        k = self.n_clients
        if w.ndim != 2 or w.shape[0] != k or w.shape[1] < 1 or not np.all(np.isfinite(w)):
            raise ValueError(f"The 'models' parameter of run_round must be a finite array "
                             f"of shape ({k}, d). Got shape {w.shape} instead.")
        sig = np.asarray(sigmas, dtype=np.float64)
        if sig.shape != (k,) or not np.all(np.isfinite(sig)) or not np.all(sig > 0):
            raise ValueError(f"The 'sigmas' parameter of run_round must be {k} finite "
                             f"values > 0.")
        a = check_real(alpha, "alpha", "run_round", ge=0.0, le=1.0)
        b = check_real(norm_bound, "norm_bound", "run_round", gt=0.0)
        t = check_int(round_index, "round_index", "run_round", min_value=0)
        net, srv, dec, clients = self.network, self.server, self.decryptor, self.clients
        bytes_before = dict(net.accounting.bytes_by_message)
        msgs_before = dict(net.accounting.messages)
        clocks_before = [dict(c.seconds) for c in self._clocks()]
        evaluations_before = srv.sign_evaluations()
        bits_before = dec.revealed_bits()
        sec: dict[str, float] = {}
        t0 = time.perf_counter()

        def decryptor(request: bytes, step: Callable[[bytes], bytes]) -> bytes:
            """A request of the server, the decryptor's ``step`` on it, and its reply."""
            return net.send(DECRYPTOR, SERVER, step(net.send(SERVER, DECRYPTOR, request)))

        # 1. uploads: one-time-padded plaintexts, the pads' seeds sealed to the decryptor
        uploads = [c.upload(w[i], norm_bound=b, sigma=float(sig[i]), round_index=t)
                   for i, c in enumerate(clients)]
        for sender, upload in net.gather_from([c.name for c in clients], SERVER, uploads):
            i = _client_index(sender, k)
            if i is None:
                continue
            try:
                srv.receive(i, upload, round_index=t, sigma=float(sig[i]), norm_bound=b,
                            model_size=w.shape[1])
            except ProtocolError:
                pass  # refused: client i is invalid this round
        # 1b-1c. the decryptor's encryptions of the pads; the server unmasks
        srv.receive_masks(decryptor(srv.mask_request(), dec.mask_ciphertexts))
        t1 = time.perf_counter()
        sec["upload"] = t1 - t0
        # 2-3. Gram entries, norm checks, refresh
        refreshed = decryptor(srv.gram_request(), dec.refresh)
        t2 = time.perf_counter()
        sec["distances"] = t2 - t1
        # 4-5. comparisons and Algorithm 1
        srv.compare(refreshed)
        selection = srv.select(lambda request: decryptor(request, dec.reveal))
        t3 = time.perf_counter()
        sec["comparison"] = t3 - t2
        # 6. Eq. 2, decrypted for each client into a box sealed to it
        personalised = np.zeros_like(w)
        for i, request in enumerate(srv.aggregate(selection, a)):
            result = srv.deliver(i, decryptor(request, dec.unmask_for_client))
            personalised[i] = clients[i].finish(net.send(SERVER, clients[i].name, result))
        t4 = time.perf_counter()
        sec["aggregation"] = t4 - t3
        sec["total"] = t4 - t0
        acc = Accounting(_since(bytes_before, net.accounting.bytes_by_message),
                         _since(msgs_before, net.accounting.messages))
        for clock, before in zip(self._clocks(), clocks_before, strict=True):
            acc.add_clock({kind: s - before.get(kind, 0.0) for kind, s in clock.seconds.items()})
        by = acc.bytes_by_message
        up = np.array([by.get((c.name, SERVER, "pfl/masked-upload"), 0) for c in clients],
                      dtype=np.int64)
        down = np.array([by.get((SERVER, c.name, "pfl/result"), 0) for c in clients],
                        dtype=np.int64)
        srv_in = sum(n for (_, rcv, _), n in by.items() if rcv == SERVER)
        dec_in = sum(n for (_, rcv, _), n in by.items() if rcv == DECRYPTOR)
        return SecureRound(selection, personalised, srv.validity(),
                           margin_scale(sig) * b * b, sec, up, down, srv_in,
                           srv.sign_evaluations() - evaluations_before,
                           selection.checks, dict(self.key_setup_bytes), dec_in,
                           dec.revealed_bits() - bits_before, acc)

