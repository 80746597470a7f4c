"""Models as linear layers plus activations, the paper's tasks, FedAvg with recorded rounds.

Plaintext, no cryptography. The numpy parts -- :mod:`~fedsec.learning.model` (specs,
layers as matrices, forward pass, aggregation), :mod:`~fedsec.learning.record` (training
records as bytes) and :mod:`~fedsec.learning.tasks` -- import without PyTorch; training
(:mod:`~fedsec.learning.torch_net`, :func:`~fedsec.learning.fedavg.run_fedavg`) needs the
``learning`` extra (``pip install 'fedsec[learning]'``).

Your own model: :func:`model_spec` and :func:`model_params` read a PyTorch
``nn.Sequential`` or a fitted scikit-learn classifier
(:mod:`~fedsec.learning.adapters`), and
:meth:`TrainingRecord.from_client_models` builds the record of a training run done
outside fedsec.
"""

from fedsec.learning.adapters import as_params, model_params, model_spec
from fedsec.learning.model import (
    LayerSpec,
    LinearLayer,
    ModelSpec,
    accuracy,
    aggregate,
    forward,
    predict,
)
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.learning.tasks import TASKS, Federation, Task, make_task

__all__ = [
    "TASKS",
    "Federation",
    "LayerSpec",
    "LinearLayer",
    "ModelSpec",
    "RoundRecord",
    "Task",
    "TrainingRecord",
    "accuracy",
    "aggregate",
    "as_params",
    "forward",
    "make_task",
    "model_params",
    "model_spec",
    "predict",
]
