"""Further masked-LM pre-training on unlabelled text (Sun et al. 2019, section 5.2).

Sun et al. found that continuing BERT's masked-LM training on the task's own texts
(within-task, "ITPT") or on texts of the same domain ("IDPT") before fine-tuning lowers the
error of the fine-tuned classifier. :func:`further_pretrain` does that and writes a Hugging Face
checkpoint directory that every skbert estimator takes as ``model=``;
``BertTextClassifier(mlm_steps=...)`` does the within-task variant inside ``fit``, so that
``GridSearchCV`` can compare BERT-FiT and BERT-ITPT-FiT.

Texts are cut into windows as ``truncation="chunks"`` cuts them (all of a text, once, in
order). Masking is BERT's (15 % of the tokens: 80 % of them masked, 10 % random, 10 % kept;
optionally whole words), drawn as transformers 5's ``DataCollatorForLanguageModeling`` draws
it, without that class, whose arguments changed across transformers versions
(:func:`mask_batch`); the loop is skbert's shared one (``skbert._training.masked_lm``).
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from numbers import Integral, Real

import torch
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import HasMethods, StrOptions, validate_params

from ._core.devices import resolve_device, resolve_precision
from ._core.flops import training_flops
from ._core.launch import current_share
from ._core.messages import report, user_stacklevel
from ._core.rng import rng_lock, seeded
from ._estimator.constraints import RANDOM_STATE, Number
from ._estimator.model_source import fitted_encoder_source, load_encoder
from ._estimator.pretrained_folder import write_pretrained
from ._estimator.validation import check_texts
from ._nn.backbone import (
    DEFAULT_MODEL,
    SpecialTokens,
    float32_weights,
    loading_errors,
    locate_model,
    model_max_length,
    quiet_loading,
)
from ._storage.files import check_output_dir
from ._text.encoding import text_windows
from ._training.distributed import barrier, shared_seed
from ._training.loop import TrainingConfig
from ._training.masked_lm import check_same_encoder, mask_batch, train_masked_lm
from ._training.rank_failures import leave_after

__all__ = [
    "further_pretrain",
    "load_masked_lm",
    "masked_lm_windows",
    "mask_batch",
    "within_task_pretrain",
]


def load_masked_lm(model=DEFAULT_MODEL):
    """Load ``(tokenizer, masked-LM model)`` for ``model``, in float32.

    Parameters
    ----------
    model : str or fitted skbert estimator
        Hub id, local directory, or a fitted estimator (its fine-tuned encoder gets a new
        masked-LM head of the architecture's kind).

    Returns
    -------
    tokenizer : transformers tokenizer
        The model's tokenizer.
    model : transformers.PreTrainedModel
        The ``AutoModelForMaskedLM`` model, in float32.

    Raises
    ------
    ValueError
        When the architecture has no masked-LM head in ``transformers`` (e.g. GPT-2).

    Warns
    -----
    UserWarning
        When the checkpoint has no trained masked-LM head (sentence-transformers checkpoints
        such as all-MiniLM-L6-v2 keep only the encoder): the head starts from random weights
        (tied to the word embeddings where the model ties them); the first steps train it.
    """
    fitted = fitted_encoder_source(model)
    if fitted is not None:
        tokenizer, backbone = load_encoder(fitted)
        config = backbone.config
        name = type(fitted).__name__
    else:
        source, name = locate_model(model), model
        with quiet_loading() as transformers, loading_errors(model, source):
            tokenizer = transformers.AutoTokenizer.from_pretrained(source, use_fast=True)
            config = transformers.AutoConfig.from_pretrained(source)
    # the new head's random weights: one thread at a time
    with rng_lock(), quiet_loading() as transformers:
        AutoModelForMaskedLM = transformers.AutoModelForMaskedLM
        if type(config) not in AutoModelForMaskedLM._model_mapping:
            raise ValueError(
                f"model={name!r} is a {config.model_type!r} model, which has no masked-LM head "
                "in transformers, so it cannot be pre-trained further with masked-LM. Use an "
                "encoder such as BERT, ALBERT, RoBERTa, MiniLM, ELECTRA or DeBERTa."
            )
        if fitted is not None:
            mlm = AutoModelForMaskedLM.from_config(config, **float32_weights())
            result = mlm.base_model.load_state_dict(backbone.state_dict(), strict=False)
            if [k for k in result.unexpected_keys if "pooler" not in k]:
                raise ValueError(f"{name}'s encoder does not fit {type(mlm).__name__}.")
            prefix = mlm.base_model_prefix + "."
            missing = [k for k in mlm.state_dict() if not k.startswith(prefix)]
            info = {"missing_keys": missing + list(result.missing_keys)}
            del backbone
        else:
            with loading_errors(model, source):
                mlm, info = AutoModelForMaskedLM.from_pretrained(
                    source, output_loading_info=True, **float32_weights()
                )
    head_missing = [k for k in info["missing_keys"] if "pooler" not in k]
    if head_missing:
        tied = getattr(mlm.config, "tie_word_embeddings", True)
        projection = "tied to the word embeddings" if tied else "random too (not tied)"
        warnings.warn(
            f"model={name!r} has no trained masked-LM head: {len(head_missing)} weights (e.g. "
            f"{head_missing[0]!r}) start from random values, the output projection {projection}."
            " The first steps mostly train this head; give the pre-training enough steps "
            "(hundreds) for the encoder to gain from it.",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
    return tokenizer, mlm


def masked_lm_windows(tokenizer, texts, max_length: int, whole_word_mask: bool = False) -> list:
    """Tokenize ``texts`` into training windows of at most ``max_length`` tokens.

    Each text is tokenized whole (no special tokens, no truncation) and its tokens are cut
    into consecutive windows of ``max_length`` minus the special tokens, which are then added
    to each window; so long documents are read in full, once, in order (as Sun et al.'s
    further pre-training does), whatever the tokenizer's own overflow handling does. Texts
    without tokens (empty, blank) are dropped.

    Parameters
    ----------
    tokenizer : transformers tokenizer
        The model's tokenizer (a fast one for ``whole_word_mask``).
    texts : list of str
        The texts.
    max_length : int
        Tokens per window, special tokens included.
    whole_word_mask : bool, default=False
        Also return each token's word (``word_ids``: the tokenizer's ``word_ids``, numbered
        in each text; -1 for the special tokens), which whole-word masking groups pieces by.

    Returns
    -------
    list of dict
        Features for :func:`mask_batch`: ``input_ids``, ``attention_mask``,
        ``special_tokens_mask`` (and ``word_ids`` for whole-word masking).

    Raises
    ------
    ValueError
        If no text has a token, ``max_length`` leaves no room for content tokens, or
        ``whole_word_mask`` is asked of a slow tokenizer.
    """
    texts = [t for t in texts if t and t.strip()]
    if whole_word_mask and not getattr(tokenizer, "is_fast", False):
        raise ValueError("whole_word_mask=True needs a fast tokenizer (its word_ids).")
    specials = SpecialTokens.from_tokenizer(tokenizer)
    width = max_length - specials.n_single
    if width < 1:
        raise ValueError(
            f"max_length={max_length} leaves no room for text: the tokenizer adds "
            f"{specials.n_single} special tokens to every window."
        )
    features = []
    for start in range(0, len(texts), 1024):  # bounded memory for large corpora
        with quiet_loading():  # no "longer than the model's maximum" warning: cut below
            encoded = tokenizer(
                texts[start : start + 1024],
                add_special_tokens=False,
                truncation=False,
                return_attention_mask=False,
                return_token_type_ids=False,
            )
        for i, ids in enumerate(encoded["input_ids"]):
            words = _words(encoded.word_ids(i)) if whole_word_mask else None
            features.extend(text_windows(ids, width, specials, words))
    if not features:
        raise ValueError("masked-LM pre-training needs non-empty texts; got none.")
    return features


def _words(word_ids) -> list:
    """The tokenizer's word of each token, a token of no word (None) a word of its own.

    A fast tokenizer's ``word_ids`` are the words of its pre-tokenizer: BERT's split at
    whitespace and punctuation and make each CJK character a word (BERT's whole-word
    masking); SentencePiece's split at spaces; byte-level BPE's keep a word's bytes together
    (the two bytes of "é"), which grouping pieces by character spans split.
    """
    words, current, previous = [], -1, None
    for word in word_ids:
        if word is None or word != previous:
            current += 1
        words.append(current)
        previous = word
    return words


# The constraints of the parameters that further_pretrain and within_task_pretrain share.
_MASKED_LM_CONSTRAINTS = {
    "model": [str, os.PathLike, HasMethods(["save_pretrained", "get_params"])],
    "mlm_probability": [Number(Real, 0, 1, closed="neither")],
    "batch_size": [Number(Integral, 1, None, closed="left")],
    "learning_rate": [Number(Real, 0, 1, closed="right")],
    "weight_decay": [Number(Real, 0, None, closed="left")],
    "warmup_fraction": [Number(Real, 0, 1, closed="both")],
    "device": [str],
    "precision": [StrOptions({"auto", "fp32", "bf16", "fp16"})],
    "verbose": ["verbose"],
}


@validate_params(
    {
        **_MASKED_LM_CONSTRAINTS,
        "texts": ["array-like"],
        "output_dir": [str, os.PathLike],
        "whole_word_mask": ["boolean"],
        "max_steps": [Number(Integral, 1, None, closed="left"), None],
        "max_epochs": [Number(Integral, 1, None, closed="left")],
        "max_length": [Number(Integral, 8, None, closed="left")],
        "random_state": RANDOM_STATE,
    },
    prefer_skip_nested_validation=True,
)
def further_pretrain(
    texts,
    output_dir,
    *,
    model=DEFAULT_MODEL,
    mlm_probability=0.15,
    whole_word_mask=False,
    max_steps=None,
    max_epochs=1,
    max_length=128,
    batch_size=32,
    learning_rate=5e-5,
    weight_decay=0.01,
    warmup_fraction=0.1,
    random_state=None,
    device="auto",
    precision="auto",
    verbose=1,
):
    """Continue masked-LM pre-training of ``model`` on unlabelled ``texts``; save the result.

    Within-task pre-training (Sun et al.'s ITPT) passes the task's training texts; in-domain
    pre-training (IDPT) texts of the same domain. The saved directory is a standard Hugging Face
    checkpoint (the masked-LM model and the tokenizer): pass it as ``model=`` to
    :class:`~skbert.BertTextClassifier` or :class:`~skbert.BertSentenceTransformer`, or load
    it with ``AutoModel`` / ``AutoModelForMaskedLM`` (which reports the encoder's pooler,
    kept for ``pooling="pooler"``, as an unexpected weight). A sentence-transformers
    ``model``'s pipeline description (``modules.json``, its pooling and ``Normalize``) is
    copied beside it, so ``normalize="auto"`` and sentence-transformers read the checkpoint
    as they read ``model`` (all-MiniLM-L6-v2's vectors stay unit length).

    Parameters
    ----------
    texts : array-like of str
        Unlabelled texts (or a 2-column array of sentence pairs, whose sentences are all
        used as texts). Texts longer than ``max_length`` tokens are cut into consecutive
        windows, all of which are trained on.
    output_dir : str or os.PathLike
        Directory to write the checkpoint to (created if missing).
    model : str, path or fitted skbert estimator, default="sentence-transformers/all-MiniLM-L6-v2"
        Hub id, local directory, or a fitted estimator (its fine-tuned encoder). Any
        architecture with a masked-LM head in ``transformers`` (BERT, ALBERT, RoBERTa, ...).
    mlm_probability : float, default=0.15
        Share of the tokens to mask (BERT's 15 %).
    whole_word_mask : bool, default=False
        Mask all the word pieces of a word together (needs a fast tokenizer): the tokenizer's
        words (BERT's split at spaces and punctuation and make each Chinese character a
        word); chosen words are then always replaced by the mask token (no random tokens, as
        in transformers' whole-word masking).
    max_steps : int or None, default=None
        Training steps (batches); overrides ``max_epochs`` when set. Sun et al. train 100,000.
    max_epochs : int, default=1
        Passes over the windows, when ``max_steps`` is None.
    max_length : int, default=128
        Tokens per window, special tokens included (capped at the model's limit).
    batch_size : int, default=32
        Windows per training step.
    learning_rate : float, default=5e-5
        AdamW rate, in (0, 1] (Sun et al.: 5e-5), with linear warm-up over
        ``warmup_fraction`` of the steps and linear decay to 0.
    weight_decay : float, default=0.01
        AdamW weight decay, of the weights with 2 or more dimensions (not biases or norms).
    warmup_fraction : float, default=0.1
        Share of the steps with a linear warm-up of the learning rate.
    random_state : int, RandomState or None, default=None
        Seeds masking, dropout and batch order; the same seed repeats the run on the CPU.
    device : str, default="auto"
        ``"auto"`` (CUDA, then MPS, then CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``.
    precision : {"auto", "fp32", "bf16", "fp16"}, default="auto"
        Autocast precision of the training forward pass (``"auto"``: bf16/fp16 on CUDA for
        models at least as large as BERT-base, fp32 for smaller ones and elsewhere).
    verbose : int, default=1
        If > 0, show a progress bar with the running loss, and report the loss per epoch (on
        stderr).

    Returns
    -------
    str
        The checkpoint directory.

    Raises
    ------
    ValueError
        For a model without a masked-LM head, a tokenizer without a mask token, no non-empty
        text, a missing text (None, NaN: the message names its position), or a bad parameter
        value.
    TypeError
        For an item of ``texts`` that is not a str.
    NotADirectoryError
        If ``output_dir`` is an existing file (checked before training).

    Examples
    --------
    Masked-LM training on the demo reviews (real runs take thousands of steps), then:

    >>> from skbert import BertTextClassifier
    >>> from skbert.datasets import load_demo_sentiment
    >>> from skbert.pretraining import further_pretrain
    >>> X, y = load_demo_sentiment(return_X_y=True)
    >>> path = further_pretrain(X, "minilm-reviews", max_steps=20, max_length=64,
    ...                         batch_size=16, random_state=0, verbose=0)  # doctest: +SKIP
    >>> path  # doctest: +SKIP
    'minilm-reviews'
    >>> clf = BertTextClassifier(model=path, fine_tune="top", random_state=0)  # doctest: +SKIP
    >>> clf.fit(X[:200], y[:200]).classes_  # doctest: +SKIP
    array([0, 1])
    """
    output_dir = check_output_dir(output_dir, "output_dir")  # before, not after, training
    first, second = check_texts(texts, "texts")  # None, NaN: errors, not "None", "nan"
    texts = first + (second or [])
    seed = shared_seed(int(check_random_state(random_state).randint(2**31 - 1)))
    run = _MaskedLMRun(
        mlm_probability=mlm_probability,
        whole_word_mask=whole_word_mask,
        max_steps=max_steps,
        max_epochs=max_epochs,
        max_length=max_length,
        batch_size=batch_size,
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        warmup_fraction=warmup_fraction,
        seed=seed,
        device=device,
        precision=precision,
        verbose=verbose,
        desc="Masked-LM pre-training",
    )
    tokenizer, mlm, features, history = _train_masked_lm_of(model, texts, run)
    if verbose:
        curve = ", ".join(f"{loss:.3f}" for loss in history.loss_curve)
        steps = max_steps or max_epochs * math.ceil(len(features) / batch_size)
        report(
            f"masked-LM pre-training: {len(features)} windows, {steps} steps, loss per epoch "
            f"{curve}"
        )
    if current_share().writer:  # in a torchrun launch, rank 0 writes; the others wait for it
        try:
            write_pretrained(model, mlm, tokenizer, output_dir)
        except BaseException as error:  # the others wait in the barrier: let them go
            leave_after(error)
            raise
    barrier()
    return output_dir


@validate_params(
    {
        **_MASKED_LM_CONSTRAINTS,
        "backbone": [HasMethods(["load_state_dict", "state_dict"])],
        "texts": ["array-like"],
        "max_steps": [Number(Integral, 1, None, closed="left")],
        "max_length": [Number(Integral, 1, None, closed="left")],  # see masked_lm_windows
        "seed": [Number(Integral, 0, 2**32 - 1, closed="both")],  # numpy's seeds
    },
    prefer_skip_nested_validation=True,
)
def within_task_pretrain(
    backbone,
    texts,
    *,
    model,
    max_steps,
    max_length,
    mlm_probability=0.15,
    batch_size=32,
    learning_rate=5e-5,
    weight_decay=0.01,
    warmup_fraction=0.1,
    seed=0,
    device="auto",
    precision="auto",
    verbose=0,
):
    """Within-task masked-LM pre-training (Sun et al.'s ITPT) of ``backbone``, in memory.

    What ``BertTextClassifier(mlm_steps=...)`` runs in ``fit`` before fine-tuning: ``model``'s
    masked-LM model (:func:`load_masked_lm`; a new head's initial weights are drawn from
    ``seed``) is trained ``max_steps`` steps on the windows of ``texts``
    (:func:`masked_lm_windows`), then its encoder's weights replace ``backbone``'s (a pooler,
    which masked-LM models lack, is left as it is). The global RNGs are left as they were.

    Parameters
    ----------
    backbone : torch.nn.Module
        The Hugging Face encoder of ``model`` (``AutoModel``) to write the trained weights into.
    texts : array-like of str
        The task's texts (or a 2-column array of pairs: both sentences are used); empty ones
        are dropped, missing ones (None, NaN) refused.
    model : str or fitted skbert estimator
        Where ``backbone`` comes from: hub id, local directory or fitted estimator.
    max_steps : int
        Training steps (batches of ``batch_size`` windows).
    max_length : int
        Tokens per window, special tokens included.
    mlm_probability : float, default=0.15
        Share of the tokens to mask (BERT's 15 %), in (0, 1).
    batch_size : int, default=32
        Windows per training step.
    learning_rate : float, default=5e-5
        AdamW rate, in (0, 1], with linear warm-up over ``warmup_fraction`` of the steps and
        linear decay to 0.
    weight_decay : float, default=0.01
        AdamW weight decay, of the weights with 2 or more dimensions (not biases or norms).
    warmup_fraction : float, default=0.1
        Share of the steps with a linear warm-up of the learning rate.
    seed : int, default=0
        Seeds the new head, masking, dropout and batch order; the same seed repeats the run
        on the CPU.
    device : str, default="auto"
        ``"auto"`` (CUDA, then MPS, then CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``.
    precision : {"auto", "fp32", "bf16", "fp16"}, default="auto"
        Autocast precision of the training forward pass (``"auto"``: bf16/fp16 on CUDA for
        models at least as large as BERT-base, fp32 for smaller ones and elsewhere).
    verbose : int, default=0
        If > 0, show a progress bar with the running loss (on stderr).

    Returns
    -------
    list of float
        The mean masked-LM loss per pass over the windows.

    Raises
    ------
    ValueError
        For a model without a masked-LM head, a tokenizer without a mask token or no
        non-empty text.
    RuntimeError
        If the trained encoder's weights do not fit ``backbone``.

    See Also
    --------
    further_pretrain : The same training on any texts, saved as a checkpoint directory.
    skbert.BertTextClassifier : Its ``mlm_steps`` runs this function in ``fit``.

    Examples
    --------
    Twenty steps of 16 windows on the demo reviews (under one pass: one mean loss):

    >>> from transformers import AutoModel
    >>> from skbert.datasets import load_demo_sentiment
    >>> from skbert.pretraining import within_task_pretrain
    >>> texts = list(load_demo_sentiment().data)
    >>> model = "sentence-transformers/all-MiniLM-L6-v2"
    >>> backbone = AutoModel.from_pretrained(model)  # doctest: +SKIP
    >>> losses = within_task_pretrain(backbone, texts, model=model, max_steps=20,
    ...                               max_length=64, batch_size=16)  # doctest: +SKIP
    >>> len(losses)  # doctest: +SKIP
    1
    """
    run = _MaskedLMRun(
        max_steps=max_steps,
        max_length=max_length,
        mlm_probability=mlm_probability,
        batch_size=batch_size,
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        warmup_fraction=warmup_fraction,
        seed=seed,
        device=device,
        precision=precision,
        verbose=verbose,
        desc="Within-task masked-LM",
    )
    first, second = check_texts(texts, "texts")  # None, NaN: errors, not silently dropped
    _, mlm, _, history = _train_masked_lm_of(model, first + (second or []), run, backbone)
    result = backbone.load_state_dict(mlm.base_model.state_dict(), strict=False)
    left_out = [k for k in result.missing_keys + result.unexpected_keys if "pooler" not in k]
    if left_out:  # cannot happen for one checkpoint; guards against a mismatch
        raise RuntimeError(f"masked-LM weights do not fit the encoder: {left_out[:3]}")
    return history.loss_curve


@dataclass(frozen=True)
class _MaskedLMRun:
    """The settings of one masked-LM run, as :func:`further_pretrain` or
    :func:`within_task_pretrain` validated them: what :func:`_train_masked_lm_of` runs."""

    max_steps: int | None  # None: max_epochs passes over the windows
    max_length: int  # tokens per window, capped at the model's positions
    mlm_probability: float
    batch_size: int
    learning_rate: float
    weight_decay: float
    warmup_fraction: float
    seed: int  # the new head's initial weights, masking, dropout, batch order
    device: str
    precision: str
    verbose: int
    desc: str  # the progress bar's label
    whole_word_mask: bool = False
    max_epochs: int = TrainingConfig.max_epochs  # read only when max_steps is None

    def training_config(self, device: torch.device, dtype) -> TrainingConfig:
        """The loop's settings, on the resolved ``device`` and autocast ``dtype``."""
        return TrainingConfig(
            max_epochs=self.max_epochs,
            max_steps=self.max_steps,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            weight_decay=self.weight_decay,
            warmup_fraction=self.warmup_fraction,
            verbose=self.verbose,
            device=device,
            dtype=dtype,
        )


def _train_masked_lm_of(model, texts, run: _MaskedLMRun, backbone=None):
    """Load ``model``'s masked-LM model (a new head drawn from ``run.seed``, the global RNGs
    left as they were) and train it on the windows of ``texts``: the part that
    :func:`further_pretrain` and :func:`within_task_pretrain` share.

    Returns ``(tokenizer, mlm, features, history)``: the trained model, its windows and the
    :class:`~skbert._training.loop.TrainingHistory`; a ``backbone`` must fit the weights.
    """
    device = resolve_device(run.device)
    resolve_precision(run.precision, device)  # a bad value fails before the model loads
    with seeded(run.seed):  # a new masked-LM head's init: seeded too
        tokenizer, mlm = load_masked_lm(model)
    if backbone is not None:
        check_same_encoder(backbone, mlm.base_model, model)
    dtype = resolve_precision(run.precision, device, training_flops=training_flops(mlm))
    # the positions the model has (RoBERTa's scheme reserves some), as the estimators cap
    width = min(run.max_length, model_max_length(tokenizer, mlm.config))
    features = masked_lm_windows(tokenizer, texts, width, run.whole_word_mask)
    history = train_masked_lm(
        mlm,
        tokenizer,
        features,
        run.training_config(device, dtype),
        mlm_probability=run.mlm_probability,
        whole_word_mask=run.whole_word_mask,
        seed=run.seed,
        desc=run.desc,
    )
    return tokenizer, mlm, features, history
