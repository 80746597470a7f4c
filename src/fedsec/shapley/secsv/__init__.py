"""SecSV (Zheng et al., Sec. 5, Alg. 3-4, 6-7): two servers, BFV-encrypted models, shared data.

Modules, by role: :mod:`~fedsec.shapley.secsv.client` (the clients),
:mod:`~fedsec.shapley.secsv.principal` (server P), :mod:`~fedsec.shapley.secsv.auxiliary`
(server A), :mod:`~fedsec.shapley.secsv.server` (what P and A share),
:mod:`~fedsec.shapley.secsv.common` (parameters and layout every role agrees on) and
:mod:`~fedsec.shapley.secsv.runner` (the in-process run: a loop over a
:class:`~fedsec.protocol.network.Network`, ``secsv_shapley``).

Roles and messages (everything between roles is bytes, carried and counted by the
network; roles ``"client:<i>"``, ``"P"``, ``"A"``):

* **clients** ``0..n-1`` run the authenticated key set-up (:mod:`fedsec.crypto.keysetup`,
  the principal server relays it) and derive the *same* BFV keys from its shared seed
  (:meth:`fedsec.crypto.bfv.BFVContext.from_seed`); the servers never get a secret key.
  Each client encrypts its local models (the leader also the global models) in Matrix
  Reducing layout and sends them to both servers, and splits its test data and labels into
  additive shares modulo the BFV plaintext prime ``t`` — one share to the **principal
  server P**, the other to the **auxiliary server A** (Alg. 3, step 3).
* **P and A** evaluate every layer's linear map on their own share with c2p products
  (Matrix Reducing "Half", Alg. 5); A sends its encrypted share product to P, who adds them
  (Alg. 4, steps 4-6), masks what the decryptor must not see, and sends the sum to the
  decrypting client ``i_{l+1}``. That client decrypts, centres, rescales, activates and
  re-shares the next layer's input to P and A (steps 7-9); after the last layer it deals a
  *zero test* of its predicted labels instead of sharing them (steps 11-14, departing from
  the paper, :func:`fedsec.crypto.sharing.zero_test_deal`): P gets ``(b', g')``, A gets
  ``(r, b'', g'')`` with ``r`` uniform non-zero and ``g = r·(Ŷ − b)``; P sends A
  ``f' = Y' − b'``, A returns ``g'' − r·(Y − b)``, and P opens ``r·(Ŷ − Y)`` mod ``t``:
  zero exactly for the correctly predicted samples, whose IDs ``Φ`` it records.
* **Who decrypts what** (``schedule="strict"``, the default; fedsec departs from the
  paper here): the decryption rule of :mod:`fedsec.shapley.views`. Prop. 6.8 keeps a
  client from decrypting its own model's output and its own samples, but a client also
  *knows* the global models ``θ^t``, ``θ^{t+1}`` and their combinations with its own
  model, and a first layer's output is linear in the batch: a client asked to decrypt
  ``θ^t``'s output on another client's batch (which Prop. 6.8 allows) solves for the
  batch, and then for models. So every batch has one owner; the owner evaluates the
  models it knows (``θ^t``, ``θ^{t+1}``, everybody but itself) on its own samples; every
  other coalition's first-layer output goes to a client whose whole view (every output it
  decrypted, per sample, over all rounds) then holds no combination that is a model it
  knows; later layers never go to a client that knows the model. P's
  :class:`~fedsec.shapley.views.Scheduler` places the decryptions (for exact SSVs all of
  them before any model is encrypted) and refuses the run
  (:class:`~fedsec.shapley.views.UnsafeSchedule`) when it finds no placement -- with
  every client in every round of a small federation none exists (the module
  says why); estimators with small budgets and rounds that leave clients out schedule.
  Each client keeps its own view and refuses a request that breaks the rule
  (:class:`~fedsec.errors.PolicyViolation`), so a P that schedules wrongly is stopped by
  the clients. ``schedule="paper"`` restores Prop. 6.8's schedule below, with a
  :class:`~fedsec.errors.PrivacyWarning`.
* Prop. 6.8's schedule (``schedule="paper"``): batches mix the samples of a *group* of
  clients (P shuffles each group with cryptographic randomness). Who decrypts follows
  Prop. 6.8: ``i_{l+1} ≠ i_l`` (``i_1`` are the batch's owners), no owner of the model
  under test in the chain, and ``i_{L+1}`` not a batch owner; with enough clients the
  chain is all distinct (the multi-layer level, ``n >= L + 2`` with one batch owner);
  with fewer it alternates two clients and a :class:`~fedsec.errors.PrivacyWarning` says
  so; with too few, SecSV refuses. A client refuses to decrypt a request that breaks
  these rules.
* **SampleSkip** (Alg. 6-7) runs at P exactly as :class:`~fedsec.shapley.utility.RoundGame`
  does in the clear: P asks for a coalition's samples left to test, and where it runs
  them is P's choice of cost (:meth:`PrincipalServer.start_evaluation`):

  - with derived decryption (one-layer models, ``schedule="paper"``) the round's label
    table already holds every coalition: P reads the samples left to test from it, and
    the decrypting client sees the same request as without SampleSkip;
  - multi-layer models with the linearity shortcut and ``schedule="paper"``: *merged*
    evaluations. The first layer runs on the round's fixed batches (their cached
    products; skipped columns masked with uniform noise), one decryption per fixed
    batch by the chain's first client, who re-shares the next layer's input there as
    usual; P and A keep the tested columns of several fixed batches and run the later
    layers on them packed into one batch (fewer hidden-layer products and decryptions:
    the savings grow with the skipped share). P announces a merged evaluation to A as
    its fixed batches and their tested columns (``sources`` in ``secsv/eval``); a later
    layer's decryption request names those fixed batches, so that its client refuses a
    layer adjacent to one it decrypted on any of them (its own memory). A packed batch
    may mix the samples of several Prop. 6.8 groups as long as the chain still finds its
    ``L`` (or two) clients outside their owners and the coalition's model owner (an
    aggregated model has none) -- the chain's rules are unchanged;
  - one-layer models without derived decryption: fixed batches (skipped columns
    masked) or the samples re-packed into fewer batches, whichever P prices lower;
    without the linearity shortcut always re-packed;
  - under ``schedule="strict"`` with the shortcut: always the fixed batches (the
    decryption rule's placements are planned per fixed batch).

  Masked (skipped) columns have their zero test voided: P opens uniform values there,
  not ``r·(0 − y)``, which would be zero where ``y = 0``. What SampleSkip shows A: the
  samples each coalition tests (a re-packed batch's rows, a merged batch's columns),
  i.e. the skipped sets ``Ψ_S`` that P derives from ``Φ`` -- which samples some split
  of ``S`` predicts right, never a label or a prediction. A decrypting client sees how
  many samples of a batch are tested (and, masked, which columns), as before.

Exactness (why BFV): products are exact modulo ``t`` (a 59-bit prime by default). P picks
the fixed point **per layer** (``f_θ,l`` for the weights, ``f_x,l`` for the layer's input;
:mod:`fedsec.shapley.fixed_point`) from powers-of-two bounds every model and data owner
publishes (``secsv/bounds``: ``‖W‖_∞``, ``‖b‖_∞`` per layer of each model it uploads,
``‖X_i‖_∞``, and the largest input of each hidden layer when it runs the models it knows
-- its own and the global models -- on its own test data; a leak of a few bits of
magnitude per layer and round, of the kind P's per-batch bounds already show), leaving
3 bits of margin under ``t/2``: hidden-layer inputs of coalition models are bounded by the
smaller of the rigorous chain of norms and 8 times what the clients observed, and the
room left is split between weights and inputs by their share of the rounding error. The
exact fixed-point budget ``Σ_{i∈S} q_i·(‖W_i‖_∞·‖x‖_∞ + ‖b_i‖_∞)·2^{f_θ,l+f_x,l} < t/2``
(integer aggregation weights ``q_i``, the actual re-shared bound ``‖x‖_∞``) is still
checked by P *before* computing each layer; a violation raises
:class:`~fedsec.crypto.sharing.FixedPointOverflow` (naming the layer, the round and the
levers: a larger plaintext prime, clipped weights, pinned fractional bits) instead of
wrapping, and the decrypting client checks its centred values against the bound
(``ProtocolError`` otherwise). The result reports the bits chosen and the worst-case error
of the final scores they permit (``SecureShapleyResult.fixed_point``).

Beyond the paper (``linear_shortcut=True``, default): the first layer is linear in the
model and ``θ_S = Σ ω_{i|S} θ_i``, so ``lin(θ_S, X) = Σ ω_{i|S} lin(θ_i, X)``: P and A compute
``n + 1`` local products per round once, and every subset's first-layer output is a
plaintext-weighted sum of ciphertexts. For one-layer (logistic) models this removes the
``2^n`` factor from the HE work. The decrypting client sees exactly what the paper's
protocol shows it (the first-layer output of ``θ_S`` on the batch, up to a public scale).

Derived decryption (``derived_decryption``, only with ``schedule="paper"``, where it is the
default for one-layer models with the shortcut, exact SSVs and no SampleSkip; the rule
refuses it -- the client would hold the global model's output on the batch, and its own
model's by subtraction, every round): one decryption request per batch and round instead of one
per coalition. P sends the batch's decrypting client ``d`` (not a batch owner) the global
model's output, ``q_i·lin(θ_i, X_b)`` of every *other* participant and, if ``d``
participates, one pair ``q_d·lin(θ_d, X_b) + q_p·lin(θ_p, X_b)`` (``p`` the first other
participant: the term list is fixed by the participants, so P's metadata alone cannot
relabel a ciphertext); ``d`` derives every
coalition's output exactly (``Σ_{i∈S} q_i·lin(θ_i, X_b)``, checked against P's bounds),
predicts, and deals the zero test of the ``2^k`` coalitions' labels (one ``b`` per sample,
a fresh ``r`` per coalition and sample), from which P opens every ``r_S·(Ŷ_S − Y)``.
What ``d`` learns is what the paper's protocol shows a client that P
picks to decrypt every coalition but ``{d}`` on batch ``b`` -- a schedule Prop. 6.8
allows (it forbids decrypting one's own samples or one's own model's *singleton*): in
particular ``d`` learns ``lin(θ_d, X_b)``, as it would in the paper by subtracting ``{p}``
from ``{d, p}``. It never receives its own singleton or its own samples, and refuses a
request that asks for either, or a label table of more than ``2^22`` coalition × sample
entries (P decrypts per coalition beyond it). P learns, per coalition and sample, whether
the prediction is right, as in the per-coalition protocol. With SampleSkip the mode stays
on (P reads the samples left to test from the table: the client sees nothing new, and
SampleSkip saves nothing -- every coalition's labels come from the same ``k + 2``
decryptions); with an estimator it is off (the paper would show the client fewer
coalitions); ``derived_decryption=False`` restores
one request per coalition with rotating decryptors.

Folded Matrix Reducing: when a batch uses fewer than ``⌊N/d_out⌋`` columns, ``c`` diagonals
share one ciphertext (in separate slot segments), cutting model encryptions and products
by ``c``; P adds a random mask whose segments sum to 0 (and uniform noise in skipped
columns), so the decryptor learns only the segment sum — the product — as in the paper.

Rotation layout (beyond the paper; :func:`fedsec.crypto.reducing.rotation_period`): when a
layer's (folded) grid fills both BFV batching rows in whole grid rows -- MNIST CNN's
256 -> 64 layer at width 32 -- the clients encrypt the model's rows in a layout where data
plaintext ``a·L + b`` is base ``a`` with both batching rows rotated by ``b`` grid rows. A
row rotation of an NTT-form plaintext is a permutation of its coefficients, so P and A
encode and NTT one base per ``L`` plaintexts and permute for the others
(:meth:`fedsec.crypto.bfv.BFVContext.rotations_ntt`): the same plaintexts, products and
decrypted values as encoding each one; no message changes size or meaning to any role but
the (public, plan-determined) order of the inner index in the model's ciphertexts.

Convolutions (:class:`LayerPlan`, :func:`im2col`): a conv layer is the kernel matrix
(``out_channels × C·k²``, bias per channel) times the im2col patches of the batch
(``C·k² × per·m``, ``per`` output positions per sample), not the unrolled ``d_out × d_in``
matrix: a model's conv layer is ``C·k²`` diagonals instead of ``d_in`` (MNIST CNN: 49
instead of 784), and so are P's and A's products. The clients share raw inputs as for a
dense layer; im2col is a public gather, so P and A unfold their own shares (shares of the
patches, exact mod ``t``, no extra bytes). The grid has ``out_channels`` rows and
``per·width`` columns (the same slots as ``d_out × width``); the decrypting client reads it
back as the channel-major ``(C_out, H_out, W_out)`` features the next layer expects.

Threat model: semi-honest P, A and clients; P and A do not collude (with each other, or
either with a client); the clients share the BFV secret key (as the paper's leader
broadcasts it). P learns ``Φ_S`` (the ID sets) and the utilities, as the paper states, and
nothing more of the labels: the paper's P reconstructs ``Ŷ − Y``, whose non-zero values
pin labels (the sign of a binary error is the label; over rounds P pinned 128 of 200 BANK
labels), so fedsec opens ``r·(Ŷ − Y)`` instead -- for a wrong prediction uniform over
the non-zero residues mod the prime ``t``, whatever the error. A learns nothing but
ciphertexts, uniform shares, the multipliers ``r`` and ``Y − b`` (uniform: ``b'`` is
unknown to it). The predicting client receives nothing back; colluding with A it would
learn the batch's labels (it knows ``b``), with P too (it knows ``r`` and ``Ŷ``) --
collusion is outside this threat model, and before the change P alone learned them. Why
the predicting client deals the test: it is the one role that knows ``Ŷ`` and nothing of
``Y``, so SecSV needs neither a dealer nor a homomorphic product (one under A's own BFV
key would need noise flooding: A, knowing its encryption noise, could read P's multiplier
off the decrypted noise). A decrypting client learns one layer's output on a batch of
other clients' samples (and, at the last layer, predicted labels), as in the paper, but
under the decryption rule never a combination of outputs that is a model it knows (so it
cannot solve for the samples by linear algebra; the paper's assumption that a linear
layer's output with *unknown* parameters reveals neither input nor parameters remains);
under ``schedule="paper"`` it can solve for other clients' samples; BFV ciphertexts are
not circuit-private (noise is not flooded), which the paper's CKKS protocol does not
provide either. Sizes and parameters in messages are checked by their receivers;
malformed bytes raise :class:`~fedsec.errors.ProtocolError`.

Replays and splices (:mod:`fedsec.protocol.binding`): every message carries its context
(the key set-up's session, ``secsv``, round, step, sender, recipient -- P and A get
different copies -- and the index ``(coalition, batch, layer)``) and is checked by its receiver
against its own state. P issues an id per evaluation (announced to A in ``secsv/eval``)
and per decryption request; the client echoes both; P takes each answer once and only for
the evaluation and layer in flight, A takes one re-share per layer of the evaluation it
was told about, then the label share and P's label mask. A checks P's batch list (each sample
once) and each evaluation (this round, a fresh id, a batch it knows). A client answers
each request id once, refuses a round earlier than one it served, and refuses a layer of
an evaluation of which it decrypted the same or an adjacent layer (its own memory, not
P's ``previous`` claim); it cannot tell the coalition or batch P *should* ask about (it
has no schedule), so a withheld and later replayed request of another evaluation of the
current round is decrypted but its answer is refused by P and A. Binding stops genuine
bytes used out of context; it does not authenticate them (no MAC), which a malicious
server or an attacker forging metadata would need.
"""

from __future__ import annotations

from fedsec.shapley.secsv.auxiliary import AuxiliaryServer
from fedsec.shapley.secsv.client import SecSVClient
from fedsec.shapley.secsv.common import ALL as ALL
from fedsec.shapley.secsv.common import SecSVConfig
from fedsec.shapley.secsv.common import grid_to_features as grid_to_features
from fedsec.shapley.secsv.common import im2col as im2col
from fedsec.shapley.secsv.principal import PrincipalServer
from fedsec.shapley.secsv.principal import pick_fixed_point as pick_fixed_point
from fedsec.shapley.secsv.runner import _setup as _setup
from fedsec.shapley.secsv.runner import round_infos as round_infos
from fedsec.shapley.secsv.runner import secsv_shapley

__all__ = ["SecSVConfig", "secsv_shapley", "SecSVClient", "PrincipalServer",
           "AuxiliaryServer"]
