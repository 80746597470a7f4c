"""Adversaries, fuzzers and stand-ins for fedsec's tests, benchmarks and demo.

Nothing in the product imports this package (``tests/test_import_graph.py`` checks the
import graph; the one exception is ``fedsec demo``, which shows a cheating aggregator on
purpose). An adversary here is an *interceptor* on the in-process
:class:`~fedsec.protocol.network.Network` -- it rewrites, drops, reorders or equivocates the
bytes between roles and never touches a role's state -- or a role subclass that deviates:

* :mod:`~fedsec.testing.auc` -- the cheating aggregator of the malicious-mode tamper battery;
* :mod:`~fedsec.testing.exact` -- an aggregator that answers exact mode's refinement
  rounds with other functions of the submissions (one party's, a subset's, replays);
* :mod:`~fedsec.testing.keysetup` -- a dishonest key set-up aggregator;
* :mod:`~fedsec.testing.pfl` -- Priv-PFL clients that deviate (unclipped models, crafted
  uploads);
* :mod:`~fedsec.testing.decryptor_attack` -- what a curious decrypting Shapley client can
  solve for from the bytes it holds;
* :mod:`~fedsec.testing.mutations` and :mod:`~fedsec.testing.netfuzz` -- the
  structure-aware mutation engine and the fuzzer that runs any protocol with one message
  of each (role, kind) mutated;
* :mod:`~fedsec.testing.flower_standin` -- a Flower app used to test deployment mechanics.
"""
