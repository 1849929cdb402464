"""Masked-LM training: BERT's masking of padded windows, and the shared loop over them.

:mod:`skbert.pretraining` trains with it (:func:`~skbert.pretraining.further_pretrain` and the
within-task phase of ``BertTextClassifier(mlm_steps=...)``); the windows come from
:func:`skbert.pretraining.masked_lm_windows`.

Masking is BERT's (15 % of the tokens, of which 80 % become the mask token, 10 % a random token,
10 % stay; optionally whole words), drawn exactly as transformers 5's
``DataCollatorForLanguageModeling`` draws it but without depending on that class, whose
arguments changed across the supported transformers versions. Whole words are the tokenizer's
own (its ``word_ids``: BERT's tokenizers split at spaces and punctuation and make each Chinese
or Japanese character a word), where that collator groups pieces by adjoining character spans
(a run of characters without spaces, a word with its full stop, were one word to it).
"""

from __future__ import annotations

import numpy as np
import torch

from .._core.rng import seeded
from .._nn.network import MaskedLMNetwork
from .._text.encoding import pad_features
from .loop import length_grouped_batches, train

__all__ = ["MaskedBatch", "check_same_encoder", "mask_batch", "train_masked_lm"]


def train_masked_lm(
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
    """Train ``mlm_model`` in place on ``features`` with the shared loop.

    Parameters
    ----------
    mlm_model : transformers ``*ForMaskedLM`` model
    tokenizer : its tokenizer
    features : list of dict, from :func:`skbert.pretraining.masked_lm_windows`
    config : skbert._training.loop.TrainingConfig
        Its ``max_steps`` (or ``max_epochs``) bounds the training.
    mlm_probability, whole_word_mask : see :func:`skbert.pretraining.further_pretrain`
    seed : int

    Returns
    -------
    skbert._training.loop.TrainingHistory
        ``loss_curve`` holds the mean masked-LM loss per epoch.
    """
    if tokenizer.mask_token is None:
        raise ValueError(f"{type(tokenizer).__name__} has no mask token; cannot mask tokens.")
    lengths = [len(f["input_ids"]) for f in features]
    device = config.device

    def make_batches(rng):
        batches = length_grouped_batches(lengths, config.batch_size, rng)
        seeds = rng.randint(2**31 - 1, size=len(batches))
        return [MaskedBatch(rows, int(seed)) for rows, seed in zip(batches, seeds, strict=True)]

    def loss_fn(network, batch):
        inputs = batch.masked(features, tokenizer, mlm_probability, whole_word_mask)
        n_masked = int((inputs["labels"] != -100).sum())
        inputs = {k: v.to(device) for k, v in inputs.items()}
        return network(**inputs), n_masked  # the mean over the masked tokens, and their number

    return train(MaskedLMNetwork(mlm_model), loss_fn, make_batches, config, seed=seed, desc=desc)


class MaskedBatch:
    """A training batch of windows with the seed of its masks.

    The masks are drawn for the whole batch from the batch's own seed, then a process takes its
    rows: so a ``torchrun`` launch masks each window as one process does, whatever the share.

    Parameters
    ----------
    indices : ndarray of int
        The global batch's windows.
    seed : int
        Seed of the batch's masks.
    rows : slice
        This process's part of the batch (all of it outside a launch).
    """

    __slots__ = ("indices", "seed", "rows")

    def __init__(self, indices, seed: int, rows=slice(None)):
        self.indices, self.seed, self.rows = indices, seed, rows

    def __len__(self) -> int:
        return len(range(*self.rows.indices(len(self.indices))))

    def share(self, share):
        """This batch as seen by ``share``'s process: the same masks, its own rows."""
        positions = share.rows(len(self.indices))
        end = positions[-1] + 1 if len(positions) else 0
        return MaskedBatch(self.indices, self.seed, slice(end - len(positions), end))

    def masked(self, features, tokenizer, mlm_probability, whole_word_mask) -> dict:
        """:func:`mask_batch` of the whole batch under the batch's seed, then this share's rows
        (padding columns that none of them needs dropped)."""
        with seeded(self.seed):  # the CPU's generator only: the GPU's dropout is the step's
            rows = [features[i] for i in self.indices]
            inputs = mask_batch(rows, tokenizer, mlm_probability, whole_word_mask)
        if self.rows == slice(None):
            return inputs
        inputs = {key: value[self.rows] for key, value in inputs.items()}
        used = inputs["attention_mask"].any(dim=0)
        return {key: value[:, used] for key, value in inputs.items()}


def mask_batch(rows, tokenizer, mlm_probability=0.15, whole_word_mask=False) -> dict:
    """Pad windows into a batch and mask their tokens for masked-LM training.

    ``mlm_probability`` of the tokens that are no special token are chosen (with
    ``whole_word_mask``, that share of the words, all their pieces); 80 % of them become the
    mask token, 10 % a random token, 10 % stay (with ``whole_word_mask``, all become the mask
    token). The draws come from the global torch RNG, in the order and with the probabilities
    of transformers 5's ``DataCollatorForLanguageModeling``, so a seed gives the same masks
    (with ``whole_word_mask``, where its words and the tokenizer's agree); but where that
    would choose nothing in the whole batch (short windows, small batches), one token (or
    word) is chosen at random, so that every batch has a loss.

    Parameters
    ----------
    rows : list of dict
        Windows from :func:`skbert.pretraining.masked_lm_windows` (with ``word_ids`` for
        whole words).
    tokenizer : transformers tokenizer
        Gives the pad and mask token ids, the vocabulary size and the padding side.
    mlm_probability : float, default=0.15
        Share of the tokens (or words) to choose.
    whole_word_mask : bool, default=False
        Choose whole words (the word pieces of one word of the tokenizer's ``word_ids``).

    Returns
    -------
    dict of torch.Tensor
        ``input_ids`` (masked), ``attention_mask`` and ``labels`` (-100 where not chosen).
    """
    left = tokenizer.padding_side == "left"
    padded = pad_features(rows, tokenizer.pad_token_id or 0, left=left)
    input_ids = torch.from_numpy(padded["input_ids"])
    special = padded["special_tokens_mask"].astype(bool)
    labels = input_ids.clone()
    if whole_word_mask:
        word_ids, first_pieces = _word_ids(padded["word_ids"], special)
        can_choose = torch.from_numpy(first_pieces)
    else:
        can_choose = torch.from_numpy(~special)
    probability = torch.full(labels.shape, float(mlm_probability))
    probability.masked_fill_(~can_choose, 0.0)
    chosen = torch.bernoulli(probability).bool()
    if not chosen.any():  # a batch without a target has no loss (NaN): choose one anyway
        candidates = can_choose.flatten().nonzero().flatten()
        pick = candidates[torch.randint(len(candidates), ())]
        chosen.view(-1)[pick] = True
    if whole_word_mask:  # a chosen first piece chooses its whole word
        same_word = (word_ids[:, :, None] == word_ids[:, None, :]) & (word_ids[:, None, :] >= 0)
        chosen = torch.from_numpy(np.any(same_word & chosen.numpy()[:, None, :], axis=2))
    labels[~chosen] = -100
    mask_share = 1.0 if whole_word_mask else 0.8
    to_mask = torch.bernoulli(torch.full(labels.shape, mask_share)).bool() & chosen
    input_ids[to_mask] = tokenizer.mask_token_id
    if not whole_word_mask:  # half the rest (10 % of the chosen) become a random token
        to_random = torch.bernoulli(torch.full(labels.shape, 0.5)).bool() & chosen & ~to_mask
        random_ids = torch.randint(len(tokenizer), labels.shape, dtype=torch.long)
        input_ids[to_random] = random_ids[to_random]
    attention = torch.from_numpy(padded["attention_mask"])
    return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}


def _word_ids(words, special):
    """Word id of each token of the batch (-1 for special tokens), numbered in each row, and
    where each word's first piece is: a token starts a word unless it is of the previous
    token's word (a window's first token starts one, the rest of its word before the cut)."""
    previous = np.roll(words, 1, axis=1)
    previous_special = np.roll(special, 1, axis=1)
    previous_special[:, 0] = True
    first = ~special & ((words != previous) | previous_special)
    word_ids = np.cumsum(first, axis=1)
    word_ids[special] = -1
    return word_ids, first


def check_same_encoder(backbone, encoder, model) -> None:
    """Refuse a ``backbone`` whose weights (but the pooler's) differ in names or shapes from
    ``encoder``'s, the masked-LM model of ``model``: before training on it, not after."""
    shapes = [
        {name: value.shape for name, value in module.state_dict().items() if "pooler" not in name}
        for module in (backbone, encoder)
    ]
    if shapes[0] != shapes[1]:
        raise ValueError(
            f"backbone (a {type(backbone).__name__}) is not the encoder of model={model!r} (a "
            f"{type(encoder).__name__}): their weights differ in names or shapes."
        )
