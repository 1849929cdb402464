"""Shared estimator base: parameter checks, loading, inference batching, tags, pickling."""

from __future__ import annotations

import io
import sys
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

from ._backbone import SpecialTokens, load_backbone, model_max_length, quiet_loading
from ._encoding import encode_texts, pad_batch, row_batches, stack_rows
from ._network import SentenceEncoder, check_layers
from .pooling import (
    CHUNK_POOLINGS,
    TOKEN_POOLINGS,
    TRAINABLE_CHUNK_POOLINGS,
    TRAINABLE_POOLINGS,
    make_chunk_pooling,
    make_pooling,
)
from .truncation import STRATEGIES

__all__ = ["BertEstimatorBase"]


class BertEstimatorBase(BaseEstimator):
    """Base of skbert's estimators: everything but the learning task.

    Subclasses define ``__init__`` (storing their parameters verbatim), ``fit`` and their
    prediction methods; they call :meth:`_build_network` in ``fit`` and :meth:`_embed` to get
    one vector per text.
    """

    _parameter_constraints: dict = {
        "model": [str, HasMethods(["save_pretrained", "get_params"])],
        "pooling": [StrOptions(set(TOKEN_POOLINGS))],
        "layer": [Integral, tuple],  # ranges are checked against the model in fit
        "layer_combine": [StrOptions({"concat", "mean", "max"})],
        "truncation": [StrOptions(set(STRATEGIES))],
        "max_length": [Interval(Integral, 3, None, closed="left"), None],
        "head_length": [Interval(Integral, 0, None, closed="left")],
        "chunk_pooling": [StrOptions(set(CHUNK_POOLINGS))],
        "max_chunks": [Interval(Integral, 1, None, closed="left"), None],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "device": [str],
        "precision": [StrOptions({"auto", "fp32", "bf16", "fp16"})],
        "verbose": ["verbose"],
    }

    #: constraints of the training parameters, for the estimators that train
    _training_constraints: dict = {
        "cnn_kernel_sizes": [tuple, list],
        "cnn_channels": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "layer_lr_decay": [Interval(Real, 0, 1, closed="right")],
        "head_learning_rate": [Interval(Real, 0, None, closed="neither"), None],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "warmup_fraction": [Interval(Real, 0, 1, closed="both")],
        "max_epochs": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "warm_start": ["boolean"],
    }

    # ------------------------------------------------------------------ fitting helpers
    def _check_trainable_choices(self, trains: bool) -> None:
        """Refuse poolings that have weights when nothing will train them."""
        if trains:
            return
        if self.pooling in TRAINABLE_POOLINGS:
            raise ValueError(
                f"pooling={self.pooling!r} has weights of its own that must be trained, and "
                f"fine_tune={self.fine_tune!r} trains nothing. Use pooling='cls', 'mean' or "
                "'max' for frozen features."
            )
        if self.truncation == "chunks" and self.chunk_pooling in TRAINABLE_CHUNK_POOLINGS:
            raise ValueError(
                f"chunk_pooling={self.chunk_pooling!r} has weights of its own that must be "
                f"trained, and fine_tune={self.fine_tune!r} trains nothing. Use "
                "chunk_pooling='mean' or 'max' for frozen features."
            )

    def _training_config(self, device, dtype, **extra):
        """The :class:`~skbert._training.TrainingConfig` of this estimator's parameters."""
        from ._training import TrainingConfig

        params = {
            "max_epochs": self.max_epochs,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "layer_lr_decay": self.layer_lr_decay,
            "head_learning_rate": self.head_learning_rate,
            "weight_decay": self.weight_decay,
            "warmup_fraction": self.warmup_fraction,
            "train_backbone": self.fine_tune == "full",
            "verbose": self.verbose,
            "device": device,
            "dtype": dtype,
        }
        return TrainingConfig(**{**params, **extra})

    def _build_encoder(self):
        """Load the encoder and tokenizer; return the :class:`SentenceEncoder`.

        Sets the learned state shared by all estimators: ``tokenizer_``, ``special_tokens_``,
        ``max_length_`` and ``layers_``.
        """
        tokenizer, backbone = load_backbone(self.model)
        self._set_text_state(tokenizer, backbone.config)
        hidden = backbone.config.hidden_size
        layers = self.layers_
        token_dim = hidden * len(layers) if self.layer_combine == "concat" else hidden
        cnn_params = {}
        if self.pooling == "cnn":
            cnn_params = {"kernel_sizes": tuple(self.cnn_kernel_sizes),
                          "channels": self.cnn_channels}  # fmt: skip
        pooling = make_pooling(self.pooling, token_dim, **cnn_params)
        pooled_dim = getattr(pooling, "output_dim", token_dim)
        return SentenceEncoder(
            backbone,
            layers=layers,
            layer_combine=self.layer_combine,
            pooling=pooling,
            chunk_pooling=make_chunk_pooling(self.chunk_pooling, pooled_dim),
        ).eval()

    def _set_text_state(self, tokenizer, config):
        """Check the length settings against the model; set ``tokenizer_``,
        ``special_tokens_``, ``max_length_`` and ``layers_``."""
        limit = model_max_length(tokenizer, config)
        max_length = limit if self.max_length is None else self.max_length
        if max_length > limit:
            raise ValueError(
                f"max_length={self.max_length} exceeds this model's limit of {limit} tokens; "
                f"use max_length <= {limit} or None (the model's limit)."
            )
        specials = SpecialTokens.from_tokenizer(tokenizer)
        budget = max_length - specials.n_single
        if self.truncation == "head+tail" and self.head_length >= budget:
            raise ValueError(
                f"head_length={self.head_length} leaves no room for the tail: with "
                f"max_length={max_length} and {specials.n_single} special tokens, "
                f"truncation='head+tail' needs head_length < {budget}."
            )
        layers = check_layers(self.layer, config.num_hidden_layers + 1)
        self.tokenizer_ = tokenizer
        self.special_tokens_ = specials
        self.max_length_ = max_length
        self.layers_ = layers

    # ------------------------------------------------------------------ inference
    def _encode(self, first, second=None):
        if second is not None and self.truncation == "chunks":
            raise ValueError(
                "truncation='chunks' splits single long texts and does not apply to sentence "
                "pairs; use 'head', 'tail' or 'head+tail' for pairs."
            )
        encoded = encode_texts(
            self.tokenizer_,
            self.special_tokens_,
            first,
            second,
            truncation=self.truncation,
            max_length=self.max_length_,
            head_length=self.head_length,
            max_chunks=self.max_chunks,
        )
        if self.verbose and encoded.n_truncated:
            how = (
                "split into chunks"
                if self.truncation == "chunks"
                else f"truncated (truncation={self.truncation!r})"
            )
            print(
                f"{type(self).__name__}: {encoded.n_truncated} of {len(encoded)} texts exceed "
                f"max_length={self.max_length_} tokens and were {how}.",
                file=sys.stderr,
            )
        return encoded

    def _batch_tensors(self, encoded, indices, device) -> dict:
        """Padded tensors for the texts ``indices`` of ``encoded``, as network keywords."""
        import torch

        ids, mask, types, owner = pad_batch(encoded, indices, self.tokenizer_.pad_token_id or 0)
        return {
            "input_ids": torch.from_numpy(ids).to(device),
            "attention_mask": torch.from_numpy(mask).to(device),
            "token_type_ids": torch.from_numpy(types).to(device),
            "owner": torch.from_numpy(owner).to(device) if self.truncation == "chunks" else None,
            "n_texts": len(indices),
        }

    def _device_and_dtype(self):
        from ._runtime import resolve_device, resolve_precision

        device = resolve_device(self.device)
        return device, resolve_precision(self.precision, device)

    def _inference_network(self, device, dtype):
        """``network_`` on ``device``, in eval mode; for bf16/fp16, a cached low-precision copy.

        A copy whose weights are already in bf16 (or fp16) is faster than autocast, which
        under ``inference_mode`` casts every weight again on every batch; on the CPU it also
        uses plain ("eager") attention, faster than the fused kernel in bf16 on short inputs.
        The copy is rebuilt after each ``fit`` and never pickled.
        """
        import copy

        network = self.network_.to(device).eval()
        if dtype is None:
            return network
        cached = getattr(self, "_low_precision", None)
        if cached is not None and cached[0] == (id(network), str(device), dtype):
            return cached[1]
        low = copy.deepcopy(network).to(device=device, dtype=dtype).eval()
        if device.type == "cpu" and hasattr(low.backbone, "set_attn_implementation"):
            low.backbone.set_attn_implementation("eager")
        self._low_precision = ((id(network), str(device), dtype), low)
        return low

    def _forward_all(self, first, second=None, *, desc="Encoding", all_layers=False):
        """``network_`` output for every text (or pair), float32, in input order.

        Rows (a text, or each chunk of one) are encoded in batches of equal length with no
        padding (:func:`~skbert._encoding.row_batches`), so a text's output does not depend on
        the other texts; then the chunks of each text are pooled (and a task head applied).
        With ``all_layers``, :meth:`SentenceEncoder.all_layer_rows` instead: shape
        ``(n, 3, n_hidden_states, hidden)``.
        """
        import torch
        from tqdm.auto import tqdm

        device, dtype = self._device_and_dtype()
        network = self._inference_network(device, dtype)
        encoded = self._encode(first, second)
        rows = [row for text_rows in encoded.rows for row in text_rows]
        owner = np.repeat(np.arange(len(encoded)), [len(r) for r in encoded.rows])
        if all_layers:
            encode, combine = network.all_layer_rows, network.combine_all_layers
        else:
            encode, combine = network.encode_rows, network.combine
        out = None  # (n_rows, ...) float32, allocated once the row width is known
        batches = list(row_batches([len(ids) for ids, _ in rows], self.batch_size))
        with torch.inference_mode():
            for batch in tqdm(batches, desc=desc, unit="batch", disable=not self.verbose):
                ids, types = stack_rows([rows[r] for r in batch])
                ids = torch.from_numpy(ids).to(device)
                vectors = encode(ids, torch.ones_like(ids), torch.from_numpy(types).to(device))
                if out is None:
                    out = np.empty((len(rows), *vectors.shape[1:]), dtype=np.float32)
                out[batch] = vectors.float().cpu().numpy()
            chunked = len(rows) > len(encoded)
            param = next(network.parameters())
            vectors = torch.from_numpy(out).to(device=device, dtype=param.dtype)
            texts = combine(
                vectors,
                torch.from_numpy(owner).to(device) if chunked else None,
                len(encoded),
            )
            return texts.float().cpu().numpy()

    # ------------------------------------------------------------------ sklearn plumbing
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.one_d_array = True
        tags.input_tags.two_d_array = True
        return tags

    # ------------------------------------------------------------------ export
    def save_pretrained(self, path):
        """Write the fitted encoder and its tokenizer as a Hugging Face checkpoint directory.

        The directory loads with ``transformers.AutoModel.from_pretrained`` and
        ``AutoTokenizer.from_pretrained``, and as ``model=path`` in any skbert estimator: the
        way to start one task from an encoder fine-tuned on another (Sun et al.'s multi-task
        recipe), or to share it. Only the encoder is written; the pooling and task head are
        skbert's (pickle or ``joblib.dump`` the estimator to keep them).

        Parameters
        ----------
        path : str or os.PathLike
            Directory to write (created if missing; files in it are overwritten).

        Returns
        -------
        path : str
        """
        import os

        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        path = os.fspath(path)
        with quiet_loading():  # no "Writing model shards" bar
            self.network_.backbone.save_pretrained(path)
            self.tokenizer_.save_pretrained(path)
        return path

    # ------------------------------------------------------------------ pickling
    def __getstate__(self):
        # a copy: object.__getstate__ returns the live __dict__ itself
        state = dict(super().__getstate__())
        state.pop("_low_precision", None)
        if "network_" in state:
            import torch

            buffer = io.BytesIO()
            torch.save(state["network_"], buffer)
            state["network_"] = buffer.getvalue()
        return state

    def __setstate__(self, state):
        network = state.get("network_")
        if isinstance(network, bytes):
            import torch

            # map_location: a model fitted on a GPU loads on a CPU-only machine.
            state["network_"] = torch.load(
                io.BytesIO(network), map_location="cpu", weights_only=False
            )
        super().__setstate__(state)
