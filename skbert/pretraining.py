"""Further masked-LM pre-training on unlabelled text (Sun et al. 2019, section 5.2).

Sun et al. found that continuing BERT's masked-LM training on the task's own texts
(within-task, "ITPT") or on texts of the same domain ("IDPT") before fine-tuning lowers the
error of the fine-tuned classifier. :func:`further_pretrain` does that and writes a Hugging Face
checkpoint directory that every skbert estimator takes as ``model=``;
``BertTextClassifier(mlm_steps=...)`` does the within-task variant inside ``fit``, so that
``GridSearchCV`` can compare BERT-FiT and BERT-ITPT-FiT.

Masking is transformers' ``DataCollatorForLanguageModeling`` (15 % of the tokens, of which 80 %
become the mask token, 10 % a random token, 10 % stay; optionally whole words); the loop is
skbert's shared one (AdamW, linear warm-up and decay, clipping, seeded).
"""

from __future__ import annotations

import math
import os
import warnings
from numbers import Integral, Real

import torch
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions, validate_params

from ._backbone import (
    DEFAULT_MODEL,
    fitted_encoder_source,
    load_backbone,
    loading_errors,
    locate_model,
    quiet_loading,
)
from ._network import MaskedLMNetwork
from ._runtime import report, resolve_device, resolve_precision
from ._training import TrainingConfig, length_grouped_batches, train
from ._validation import check_output_dir

__all__ = ["further_pretrain", "load_masked_lm", "masked_lm_windows"]


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
        (the output projection stays tied to the word embeddings), so the first steps mostly
        train the head.
    """
    from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer

    fitted = fitted_encoder_source(model)
    if fitted is not None:
        tokenizer, backbone = load_backbone(fitted)
        config = backbone.config
        name = type(fitted).__name__
    else:
        source, name = locate_model(model), model
        with quiet_loading(), loading_errors(model, source):
            tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True)
            config = AutoConfig.from_pretrained(source)
    if type(config) not in AutoModelForMaskedLM._model_mapping:
        raise ValueError(
            f"model={name!r} is a {config.model_type!r} model, which has no masked-LM head in "
            "transformers, so it cannot be pre-trained further with masked-LM. Use an encoder "
            "such as BERT, ALBERT, RoBERTa, MiniLM, ELECTRA or DeBERTa."
        )
    with quiet_loading():
        if fitted is not None:
            mlm = AutoModelForMaskedLM.from_config(config, dtype=torch.float32)
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
                    source, dtype=torch.float32, output_loading_info=True
                )
    head_missing = [k for k in info["missing_keys"] if "pooler" not in k]
    if head_missing:
        warnings.warn(
            f"model={name!r} has no trained masked-LM head: {len(head_missing)} weights "
            f"(e.g. {head_missing[0]!r}) start from random values, the output projection "
            "tied to the word embeddings. The first steps mostly train this head; give the "
            "pre-training enough steps (hundreds) for the encoder to gain from it.",
            UserWarning,
            stacklevel=2,
        )
    return tokenizer, mlm


def masked_lm_windows(tokenizer, texts, max_length: int, whole_word_mask: bool = False) -> list:
    """Tokenize ``texts`` into training windows of at most ``max_length`` tokens.

    A text longer than a window is cut into consecutive windows, so long documents are read in
    full (as Sun et al.'s further pre-training does); empty texts are dropped.

    Returns
    -------
    list of dict
        Features for ``DataCollatorForLanguageModeling``: ``input_ids``, ``attention_mask``,
        ``special_tokens_mask`` (and ``offset_mapping`` for whole-word masking).
    """
    texts = [t for t in texts if t and t.strip()]
    if not texts:
        raise ValueError("masked-LM pre-training needs non-empty texts; got none.")
    if whole_word_mask and not getattr(tokenizer, "is_fast", False):
        raise ValueError("whole_word_mask=True needs a fast tokenizer (offsets mapping).")
    features = []
    for start in range(0, len(texts), 1024):  # bounded memory for large corpora
        encoded = tokenizer(
            texts[start : start + 1024],
            truncation=True,
            max_length=max_length,
            return_overflowing_tokens=True,
            return_special_tokens_mask=True,
            return_offsets_mapping=whole_word_mask,
            return_token_type_ids=False,
        )
        encoded.pop("overflow_to_sample_mapping", None)
        keys = list(encoded.keys())
        features.extend(
            dict(zip(keys, row, strict=True)) for row in zip(*encoded.values(), strict=True)
        )
    return features


def _train_masked_lm(
    mlm_model,
    tokenizer,
    features,
    config,
    *,
    mlm_probability: float = 0.15,
    whole_word_mask: bool = False,
    seed: int = 0,
    desc: str = "Masked-LM pre-training",
):
    """Train ``mlm_model`` in place on ``features`` with the shared loop (internal: it takes
    the loop's :class:`~skbert._training.TrainingConfig`).

    Parameters
    ----------
    mlm_model : transformers ``*ForMaskedLM`` model
    tokenizer : its tokenizer
    features : list of dict, from :func:`masked_lm_windows`
    config : skbert._training.TrainingConfig
        Its ``max_steps`` (or ``max_epochs``) bounds the training.
    mlm_probability, whole_word_mask : see :func:`further_pretrain`
    seed : int

    Returns
    -------
    skbert._training.TrainingHistory
        ``loss_curve`` holds the mean masked-LM loss per epoch.
    """
    from transformers import DataCollatorForLanguageModeling

    if tokenizer.mask_token is None:
        raise ValueError(f"{type(tokenizer).__name__} has no mask token; cannot mask tokens.")
    # transformers' whole-word masking cannot put random tokens in: all chosen words are masked
    replace = {"mask_replace_prob": 1.0, "random_replace_prob": 0.0} if whole_word_mask else {}
    collator = DataCollatorForLanguageModeling(
        tokenizer, mlm_probability=mlm_probability, whole_word_mask=whole_word_mask, **replace
    )
    lengths = [len(f["input_ids"]) for f in features]
    device = config.device

    def make_batches(rng):
        return length_grouped_batches(lengths, config.batch_size, rng)

    def loss_fn(network, batch):
        # masking draws from the torch RNG, which the loop seeds: repeatable runs
        rows = [features[i] for i in batch]
        if whole_word_mask:
            rows = _pad_for_whole_words(rows, tokenizer.pad_token_id)
        inputs = collator(rows)
        inputs = {k: v.to(device) for k, v in inputs.items()}
        return network(**inputs)

    return train(MaskedLMNetwork(mlm_model), loss_fn, make_batches, config, seed=seed, desc=desc)


def _pad_for_whole_words(rows, pad_id) -> list:
    """Pad rows to one length, offsets included (``tokenizer.pad`` leaves offsets ragged)."""
    width = max(len(row["input_ids"]) for row in rows)
    fill = {
        "input_ids": pad_id,
        "attention_mask": 0,
        "special_tokens_mask": 1,
        "offset_mapping": (0, 0),
    }
    return [
        {key: list(values) + [fill[key]] * (width - len(values)) for key, values in row.items()}
        for row in rows
    ]


@validate_params(
    {
        "texts": ["array-like"],
        "output_dir": [str, os.PathLike],
        "model": [str, HasMethods(["save_pretrained", "get_params"])],
        "mlm_probability": [Interval(Real, 0, 1, closed="neither")],
        "whole_word_mask": ["boolean"],
        "max_steps": [Interval(Integral, 1, None, closed="left"), None],
        "max_epochs": [Interval(Integral, 1, None, closed="left")],
        "max_length": [Interval(Integral, 8, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "warmup_fraction": [Interval(Real, 0, 1, closed="both")],
        "random_state": ["random_state"],
        "device": [str],
        "precision": [StrOptions({"auto", "fp32", "bf16", "fp16"})],
        "verbose": ["verbose"],
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
    it with ``AutoModel`` / ``AutoModelForMaskedLM``.

    Parameters
    ----------
    texts : iterable of str
        Unlabelled texts. Texts longer than ``max_length`` tokens are cut into consecutive
        windows, all of which are trained on.
    output_dir : str or os.PathLike
        Directory to write the checkpoint to (created if missing).
    model : str or fitted skbert estimator, default="sentence-transformers/all-MiniLM-L6-v2"
        Hub id, local directory, or a fitted estimator (its fine-tuned encoder). Any
        architecture with a masked-LM head in ``transformers`` (BERT, ALBERT, RoBERTa, ...).
    mlm_probability : float, default=0.15
        Share of the tokens to mask (BERT's 15 %).
    whole_word_mask : bool, default=False
        Mask all the word pieces of a word together (needs a fast tokenizer); chosen words
        are then always replaced by the mask token (transformers' whole-word masking has no
        random-token replacement).
    max_steps : int or None, default=None
        Training steps (batches); overrides ``max_epochs`` when set. Sun et al. train 100,000.
    max_epochs : int, default=1
        Passes over the windows, when ``max_steps`` is None.
    max_length : int, default=128
        Tokens per window, special tokens included.
    batch_size : int, default=32
        Windows per training step.
    learning_rate : float, default=5e-5
        AdamW rate (Sun et al.: 5e-5), with linear warm-up over ``warmup_fraction`` of the
        steps and linear decay to 0.
    weight_decay : float, default=0.01
        AdamW weight decay; never applied to biases and LayerNorm weights.
    warmup_fraction : float, default=0.1
        Share of the steps with a linear warm-up of the learning rate.
    random_state : int, RandomState or None, default=None
        Seeds masking, dropout and batch order; the same seed repeats the run on the CPU.
    device : str, default="auto"
        ``"auto"`` (CUDA, then MPS, then CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``.
    precision : {"auto", "fp32", "bf16", "fp16"}, default="auto"
        Autocast precision of the training forward pass (``"auto"``: bf16/fp16 on CUDA,
        fp32 elsewhere).
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
        text, or a bad parameter value.
    NotADirectoryError
        If ``output_dir`` is an existing file (checked before training).

    Examples
    --------
    >>> from skbert import BertTextClassifier
    >>> from skbert.pretraining import further_pretrain
    >>> path = further_pretrain(unlabelled_reviews, "minilm-reviews", max_steps=2000,
    ...                         random_state=0)  # doctest: +SKIP
    >>> clf = BertTextClassifier(model=path).fit(texts, labels)  # doctest: +SKIP
    """
    output_dir = check_output_dir(output_dir, "output_dir")  # before, not after, training
    texts = [str(t) for t in texts]
    seed = int(check_random_state(random_state).randint(2**31 - 1))
    device = resolve_device(device)
    dtype = resolve_precision(precision, device)
    with torch.random.fork_rng(devices=[]):  # a new masked-LM head's init: seeded too
        torch.manual_seed(seed)
        tokenizer, mlm = load_masked_lm(model)
    limit = getattr(mlm.config, "max_position_embeddings", max_length)
    features = masked_lm_windows(tokenizer, texts, min(max_length, limit), whole_word_mask)
    config = TrainingConfig(
        max_epochs=max_epochs,
        max_steps=max_steps,
        batch_size=batch_size,
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        warmup_fraction=warmup_fraction,
        verbose=verbose,
        device=device,
        dtype=dtype,
    )
    history = _train_masked_lm(
        mlm,
        tokenizer,
        features,
        config,
        mlm_probability=mlm_probability,
        whole_word_mask=whole_word_mask,
        seed=seed,
    )
    if verbose:
        curve = ", ".join(f"{loss:.3f}" for loss in history.loss_curve)
        steps = max_steps or max_epochs * math.ceil(len(features) / batch_size)
        report(
            f"masked-LM pre-training: {len(features)} windows, {steps} steps, loss per epoch "
            f"{curve}"
        )
    with quiet_loading():
        mlm.to("cpu").save_pretrained(output_dir)
        tokenizer.save_pretrained(output_dir)
    return output_dir
